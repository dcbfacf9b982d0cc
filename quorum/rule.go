package quorum

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"
)

// The Redlock rule, for every operation: an outcome that needs a quorum
// (N/2+1 backends agreeing) holds when a quorum agreed; the opposite
// answer (not acquired, not held, not found) is given only when even every
// backend that did not answer agreeing could not have made a quorum;
// anything between is a *NoQuorumError. A lock taken or extended holds for
// its validity: TTL − elapsed − drift. Which backends' votes count at all
// (quarantine after a restart, one vote per redis-server) is in admit.go,
// and whether their clocks run at a rate the drift allowance covers in
// clock.go;
// undoing what a failed operation may have left is in lock.go (rollback).

// decisive is the fewest votes that can decide a quorum operation: a
// quorum of yes, or so many others that a quorum of yes is out of reach.
func decisive(total, quorum int) int { return min(quorum, total-quorum+1) }

// ack is one backend's answer to a lock operation.
type ack struct {
	yes    bool          // it did what was asked
	fresh  bool          // yes, by taking a key that was free (not renewing one)
	absent bool          // it refused because the key does not exist
	ttl    time.Duration // the TTL it set, where that varies by backend
	stamp  int64         // the expiry it gave the key (ms), where known
	count  int64         // the hold count it reached (hash locks)
	// fence is the fencing token it holds for the lock (yes), where the
	// operation mints one: the one it minted, or the lock's, written back.
	fence int64
}

// tally counts the votes of a lock operation, where each backend that
// answers either did what was asked (yes) or refused (no), and the others
// (failures, and those still pending) are silent.
type tally struct {
	total, quorum int
	yes, no       int
	absent        int // refusals because the key was absent
	failures      []*NodeError
	// quorumAt is when the quorum-th yes arrived; minTTL the shortest TTL
	// the yes voters set, where the operation reports them.
	quorumAt time.Time
	minTTL   time.Duration
}

func (t *tally) add(v vote[ack]) {
	switch {
	case v.err != nil:
		t.failures = append(t.failures, v.err.(*NodeError))
	case v.val.yes:
		t.yes++
		if t.minTTL == 0 || v.val.ttl < t.minTTL {
			t.minTTL = v.val.ttl
		}
		if t.yes == t.quorum {
			t.quorumAt = v.at
		}
	default:
		t.no++
		if v.val.absent {
			t.absent++
		}
	}
}

func (t *tally) pending() int { return t.total - t.yes - t.no - len(t.failures) }

// silent is how many backends gave no answer that counts, or none yet.
func (t *tally) silent() int { return t.total - t.yes - t.no }

func (t *tally) succeeded() bool { return t.yes >= t.quorum }

// split reports whether some backends refused, but those, with the
// backends yet to answer, fall short of a quorum: no other holder can have
// the lock on a quorum that this tally saw (Result.Split). Failures alone
// are no split: nobody contended.
func (t *tally) split() bool { return t.no > 0 && t.no+t.pending() < t.quorum }

// refused reports whether the operation failed whatever the silent
// backends did or would have done: even all of them saying yes would not
// make a quorum. Only then may the answer be "no" (held elsewhere, not
// held); otherwise a stall would read as contention, or as a lost lock.
func (t *tally) refused() bool { return t.yes+t.silent() < t.quorum }

// decided reports whether reading more votes is pointless: a quorum of
// yes, a certain refusal, or nobody left to hear from. An undecidable
// outcome waits for every backend (each within its timeout) so that the
// error names them all and the rollback knows every answer.
func (t *tally) decided() bool { return t.succeeded() || t.refused() || t.pending() == 0 }

// err is the outcome of a decided tally that did not succeed: refused
// (ErrAbsent when a quorum found no key and refused is ErrNotHeld) when
// the silent backends could not have changed it, a *NoQuorumError when
// they could.
func (t *tally) err(refused error) error {
	if !t.refused() {
		return t.noQuorum()
	}
	if t.absent >= t.quorum && errors.Is(refused, ErrNotHeld) {
		return ErrAbsent
	}
	return refused
}

func (t *tally) noQuorum() *NoQuorumError {
	return &NoQuorumError{Counted: t.yes + t.no, Agreed: t.yes, Needed: t.quorum, Total: t.total, Nodes: t.failures}
}

// cut is err, joined with ctx's error when ctx ended: an outcome left
// undecided because the caller stopped waiting says so.
func cut(ctx context.Context, err error) error {
	if ctx.Err() == nil || !errors.Is(err, ErrNoQuorum) {
		return err
	}
	return errors.Join(err, ctx.Err())
}

// driftFloor covers the clocks' granularity, as in the Redlock paper.
const driftFloor = 2 * time.Millisecond

// drift is the clock-drift allowance for a TTL.
func (e *Engine) drift(ttl time.Duration) time.Duration { return drift(ttl, e.cfg.DriftFactor) }

// drift is the clock-drift allowance for a TTL with drift_factor factor.
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// validity is how long a lock taken with ttl is known held, given the time
// from before the first request to the quorum-th reply.
func (e *Engine) validity(ttl, elapsed time.Duration) time.Duration {
	return ttl - elapsed - e.drift(ttl)
}

// undecided is the answer to a read when agreed of the views that count
// support "yes" (hold the value, the key exists) and fewer than a quorum
// do: a *NoQuorumError when the backends that did not answer could make
// them a quorum, and nil when "no" is certain. Backends that did not answer
// may hold a value nobody else does, so with a quorum of them silent, even
// agreed == 0 is undecided.
func (e *Engine) undecided(v views, agreed int) error {
	if agreed+len(v.failures)+v.unheard < e.quorum {
		return nil
	}
	return cut(v.ctx, &NoQuorumError{Counted: len(v.states), Agreed: agreed, Needed: e.quorum, Total: len(e.nodes), Nodes: v.failures})
}

// quorumTTL is how long a quorum of holders (at least a quorum of them
// answered) keeps the value: the quorum-th longest remaining TTL, less
// drift. The backends that did not answer can only hold it longer, so a
// time left is a safe answer; "no time left" is one only when they could
// not make a quorum that still holds it.
func (e *Engine) quorumTTL(v views, holders []keyState) (time.Duration, error) {
	slices.SortFunc(holders, func(a, b keyState) int { return cmp.Compare(b.pttl, a.pttl) })
	left := holders[e.quorum-1].pttl
	if left == math.MaxInt64 {
		return 0, ErrNoExpiry
	}
	if left -= e.drift(left); left > 0 {
		return left, nil
	}
	lasting := 0
	for _, h := range holders {
		if h.pttl == math.MaxInt64 || h.pttl-e.drift(h.pttl) > 0 {
			lasting++
		}
	}
	if err := e.undecided(v, lasting); err != nil {
		return 0, err
	}
	return 0, ErrNotFound
}
