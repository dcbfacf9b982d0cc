package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Fencing tokens. A holder paused past its lease still writes; the
// resource it writes to can refuse it if every grant carries a number
// larger than every earlier grant's, and the resource keeps the largest it
// has seen. Each backend keeps a counter (fenceCounterKey, no TTL) and, in
// each held lock's value after the holder's token, the token it minted
// for the holder (lua/value_fenced.lua), which goes and expires with the
// lock. An acquisition mints on every backend that grants it
// max(counter+1, the proxy's clock in µs) in the same script that sets the
// key (lua/acquire_fenced.lua); the lock's token t is the largest minted by the
// backends that granted it before the decision, and the lock is granted
// only once a quorum of them (W) carry t: those that minted less get t
// written back (lua/fence_raise.lua), and only where the token still
// holds the key. In the steady state every backend mints the same clock
// value and no write-back is needed: no extra round trip. A hash lock
// (hashlock.go) keeps its token in a field of the hash instead, minted and
// written back by its own scripts (lua/hash_acquire_fenced.lua,
// lua/hash_fence_raise.lua) from the same counter, so that its tokens and
// the string locks' grow as one sequence.
//
// Why t only grows (the argument of wave2.md §1.4): any later grant L is
// voted by a quorum, which meets W in some backend j. L's SET NX there ran
// after the key was free, so after this lock was released or expired, so
// after j's counter reached t; j minted L at least t+1, and L's token is
// at least that. It holds while fewer than a quorum lose data at once, as
// mutual exclusion does: a backend restarted empty loses its counter, and
// counts again only once its counter is re-seeded from the others
// (seed.go).
const fenceCounterKey = ReservedPrefix + "fence"

// settleFence decides the fencing token of a granted acquisition from the
// yes votes seen when a quorum was reached, and writes it back where too
// few carry it, recording in seen where it did. It returns the token and
// when a quorum carried it, or a *NoQuorumError when fewer than a quorum of
// the holders could be made to.
func (e *Engine) settleFence(ctx context.Context, op lockOp, seen []vote[ack]) (int64, time.Time, error) {
	var token int64
	minted := false // else every voter renewed the holder's lock, keeping its token
	for _, v := range seen {
		if v.err == nil && v.val.yes {
			token = max(token, v.val.fence)
			minted = minted || v.val.fresh
		}
	}
	var behind []int // in seen
	carry := 0
	for i, v := range seen {
		switch {
		case v.err != nil || !v.val.yes:
		case v.val.fence == token:
			carry++
		default:
			behind = append(behind, i)
		}
	}
	if minted {
		e.fences.minted.Add(1)
	}
	if e.hooks.brokenFence {
		return lowestGranted(seen), e.clock.Now(), nil
	}
	if carry >= e.quorum || e.hooks.skipFenceWriteBack {
		return token, e.clock.Now(), nil
	}
	// Every holder behind gets the token; the answer waits only for enough
	// of them (each within one backend timeout). Where it was written back
	// the backend now holds the lock's token, which a rollback must look
	// for there (one still unanswered when the quorum is reached is missed,
	// and its key left to expire: a rollback after a grant is rare).
	keys, arg := withCounter(op.keys), fenceText(token)
	raise := cmp.Or(op.raise, fenceRaiseScript)
	raised := make(chan int, len(behind))
	for _, i := range behind {
		n := e.nodes[seen[i].node]
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.NodeTimeout)
			defer cancel()
			r, err := n.run(ctx, raise, keys, op.token, arg)
			if done, _ := r.Integer(); err != nil || done != 1 {
				raised <- -1
				return
			}
			raised <- i
		}()
	}
	e.fences.writeBacks.Add(1)
	for range behind {
		if i := <-raised; i >= 0 {
			seen[i].val.fence = token
			if carry++; carry == e.quorum {
				return token, e.clock.Now(), nil
			}
		}
	}
	return 0, time.Time{}, &NoQuorumError{Counted: carry, Agreed: carry, Needed: e.quorum, Total: len(e.nodes)}
}

// sendClocked sends cmd on f, a fenced acquisition, with the clock floor
// it mints at least, the proxy's clock in µs, written into its Blank
// argument, and sends it before any later one's: every backend then
// receives these floors in increasing order, and each mints its floor,
// with no counter ahead of it (the costlier path of
// lua/acquire_fenced.lua), unless another proxy's clock is ahead. Taken
// together a clock reading and the sends, under one lock, keep the order;
// a floor above the last one keeps it within a µs. The flight and the
// command are made before, so that the lock is held as briefly as can be
// (the flight's start is then a little earlier, which only shortens the
// validity).
func sendClocked[T any](f *flight[T], cmd *backend.Command) {
	e := f.e
	e.clockMu.Lock()
	defer e.clockMu.Unlock()
	// The wall clock, not the engine's: floors from every proxy share one
	// scale, and a stepped test clock must not set a token behind them.
	e.lastClock = max(time.Now().UnixMicro(), e.lastClock+1)
	putFence(cmd.Blank(), e.lastClock)
	f.send(cmd)
}

// fenceWidth is the width of a fencing token's text: 19 digits hold every
// positive int64.
const fenceWidth = 19

// putFence writes token into b as fenceText does, without allocating.
func putFence(b []byte, token int64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + token%10)
		token /= 10
	}
}

// fenceText is a fencing token as the backends keep it, in a lock's value
// and in the counter: 19 digits, zero-padded (lua/value_fenced.lua).
func fenceText(token int64) string {
	s := strconv.FormatInt(token, 10)
	if len(s) >= fenceWidth {
		return s
	}
	return strings.Repeat("0", fenceWidth-len(s)) + s
}

// withCounter are the keys of a script that takes keys and mints their
// fencing token: the lock's keys, then the counter.
func withCounter(keys []string) []string {
	return append(slices.Clip(keys), fenceCounterKey)
}

// ErrNoFence is Read's answer to OpFence and OpHashFence for a lock that a
// quorum holds but that has no fencing token a quorum agrees on: it was
// taken by an operation that mints none, or before fencing.
var ErrNoFence = errors.New("quorum: the lock has no fencing token")

// fence answers the fencing token of key as token holds it: the token a
// quorum of its holders carry. ErrNotHeld when token does not hold key on a
// quorum, even counting the backends that did not answer; ErrNoFence when
// it does but no quorum carries one token; a *NoQuorumError when the
// backends that did not answer could change the answer.
func (e *Engine) fence(ctx context.Context, key, token string) (int64, error) {
	return e.quorumFence(ctx, backend.ScriptCommand(fenceReadScript, []string{key}, token))
}

// quorumFence answers the fencing token of one lock, as fence says, from
// cmd, a script that reads it on each backend: {1, token} where the lock
// is held, the token "" where it has none, {0, ""} where it is not held;
// a third element, the owner, when backends may find the lock held by
// different owners (a hash lock read for whoever holds it): a quorum must
// then carry one token for one owner.
func (e *Engine) quorumFence(ctx context.Context, cmd *backend.Command) (int64, error) {
	type held struct {
		holds bool
		fence int64 // 0: none
		owner string
	}
	f := fanoutKeeping(e, cmd, func(_ *node, r backend.Reply) (held, error) {
		a, err := r.Array()
		if err == nil && len(a) != 2 && len(a) != 3 {
			err = errors.New("quorum: fence script: unexpected reply")
		}
		if err != nil {
			return held{}, err
		}
		n, err := a[0].Integer()
		if err != nil {
			return held{}, err
		}
		h := held{holds: n == 1}
		if len(a) == 3 {
			if h.owner, err = a[2].Bulk(); err != nil {
				return held{}, err
			}
		}
		s, err := a[1].Bulk()
		if err != nil || s == "" {
			return h, err
		}
		h.fence, err = strconv.ParseInt(s, 10, 64)
		return h, err
	})
	votes := collectAll(ctx, f, len(e.nodes))
	holders, silent := 0, len(e.nodes)-len(votes)
	count := map[held]int{}
	var failures []*NodeError
	for _, v := range votes {
		switch {
		case v.err != nil:
			silent++
			failures = append(failures, v.err.(*NodeError))
		case v.val.holds:
			holders++
			if v.val.fence > 0 {
				count[v.val]++
			}
		}
	}
	for h, n := range count {
		if n >= e.quorum {
			return h.fence, nil
		}
	}
	if holders+silent < e.quorum {
		return 0, ErrNotHeld
	}
	best := 0
	for _, n := range count {
		best = max(best, n)
	}
	if best+silent < e.quorum {
		return 0, ErrNoFence
	}
	return 0, cut(ctx, &NoQuorumError{Counted: len(votes) - len(failures), Agreed: best, Needed: e.quorum, Total: len(e.nodes), Nodes: failures})
}

// fenceCounts counts what fencing did, for metrics.
type fenceCounts struct {
	minted     atomic.Uint64 // tokens of granted acquisitions
	writeBacks atomic.Uint64 // of them, those that needed a write-back
	reseeds    atomic.Uint64 // backends' counters re-seeded (seed.go)
}

// FenceStats is what fencing did since the engine started.
type FenceStats struct {
	Minted     uint64 // fencing tokens of granted acquisitions
	WriteBacks uint64 // of them, those that took a write-back round trip
	Reseeds    uint64 // backends' counters re-seeded before they counted again
}

// Fences reports what fencing did since the engine started.
func (e *Engine) Fences() FenceStats {
	return FenceStats{
		Minted:     e.fences.minted.Load(),
		WriteBacks: e.fences.writeBacks.Load(),
		Reseeds:    e.fences.reseeds.Load(),
	}
}

// numberAndFence reads a script's {n, fencing token} for one lock, n > 0:
// a renewed lock's TTL or hold count, and the token it carries.
func numberAndFence(r backend.Reply) (n, fence int64, err error) {
	pair, err := r.Array()
	if err == nil && len(pair) != 2 {
		err = fmt.Errorf("answered %d items for a lock, not {n, token}", len(pair))
	}
	if err != nil {
		return 0, 0, err
	}
	n, err = pair[0].Integer()
	text, textErr := pair[1].Bulk()
	if err = cmp.Or(err, textErr); err != nil {
		return 0, 0, err
	}
	if fence, err = strconv.ParseInt(text, 10, 64); err != nil || n <= 0 || fence <= 0 {
		return 0, 0, fmt.Errorf("answered {%d, %q}, not a lock's number and token", n, text)
	}
	return n, fence, nil
}
