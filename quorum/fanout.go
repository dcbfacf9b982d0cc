package quorum

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// vote is one backend's reply within a fan-out. err is a *NodeError when the
// reply does not count toward quorum: no answer in time, a failure, a
// backend in quarantine, or one whose clock rate is off.
type vote[T any] struct {
	node int
	val  T
	err  error
	// at is when it was cast, by the engine's clock: its reply came then,
	// after the backend ran the command, so a lock's validity counted to
	// its quorum-th yes is as Redlock counts it.
	at time.Time
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
	f := newFlight(e, decode)
	f.send(cmd)
	return f
}

// fanoutKeeping is fanout for a command that ends no lock (a read, a
// renewal), which leaves the top-ups of its key running (flight.endsNoLock).
func fanoutKeeping[T any](e *Engine, cmd *backend.Command, decode func(n *node, r backend.Reply) (T, error)) *flight[T] {
	f := newFlight(e, decode)
	f.endsNoLock = true
	f.send(cmd)
	return f
}

// newFlight is a fan-out whose command is not sent yet: its start, from
// which its votes' latency and the lock's validity are measured, and its
// timer are set, to be sent at once with send.
func newFlight[T any](e *Engine, decode func(n *node, r backend.Reply) (T, error)) *flight[T] {
	f := &flight[T]{
		e:      e,
		start:  e.clock.Now(),
		decode: decode,
		votes:  make(chan vote[T], len(e.nodes)),
		wake:   make(chan struct{}, 1),
	}
	if len(e.nodes) <= len(f.few) {
		f.slots = f.few[:len(e.nodes)]
	} else {
		f.slots = make([]slot, len(e.nodes))
	}
	// Armed only once f.timer is set, which Complete reads. The backend
	// timeout, on the real clock (Config.clock).
	f.timer = time.AfterFunc(time.Duration(math.MaxInt64), f.expire)
	f.timer.Reset(e.cfg.NodeTimeout)
	return f
}

// send queues cmd on every backend's pipe.
func (f *flight[T]) send(cmd *backend.Command) {
	e := f.e
	for i := range e.nodes {
		f.slots[i].Request = backend.Request{To: f, ID: i, Cmd: cmd}
	}
	// Commands on one key are queued on every backend's pipe in the same
	// order, so that each backend runs them in that order: two acquisitions
	// through this engine can then never split the backends between them,
	// which, with a backend down, would leave both undecided.
	order, sends := e.stripe(cmd.KeyHash())
	var some [8]backend.Flush
	flushes := some[:0]
	order.Lock()
	if !f.endsNoLock {
		sends.Add(1) // stops the key's top-up (topup.go): no copy may follow this
	}
	f.sent = sends.Load()
	for i, n := range e.nodes {
		flushes = append(flushes, n.pipe.Queue(&f.slots[i].Request))
	}
	order.Unlock()
	// A backend with nothing else in flight gets the command from this
	// goroutine, outside the lock: the queues' order is set already.
	for _, w := range flushes {
		w.Write()
	}
}

// flight is one fan-out in progress.
type flight[T any] struct {
	e *Engine
	// endsNoLock is set for a command that ends no lock (an acquisition,
	// a read, a renewal): the top-ups of its key go on past it, as a copy
	// after it outlives nothing (topup.go). Every other command stops them.
	endsNoLock bool
	// sent is the send count of the key's bucket once the command was
	// queued: a top-up after it stops when a later command moves it.
	sent   uint64
	start  time.Time
	decode func(n *node, r backend.Reply) (T, error)
	votes  chan vote[T]
	slots  []slot
	few    [5]slot // the slots of up to five backends, in the same allocation
	timer  *time.Timer

	// The caller sleeps until enough votes are in to decide anything,
	// rather than waking for each one.
	mu     sync.Mutex
	cast   int
	wakeAt int // 0: nobody waits
	wake   chan struct{}
	// late hears the votes cast from now on, in place of the channel:
	// for one who stopped reading it (a top-up, topup.go).
	late func(vote[T])
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
	if refused := setRefusal(err, f.e.set); refused != nil {
		n.noteSetRefusal(refused)
		err = refused
	}
	if err == nil {
		val, err = f.decode(n, r)
	}
	at := f.e.clock.Now()
	if err == nil {
		// Judged after the reply: the connection it came on may have just
		// revealed a restart.
		err = f.e.verdictAt(i, n, at)
	}
	kind := ""
	if err != nil {
		kind = failureKind(err)
		err = &NodeError{Node: n.index, Addr: n.addr, Err: err}
	}
	latency := at.Sub(f.start)
	n.stats.record(at, latency, kind)
	if obs := f.e.cfg.Observer; obs != nil {
		obs.Vote(n.addr, latency, kind)
	}
	v := vote[T]{node: i, val: val, err: err, at: at}
	f.mu.Lock()
	late := f.late
	if late == nil {
		f.votes <- v // buffered for every backend's vote
	}
	if f.cast++; f.wakeAt > 0 && f.cast >= f.wakeAt {
		f.wakeAt = 0
		f.wake <- struct{}{}
	}
	all := f.cast == len(f.slots)
	f.mu.Unlock()
	if late != nil {
		late(v)
	}
	if all {
		f.timer.Stop()
	}
}

// handOff hands the votes cast from now on to fn, in place of the
// channel, and returns those cast already and not read: for a caller that
// reads no more of them (afterGrant).
func (f *flight[T]) handOff(fn func(vote[T])) []vote[T] {
	var early []vote[T]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.late = fn
	for {
		select {
		case v := <-f.votes:
			early = append(early, v)
		default:
			return early
		}
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
