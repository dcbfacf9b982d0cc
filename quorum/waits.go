package quorum

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Waiting for a lock without spinning. A client that asks to wait for a
// held key joins the key's queue in this engine; only the queue's head
// tries, and only when the key may have become free: a release notice
// (any proxy's release publishes one on each backend where it deleted the
// key and found the key marked as waited for; this engine marks the key
// and subscribes to its channel on every backend while it has waiters for
// it), or the holder's time running out (a timer
// at the quorum's PTTL, for a holder that died without releasing). The N
// copies of one release's notice are one wake-up: they carry the released
// token, and a token already seen for the key in the last second is not
// news. Lost notices cost latency, never safety: every grant is an
// ordinary quorum acquisition.
//
// Fairness is first come, first served within one engine; waiters on
// different proxies race on each release, one per proxy, instead of every
// polling client.

// ErrTimeout is OpAwaitRelease's answer when its wait ended first.
var ErrTimeout = errors.New("quorum: the wait ended before a release")

// releasedPrefix starts the channel on which the backends publish the
// releases of a key: releasedPrefix + key, with the released token.
const releasedPrefix = ReservedPrefix + "released:"

// The marks that have releases publish their notices (lua/notice.lua): a
// release publishes only where its key is marked waited for, or
// listeningKey marks every key (a watch by pattern). Locks nobody waits
// for then cost no notice, and no proxy reads notices it did not ask for.
const (
	waitingPrefix = ReservedPrefix + "waiting:"
	listeningKey  = ReservedPrefix + "listening"
	// markTTL is how long a mark lasts unless renewed; keepMarks renews
	// them every markRenew, so that one late or failed renewal loses none.
	// A mark outlives its last waiter by up to markTTL: some notices more.
	markTTL   = 30 * time.Second
	markRenew = 10 * time.Second
)

const (
	// noticeDedupe is how long a released token stays known per key: its
	// copies from the other backends arrive within it.
	noticeDedupe = time.Second
	// retryUndecided is how soon a head tries again when the key seemed
	// free but was not held by a quorum (a split) or no quorum answered.
	retryUndecided = 10 * time.Millisecond
)

// waits are the engine's queues of waiters, and the subscriptions that
// feed them.
type waits struct {
	mu      sync.Mutex
	queues  map[string]*waitQueue
	watches map[string]*watch     // Releases', by backend pattern
	subs    []*backend.Subscriber // one per backend, nil where it failed
	quorum  int                   // backends that must carry a pattern
	// counting says which backends count toward quorum now: the ones a
	// release is expected to reach (Releases).
	counting func() []bool
	// straggle is how long after a quorum's copies of a release its
	// callers wait for the other counting backends' copies (Releases).
	straggle time.Duration
	clock    clockwork.Clock // the engine's
	stats    waitCounts
}

// waitQueue is the waiters of one key, first come first served.
type waitQueue struct {
	key     string
	waiters []*waiter // the head, waiters[0], is the one that tries
	// wake has a token when the key may have become free since the head
	// last looked.
	wake chan struct{}
	// freeAt is when the key's holder runs out, as last learned: the
	// head's timer. Zero: unknown, try at once.
	freeAt time.Time
	// released are the releases (by id) heard in the last noticeDedupe:
	// see heard.
	released map[string]*releaseSeen
	// subscribed is closed when a quorum of backends confirmed the
	// channel; confirmed says which.
	subscribed chan struct{}
	confirmed  map[int]bool
	// marked is the writing of the key's waiting mark.
	marked marking
}

// releaseSeen is what a queue knows of one release.
type releaseSeen struct {
	at    time.Time
	from  map[int]bool    // the backends that told it
	late  clockwork.Timer // wakes the head at the end of the straggle
	spent bool            // a grant (or an await) has used it
}

// waiter is one caller in a queue.
type waiter struct {
	turn chan struct{} // closed when it becomes the head
}

// waitCounts counts what waiting did, for metrics.
type waitCounts struct {
	waiting  atomic.Int64  // waiters now
	notices  atomic.Uint64 // release notices received, every copy
	releases atomic.Uint64 // of them, distinct releases of keys with waiters
	wakeUps  atomic.Uint64 // heads woken to try
	grants   atomic.Uint64 // waits that ended with the lock
	timeouts atomic.Uint64 // waits that ended at their deadline
	gone     atomic.Uint64 // waits whose caller went away
}

// WaitStats is what waiting did since the engine started.
type WaitStats struct {
	Waiting  int64  // callers waiting now
	Notices  uint64 // release notices received from the backends, every copy
	Releases uint64 // distinct releases of keys with waiters, from a notice or this engine
	WakeUps  uint64 // waiters woken to try
	Grants   uint64 // waits that ended with the lock (OpAwaitRelease: with the key free)
	Timeouts uint64 // waits that ended at their deadline
	Gone     uint64 // waits whose caller went away first
}

// Waits reports what waiting did since the engine started.
func (e *Engine) Waits() WaitStats {
	c := &e.waits.stats
	return WaitStats{
		Waiting: c.waiting.Load(), Notices: c.notices.Load(), Releases: c.releases.Load(),
		WakeUps: c.wakeUps.Load(), Grants: c.grants.Load(), Timeouts: c.timeouts.Load(), Gone: c.gone.Load(),
	}
}

// subscribe opens one subscription per backend, on which this engine
// hears the releases of the keys it has waiters for.
func (e *Engine) subscribe() {
	e.waits.queues = map[string]*waitQueue{}
	e.waits.watches = map[string]*watch{}
	e.waits.subs = make([]*backend.Subscriber, len(e.nodes))
	e.waits.quorum = e.quorum
	e.waits.straggle, e.waits.clock = e.cfg.NodeTimeout, e.clock
	e.waits.counting = func() []bool {
		out := make([]bool, len(e.nodes))
		for i, n := range e.nodes {
			out[i] = e.counts(i, n)
		}
		return out
	}
	e.running.Add(1)
	go e.keepMarks()
	for i := range e.nodes {
		sub, err := backend.NewSubscriber(backend.SubscriberConfig{
			URL: e.cfg.Backends[i], TLS: e.cfg.TLSConfig, Timeout: e.cfg.NodeTimeout,
			Message:    func(pattern, channel, token string) { e.noticed(i, pattern, channel, token) },
			Subscribed: func(channel string) { e.confirmed(i, channel) },
		})
		if err == nil { // New has checked every URL
			e.waits.subs[i] = sub
		}
	}
}

func (w *waits) close() {
	for _, s := range w.subs {
		if s != nil {
			s.Close()
		}
	}
}

// noticed hears one backend's notice of a release, on a key's channel
// (pattern "") or on a pattern of Releases.
func (e *Engine) noticed(from int, pattern, channel, token string) {
	if topic, ok := strings.CutPrefix(channel, relayPrefix); ok {
		e.waits.relayed(from, pattern, topic, token)
		return
	}
	key, ok := strings.CutPrefix(channel, releasedPrefix)
	if !ok {
		return
	}
	id, token := splitNotice(token)
	if pattern != "" {
		e.waits.watched(from, pattern, key+"\x00"+id, key, token)
		return
	}
	e.waits.stats.notices.Add(1)
	e.waits.heard(key, id, from, e.waits.countingNow())
}

// releaseIDLen is the length of a release's id, which starts its notice:
// the copies of one release carry the same id, and two releases (even of
// one key by one token, as clients that reuse their token make) never do.
const releaseIDLen = 16

func newReleaseID() string {
	// Written out rather than by fmt: one is made for every release.
	var id [releaseIDLen]byte
	v := rand.Uint64()
	for i := range id {
		id[releaseIDLen-1-i] = "0123456789abcdef"[v&15]
		v >>= 4
	}
	return string(id[:])
}

// splitNotice reads a release notice: the release's id, then the token
// released ("" for a delete).
func splitNotice(payload string) (id, token string) {
	if len(payload) < releaseIDLen {
		return payload, ""
	}
	return payload[:releaseIDLen], payload[releaseIDLen:]
}

// released wakes the head of key's queue for this engine's own release
// id, answered by a quorum: the head's tries follow the release's late
// requests down every backend's pipe, so it need not wait for them.
func (e *Engine) released(key, id string) { e.waits.heard(key, id, -1, nil) }

// heard hears backend from's copy of release id's notice for key (from
// -1: this engine's release), and wakes the head of key's queue as
// Releases tells its callers: once a quorum of backends told it, and every
// backend that counts (counting) has too, or a backend timeout after the
// quorum's copy. A head woken sooner would try before the release had
// landed everywhere, spend a try, or take the lock on a bare quorum. The
// release wakes the head again, at its later copies, until a grant has
// used it.
func (w *waits) heard(key, id string, from int, counting []bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	if q == nil {
		return
	}
	now := w.clock.Now()
	seen := q.released[id]
	switch {
	case seen != nil && now.Sub(seen.at) < noticeDedupe && seen.spent:
		return
	case seen == nil || now.Sub(seen.at) >= noticeDedupe:
		for t, r := range q.released {
			if now.Sub(r.at) >= noticeDedupe {
				delete(q.released, t)
			}
		}
		seen = &releaseSeen{at: now, from: map[int]bool{}}
		q.released[id] = seen
		w.stats.releases.Add(1)
	}
	if from >= 0 {
		seen.from[from] = true
	}
	switch {
	case from < 0 || len(seen.from) >= w.quorum && coveredBy(seen.from, carrying(counting, q.confirmed)):
		q.wakeHead()
	case len(seen.from) >= w.quorum && seen.late == nil:
		seen.late = w.clock.AfterFunc(w.straggle, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !seen.spent && w.queues[key] == q {
				q.wakeHead()
			}
		})
	}
}

// wakeHead leaves the head a wake-up, unless one is waiting already.
func (q *waitQueue) wakeHead() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// confirmed hears that backend i carries channel.
func (e *Engine) confirmed(i int, channel string) {
	if e.waits.confirmedPattern(i, channel) {
		return
	}
	key, ok := strings.CutPrefix(channel, releasedPrefix)
	if !ok {
		return
	}
	w := &e.waits
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	if q == nil || q.confirmed[i] {
		return
	}
	q.confirmed[i] = true
	if len(q.confirmed) == e.quorum {
		close(q.subscribed)
	}
}

// join puts a new waiter at the tail of key's queue, making the queue
// (and subscribing to its channel) if it is the first.
func (w *waits) join(key string) (*waitQueue, *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[key]
	if q == nil {
		q = &waitQueue{key: key, wake: make(chan struct{}, 1), subscribed: make(chan struct{}), confirmed: map[int]bool{},
			released: map[string]*releaseSeen{}}
		w.queues[key] = q
		for _, s := range w.subs {
			if s != nil {
				s.Subscribe(releasedPrefix + key)
			}
		}
	}
	me := &waiter{turn: make(chan struct{})}
	if len(q.waiters) == 0 {
		close(me.turn)
	}
	q.waiters = append(q.waiters, me)
	w.stats.waiting.Add(1)
	return q, me
}

// leave takes me out of q; the next waiter becomes the head if me was.
// The last one out drops the queue and its subscriptions.
func (w *waits) leave(q *waitQueue, me *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.waiting.Add(-1)
	for i, x := range q.waiters {
		if x == me {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				close(q.waiters[0].turn)
			}
			break
		}
	}
	if len(q.waiters) > 0 {
		return
	}
	delete(w.queues, q.key)
	for _, s := range w.subs {
		if s != nil {
			s.Unsubscribe(releasedPrefix + q.key)
		}
	}
}

// spend marks every release heard so far as used by the head's grant, and
// drops a wake-up they left: their late copies are not news for the next
// in line.
func (w *waits) spend(q *waitQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range q.released {
		r.spent = true
	}
	select {
	case <-q.wake:
	default:
	}
}

// freedAfter is how long until a key whose PTTL read answered left is
// free on a quorum: PTTL leaves out the drift allowance, which a holder
// may count on but a waiter need not wait for, plus a millisecond for the
// backends' clocks to pass it.
func (e *Engine) freedAfter(left time.Duration) time.Duration {
	return left + e.drift(left) + time.Millisecond
}

// setFreeAt records when the key's holder runs out, for the head's timer.
func (w *waits) setFreeAt(q *waitQueue, at time.Time) {
	w.mu.Lock()
	q.freeAt = at
	w.mu.Unlock()
}

func (w *waits) freeAt(q *waitQueue) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return q.freeAt
}

// place is one caller's place in a key's line, for the length of its
// wait.
type place struct {
	e        *Engine
	q        *waitQueue
	me       *waiter
	deadline <-chan time.Time // nil: no end
	stop     func()
	start    time.Time
}

// getInLine joins key's line for at most wait (0: without end), and
// returns once its turn came, or with ok false when the wait or ctx ended
// first. The caller must call leave.
func (e *Engine) getInLine(ctx context.Context, key string, wait time.Duration) (p *place, ok bool) {
	p = &place{e: e, stop: func() {}, start: e.clock.Now()}
	if wait > 0 {
		t := e.clock.NewTimer(wait)
		p.deadline, p.stop = t.Chan(), func() { t.Stop() }
	}
	p.q, p.me = e.waits.join(key)
	// A release between this engine's first try and its subscription, or
	// its mark, would go unheard: the first try waits for a quorum of
	// backends to carry the channel (a release publishes on a quorum), for
	// at most a backend timeout, and for the mark on every backend that
	// answers in one. A release that ran on a backend before either is
	// there ran before the try too, which then finds the key free there.
	marked := p.q.marked.start(e, waitingPrefix+key)
	settle := time.NewTimer(e.cfg.NodeTimeout)
	select {
	case <-p.q.subscribed:
	case <-settle.C:
	case <-ctx.Done():
	}
	settle.Stop()
	select {
	case <-marked:
	case <-ctx.Done():
	}
	select {
	case <-p.me.turn:
		return p, true
	case <-p.deadline:
	case <-ctx.Done():
	}
	return p, false
}

func (p *place) leave() {
	p.stop()
	p.e.waits.leave(p.q, p.me)
}

// ended counts a wait that ended without its aim: the caller went away
// (ctx's error) or the wait ran out (err).
func (p *place) ended(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		p.e.waits.stats.gone.Add(1)
		p.observe("gone")
		return ctx.Err()
	}
	p.e.waits.stats.timeouts.Add(1)
	p.observe("timeout")
	return err
}

// granted counts a wait that reached its aim.
func (p *place) granted() {
	p.e.waits.spend(p.q)
	p.e.waits.stats.grants.Add(1)
	p.observe("granted")
}

func (p *place) observe(outcome string) {
	if obs := p.e.cfg.Observer; obs != nil {
		obs.Waited(p.e.clock.Since(p.start), outcome)
	}
}

// acquireWaiting takes key for token, waiting up to wait (0: without
// end) while another token holds it, in line behind the engine's earlier
// waiters for it. It returns ErrNotAcquired at the deadline; ctx's error
// when ctx ends first (the caller went away), with nothing held for it;
// and, at the deadline, a *NoQuorumError when the last try could not
// decide.
func (e *Engine) acquireWaiting(ctx context.Context, key, token string, ttl, wait time.Duration) (Result, error) {
	if err := e.checkTTL(ttl); err != nil {
		return Result{}, err
	}
	p, ok := e.getInLine(ctx, key, wait)
	defer p.leave()
	if !ok {
		return Result{}, p.ended(ctx, ErrNotAcquired)
	}
	q, stats := p.q, &e.waits.stats
	lastErr := ErrNotAcquired
	// The first try is at once, unless a grant to the waiter before this
	// one said how long the key is taken for: then it waits for a release.
	for first := true; ; first = false {
		if !first || !e.waits.freeAt(q).IsZero() {
			timer := e.clock.NewTimer(e.clock.Until(e.waits.freeAt(q)))
			select {
			case <-q.wake:
				stats.wakeUps.Add(1)
			case <-timer.Chan():
			case <-p.deadline:
				timer.Stop()
				return Result{}, p.ended(ctx, lastErr)
			case <-ctx.Done():
				timer.Stop()
				return Result{}, p.ended(ctx, lastErr)
			}
			timer.Stop()
		}
		// The try runs to its decision even if the caller goes: cut short
		// it would leave the key undecided.
		res, err := e.acquire(context.WithoutCancel(ctx), key, token, ttl)
		switch {
		case err == nil && ctx.Err() != nil:
			// Nobody to give it to: give it back, and the next in line
			// is woken by the release.
			e.release(context.WithoutCancel(ctx), key, token)
			e.waits.setFreeAt(q, time.Time{})
			return Result{}, p.ended(ctx, ErrNotAcquired)
		case err == nil:
			e.waits.setFreeAt(q, e.clock.Now().Add(ttl))
			p.granted()
			return res, nil
		case errors.Is(err, ErrNotAcquired):
			lastErr = err
			left, perr := e.pttl(context.WithoutCancel(ctx), key)
			switch {
			case perr == nil:
				e.waits.setFreeAt(q, e.clock.Now().Add(e.freedAfter(left)))
			case errors.Is(perr, ErrNoExpiry):
				e.waits.setFreeAt(q, e.clock.Now().Add(e.cfg.MaxTTL))
			default: // gone since, or undecided
				e.waits.setFreeAt(q, e.clock.Now().Add(retryUndecided))
			}
		default:
			var tooFew *NoQuorumError
			if !errors.As(err, &tooFew) {
				return Result{}, err
			}
			lastErr = err
			// Enough backends answered but split between contenders (two
			// proxies' heads woken by one release): both roll back, and
			// try again soon, apart. Too few answered: they are given
			// time.
			again := max(retryUndecided, e.cfg.NodeTimeout)
			if tooFew.Counted >= tooFew.Needed {
				again = retryUndecided + rand.N(3*retryUndecided)
			}
			e.waits.setFreeAt(q, e.clock.Now().Add(again))
		}
	}
}

// awaitRelease waits, in line behind the engine's earlier waiters for key,
// until key is free: released, deleted, run out, or not held at all when
// its turn comes. Errors as Read's for OpAwaitRelease.
func (e *Engine) awaitRelease(ctx context.Context, key string, wait time.Duration) error {
	p, ok := e.getInLine(ctx, key, wait)
	defer p.leave()
	if !ok {
		return p.ended(ctx, ErrTimeout)
	}
	// Each look at the key is a PTTL read: free, and the caller is told;
	// held, and the wait goes on until a release is heard or the holder's
	// time runs out, and then looks again (a holder that renewed keeps
	// its lock, and this caller its place). The first look waits out the
	// hand-over that the waiter before left, if any: its caller takes the
	// key in that time, or lets it be.
	for {
		if left := e.clock.Until(e.waits.freeAt(p.q)); left > 0 {
			timer := e.clock.NewTimer(left)
			select {
			case <-p.q.wake:
				e.waits.stats.wakeUps.Add(1)
			case <-timer.Chan():
			case <-p.deadline:
				timer.Stop()
				return p.ended(ctx, ErrTimeout)
			case <-ctx.Done():
				timer.Stop()
				return p.ended(ctx, ErrTimeout)
			}
			timer.Stop()
		}
		left, err := e.pttl(context.WithoutCancel(ctx), key)
		switch {
		case errors.Is(err, ErrNotFound):
			// The caller takes the key itself: the next in line gives it
			// a backend timeout to do so before looking.
			e.waits.setFreeAt(p.q, e.clock.Now().Add(e.cfg.NodeTimeout))
			p.granted()
			return nil
		case errors.Is(err, ErrNoExpiry):
			left = e.cfg.MaxTTL
		case err != nil:
			left = max(retryUndecided, e.cfg.NodeTimeout)
		}
		e.waits.setFreeAt(p.q, e.clock.Now().Add(e.freedAfter(left)))
	}
}

// mark writes the marks keys (lua/notice.lua) on every backend, and
// returns once each answered, or the backend timeout passed.
func (e *Engine) mark(keys ...string) {
	f := fanoutKeeping(e, backend.ScriptCommand(markScript, keys, markTTL.Milliseconds()),
		func(*node, backend.Reply) (struct{}, error) { return struct{}{}, nil })
	collectAll(context.Background(), f, len(e.nodes))
}

// marking is the first writing of a mark, which the first of its waiters
// or watchers starts and every one waits for. The zero marking is ready.
type marking struct {
	once sync.Once
	done chan struct{} // closed once written on every backend that answered in time
}

// start writes the mark key ("" none) on every backend, once, and returns
// what closes when that is done.
func (m *marking) start(e *Engine, key string) <-chan struct{} {
	m.once.Do(func() {
		m.done = make(chan struct{})
		if key == "" {
			close(m.done)
			return
		}
		go func() {
			e.mark(key)
			close(m.done)
		}()
	})
	return m.done
}

// markBatch is how many marks one renewal command carries at most.
const markBatch = 512

// keepMarks renews the marks of the keys this engine has waiters for, and
// of its watches by pattern, every markRenew until Close. It renews by the
// real clock, whose time the backends' mark TTLs run on.
func (e *Engine) keepMarks() {
	defer e.running.Done()
	tick := time.NewTicker(markRenew)
	defer tick.Stop()
	for {
		select {
		case <-e.closed:
			return
		case <-tick.C:
		}
		keys := e.waits.marks()
		for len(keys) > 0 {
			n := min(len(keys), markBatch)
			// Not waited for: a renewal that fails is made again at the
			// next tick, long before the mark runs out.
			fanoutKeeping(e, backend.ScriptCommand(markScript, keys[:n], markTTL.Milliseconds()),
				func(*node, backend.Reply) (struct{}, error) { return struct{}{}, nil })
			keys = keys[n:]
		}
	}
}

// marks are the marks that this engine's waiters and watches need.
func (w *waits) marks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	for key := range w.queues {
		keys = append(keys, waitingPrefix+key)
	}
	for _, wt := range w.watches {
		if wt.mark != "" {
			keys = append(keys, wt.mark)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
