package quorum

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// vote is one backend's reply within a fan-out. err is a *NodeError when the
// reply does not count toward quorum: no answer in time, a failure, or a
// backend in quarantine.
type vote[T any] struct {
	node int
	val  T
	err  error
}

// fanout sends cmd to every backend at once and returns the flight, whose
// votes channel receives exactly one vote per backend: decode's reading of
// its reply, or a *NodeError when it gave none within the backend timeout.
// The channel is buffered so that nobody has to read the stragglers.
//
// No goroutine waits per backend: the backends' pipes deliver the replies,
// and one timer per fan-out gives the rest up. Nothing is cancelled with the
// caller either: the answer is often decided before the slowest backends
// reply, and cutting their requests short would turn a clear yes or no into
// "unknown", which then needs a rollback.
func fanout[T any](e *Engine, cmd *backend.Command, decode func(n *node, r backend.Reply) (T, error)) *flight[T] {
	f := &flight[T]{
		e:      e,
		start:  time.Now(),
		decode: decode,
		votes:  make(chan vote[T], len(e.nodes)),
		wake:   make(chan struct{}, 1),
		slots:  make([]slot, len(e.nodes)),
	}
	// Armed only once f.timer is set, which complete reads.
	f.timer = time.AfterFunc(time.Duration(math.MaxInt64), f.expire)
	f.timer.Reset(e.cfg.NodeTimeout)
	for i := range e.nodes {
		f.slots[i].Request = backend.Request{To: f, ID: i, Cmd: cmd}
	}
	// Commands on one key are queued on every backend's pipe in the same
	// order, so that each backend runs them in that order: two acquisitions
	// through this engine can then never split the backends between them,
	// which, with a backend down, would leave both undecided.
	order := &e.order[cmd.KeyHash()%uint32(len(e.order))]
	order.Lock()
	for i, n := range e.nodes {
		n.pipe.Send(&f.slots[i].Request)
	}
	order.Unlock()
	return f
}

// flight is one fan-out in progress.
type flight[T any] struct {
	e      *Engine
	start  time.Time
	decode func(n *node, r backend.Reply) (T, error)
	votes  chan vote[T]
	slots  []slot
	timer  *time.Timer

	// The caller sleeps until enough votes are in to decide anything,
	// rather than waking for each one.
	mu     sync.Mutex
	cast   int
	wakeAt int // 0: nobody waits
	wake   chan struct{}
}

// slot is one backend's part of a flight.
type slot struct {
	backend.Request
	settled atomic.Bool // its vote is cast
}

// errNoReply is the vote of a backend that did not answer in time.
var errNoReply = fmt.Errorf("no reply within the backend timeout: %w", context.DeadlineExceeded)

// Complete casts backend i's vote: decode's reading of its reply r, or
// its failure err.
func (f *flight[T]) Complete(i int, r backend.Reply, err error) {
	if !f.slots[i].settled.CompareAndSwap(false, true) {
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
	kind := ""
	if err != nil {
		kind = failureKind(err)
		err = &NodeError{Node: n.index, Addr: n.addr, Err: err}
	}
	latency := time.Since(f.start)
	n.stats.record(latency, kind)
	if obs := f.e.cfg.Observer; obs != nil {
		obs.Vote(n.addr, latency, kind)
	}
	f.votes <- vote[T]{node: i, val: val, err: err}
	f.mu.Lock()
	if f.cast++; f.wakeAt > 0 && f.cast >= f.wakeAt {
		f.wakeAt = 0
		f.wake <- struct{}{}
	}
	all := f.cast == len(f.slots)
	f.mu.Unlock()
	if all {
		f.timer.Stop()
	}
}

func (f *flight[T]) expire() {
	for i := range f.slots {
		f.Complete(i, backend.Reply{}, errNoReply)
	}
}

// waitFor returns once at least n votes are in the channel (true), or when
// ctx ends first (false).
func (f *flight[T]) waitFor(ctx context.Context, n int) bool {
	f.mu.Lock()
	if f.cast >= n {
		f.mu.Unlock()
		return true
	}
	f.wakeAt = n
	f.mu.Unlock()
	select {
	case <-f.wake:
		return true
	case <-ctx.Done():
		f.mu.Lock()
		f.wakeAt = 0
		f.mu.Unlock()
		return false
	}
}

// next returns the next vote, one already cast first, or false when ctx
// ends before one is.
func (f *flight[T]) next(ctx context.Context) (vote[T], bool) {
	select {
	case v := <-f.votes:
		return v, true
	default:
	}
	select {
	case v := <-f.votes:
		return v, true
	case <-ctx.Done():
		return vote[T]{}, false
	}
}

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

// silent is how many backends gave no answer that counts, or none yet.
func (t *tally) silent() int { return t.total - t.yes - t.no }

func (t *tally) succeeded() bool { return t.yes >= t.quorum }

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

// collect reads votes until the outcome is decided, or ctx ends, and
// returns the tally and the votes read so far; the rest (t.pending()) are
// still on their way, and count as silent.
func collect(ctx context.Context, f *flight[ack], total, quorum int) (*tally, []vote[ack]) {
	t := &tally{total: total, quorum: quorum}
	seen := make([]vote[ack], 0, total)
	if !f.waitFor(ctx, decisive(total, quorum)) {
		return t, seen
	}
	for !t.decided() {
		v, ok := f.next(ctx)
		if !ok {
			break
		}
		seen = append(seen, v)
		t.add(v)
	}
	return t, seen
}

// collectAll reads one vote per backend, or those cast before ctx ends.
func collectAll[T any](ctx context.Context, f *flight[T], total int) []vote[T] {
	all := make([]vote[T], 0, total)
	if !f.waitFor(ctx, total) {
		return all
	}
	for range total {
		all = append(all, <-f.votes)
	}
	return all
}

// cut is err, joined with ctx's error when ctx ended: an outcome left
// undecided because the caller stopped waiting says so.
func cut(ctx context.Context, err error) error {
	if ctx.Err() == nil || !errors.Is(err, ErrNoQuorum) {
		return err
	}
	return errors.Join(err, ctx.Err())
}
