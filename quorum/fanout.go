package quorum

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// vote is one backend's reply within a fan-out. err is a *NodeError when the
// reply does not count toward quorum: no answer in time, a failure, or a
// backend in quarantine.
type vote[T any] struct {
	node int
	val  T
	err  error
}

// fanout sends cmd to every backend at once and returns a channel that
// receives exactly one vote per backend: decode's reading of its reply, or
// a *NodeError when it gave none within the backend timeout. The channel is
// buffered so that nobody has to read the stragglers.
//
// No goroutine waits per backend: the backends' pipes deliver the replies,
// and one timer per fan-out gives the rest up. Nothing is cancelled with the
// caller either: the answer is often decided before the slowest backends
// reply, and cutting their requests short would turn a clear yes or no into
// "unknown", which then needs a rollback.
func fanout[T any](e *Engine, cmd *command, decode func(n *node, r reply) (T, error)) <-chan vote[T] {
	f := &flight[T]{
		e:       e,
		decode:  decode,
		votes:   make(chan vote[T], len(e.nodes)),
		settled: make([]atomic.Bool, len(e.nodes)),
		sends:   make([]pending, len(e.nodes)),
	}
	f.left.Store(int32(len(e.nodes)))
	// Armed only once f.timer is set, which complete reads.
	f.timer = time.AfterFunc(time.Duration(math.MaxInt64), f.expire)
	f.timer.Reset(e.cfg.NodeTimeout)
	for i, n := range e.nodes {
		f.sends[i] = pending{to: f, node: i, cmd: cmd}
		n.pipe.send(&f.sends[i])
	}
	return f.votes
}

// flight is one fan-out in progress.
type flight[T any] struct {
	e       *Engine
	decode  func(n *node, r reply) (T, error)
	votes   chan vote[T]
	settled []atomic.Bool // per backend: its vote is cast
	left    atomic.Int32  // votes not yet cast
	timer   *time.Timer
	sends   []pending
}

// errNoReply is the vote of a backend that did not answer in time.
var errNoReply = fmt.Errorf("no reply within the backend timeout: %w", context.DeadlineExceeded)

func (f *flight[T]) complete(i int, r reply, err error) {
	if !f.settled[i].CompareAndSwap(false, true) {
		return // too late: the timeout has spoken for this backend
	}
	n := f.e.nodes[i]
	var val T
	if err == nil {
		val, err = f.decode(n, r)
	}
	if err == nil {
		// Judged after the reply: the connection it came on may have just
		// revealed a restart.
		err = n.quarantined()
	}
	if err != nil {
		err = &NodeError{Node: n.index, Addr: n.addr, Err: err}
	}
	f.votes <- vote[T]{node: i, val: val, err: err}
	if f.left.Add(-1) == 0 {
		f.timer.Stop()
	}
}

func (f *flight[T]) expire() {
	for i := range f.settled {
		f.complete(i, reply{}, errNoReply)
	}
}

// ack is one backend's answer to a lock operation.
type ack struct {
	yes    bool          // it did what was asked
	absent bool          // it refused because the key does not exist
	ttl    time.Duration // the TTL it set, where that varies by backend
	stamp  int64         // the expiry it gave the key (ms), where known
}

// tally counts the votes of a lock operation, where each backend that
// answers either did what was asked (yes) or refused (no).
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
			t.quorumAt = time.Now()
		}
	default:
		t.no++
		if v.val.absent {
			t.absent++
		}
	}
}

func (t *tally) pending() int { return t.total - t.yes - t.no - len(t.failures) }

// decided reports whether the remaining votes can no longer change the
// outcome: a quorum of yes, or too few possible yes and the kind of failure
// (refused or undecidable) already fixed.
func (t *tally) decided() bool {
	if t.yes >= t.quorum {
		return true
	}
	if t.yes+t.pending() >= t.quorum {
		return false
	}
	counted := t.yes + t.no
	return counted >= t.quorum || counted+t.pending() < t.quorum
}

func (t *tally) succeeded() bool { return t.yes >= t.quorum }

// err is the outcome of a decided tally that did not succeed: refused when a
// quorum answered, NoQuorumError otherwise.
func (t *tally) err(refused error) error {
	if t.absent >= t.quorum && errors.Is(refused, ErrNotHeld) {
		return ErrAbsent
	}
	if t.yes+t.no >= t.quorum {
		return refused
	}
	return &NoQuorumError{Counted: t.yes + t.no, Needed: t.quorum, Total: t.total, Nodes: t.failures}
}

func (t *tally) result() Result { return Result{Counted: t.yes + t.no, Succeeded: t.yes} }

// collect reads votes until the outcome is decided and returns the tally and
// the votes read so far; the rest are still on their way. A decided failure
// to reach quorum still waits for every backend (each within its timeout) so
// that the error names them all.
func collect(votes <-chan vote[ack], total, quorum int) (*tally, []vote[ack]) {
	t := &tally{total: total, quorum: quorum}
	var seen []vote[ack]
	for !t.decided() || (t.yes+t.no < quorum && t.pending() > 0) {
		v := <-votes
		seen = append(seen, v)
		t.add(v)
	}
	return t, seen
}

// collectAll reads one vote per backend.
func collectAll[T any](votes <-chan vote[T], total int) []vote[T] {
	all := make([]vote[T], 0, total)
	for range total {
		all = append(all, <-votes)
	}
	return all
}
