package quorum

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Top-ups: a lock granted or renewed on a quorum while some backends refused
// it or lacked it is copied onto those backends shortly after, with no more
// lease than its validity left, so that one later backend's loss leaves its
// renewal and its release decidable, and a lock renewed all along keeps
// every backend through restarts one at a time. The argument, the send-order
// rule it rests on, what it costs and what it was measured to change for
// users are in docs/design/topups.md.
//
// One entry point: lockOp and renewBatch call afterGrant once a lock is
// granted or renewed, and everything else a top-up needs (which command
// copies a lock, when to stop) lives here. The one thing outside is the
// send count that fanout keeps by key (flight.endsNoLock): every command
// that may end a lock moves it as it is queued, so that a copy queued later
// sees it moved and is not sent, and a copy queued earlier lands first on
// every backend's pipe, where the command that ends the lock removes it.

// topUpDelays are the times after the grant at which the backends that
// refused a lock are asked again.
var topUpDelays = []time.Duration{2 * time.Millisecond, 8 * time.Millisecond, 32 * time.Millisecond, 128 * time.Millisecond}

// topUpLeast is the least validity left for which a copy is still made.
const topUpLeast = 10 * time.Millisecond

// orderStripe is one stripe of fanout's send order: the lock that orders
// the commands on its keys on every backend's pipe, and how many commands
// it has sent, by bucket of their keys, which a top-up checks.
type orderStripe struct {
	sync.Mutex
	sends [64]atomic.Uint64
}

// stripe is the send-order stripe of the key with hash h, and its bucket.
func (e *Engine) stripe(h uint32) (*orderStripe, *atomic.Uint64) {
	s := &e.order[h%uint32(len(e.order))]
	return s, &s.sends[(h/uint32(len(e.order)))%uint32(len(s.sends))]
}

// touch counts a command on keys as sent, for the top-ups of all of them:
// fanout's send counts only its first key's.
func (e *Engine) touch(keys []string) {
	for _, k := range keys {
		s, sends := e.stripe(backend.HashKey(k))
		s.Lock()
		sends.Add(1)
		s.Unlock()
	}
}

// TopUpStats is what topping up did since the engine started.
type TopUpStats struct {
	Started uint64 // locks granted while some backends refused them, topped up
	Copies  uint64 // backends that took a lock in a top-up
	Running int64  // top-ups whose rounds are not over
}

// TopUps reports what topping up did since the engine started.
func (e *Engine) TopUps() TopUpStats {
	return TopUpStats{Started: e.topUps.started.Load(), Copies: e.topUps.copies.Load(), Running: e.topUps.running.Load()}
}

// topUpCounts counts what topping up did.
type topUpCounts struct {
	started atomic.Uint64 // grants with a refusal, topped up
	copies  atomic.Uint64 // backends that took a lock in a top-up
	running atomic.Int64  // top-ups whose rounds are not over
}

// copyKind says how a lock is copied onto a backend that lacks it, for an
// operation whose grant is topped up; copyNone for one that is not (a
// lock on several keys, a script's own).
type copyKind uint8

const (
	copyNone  copyKind = iota
	copyValue          // a plain lock: the token in the key's value (fenced: with its token)
	copyHash           // Redisson's: the owner's field with the quorum's hold count
	copyRead           // a read-write lock's reader: its field, count and timeout keys, under "read"
	copyWrite          // a read-write lock's writer: its field and count, under "write"
)

// grant is a lock just granted or renewed on a quorum, as afterGrant takes
// it.
type grant struct {
	copies     copyKind
	key, token string
	prefix     string // a read hold's timeout-key prefix (copyRead)
	// mark is the key's send count once the command that granted it was
	// queued (flight.sent), or before (sendMark): a command sent later
	// that may end the lock moves it, and stops the top-up.
	mark     uint64
	deadline time.Time // the lock's validity ends
}

// afterGrant is the post-grant hook: it tops up g onto the backends whose
// votes say they lack it (a refusal, a hold count below the quorum's, a
// quarantined backend without it), if any does. votes are those heard;
// when f is not nil, its pending votes still to come are heard as they
// are cast (the caller reads no more of them). Called before the grant is
// answered; it returns at once, the top-up running on its own.
func (e *Engine) afterGrant(g grant, votes []vote[ack], f *flight[ack], pending int) {
	if g.copies == copyNone || measureOff["topup"] || pending == 0 && !missed(votes) {
		return
	}
	tu := e.newTopUp(g)
	if pending > 0 {
		votes = append(votes, f.handOff(tu.vote)...)
	}
	for _, v := range votes {
		tu.vote(v)
	}
}

// fill is how a top-up takes a lock on one more backend: the command, for
// the validity left and the lock as the quorum holds it (ack.count,
// ack.fence), nil when it cannot be written; and whether a reply says it
// was taken.
type fill struct {
	cmd   func(left time.Duration, held ack) *backend.Command
	taken func(r backend.Reply) bool
}

// fillFor is the fill of g's lock.
func (e *Engine) fillFor(g grant) *fill {
	key, token := g.key, g.token
	switch {
	case g.copies == copyRead || g.copies == copyWrite:
		// The owner's hold where the lock is free or its mode admits it
		// (lua/rw_fill.lua). token is the reader's field, or the writer's.
		mode, owner := ReadMode, token
		if g.copies == copyWrite {
			mode, owner = WriteMode, strings.TrimSuffix(token, WriterSuffix)
		}
		return &fill{
			cmd: func(left time.Duration, held ack) *backend.Command {
				return e.checkedCommand(rwFillScript, []string{key}, owner, left.Milliseconds(), held.count, mode, g.prefix)
			},
			taken: tookOne,
		}
	case g.copies == copyHash:
		// The owner's field, where the key is free, with the lock's
		// fencing token where it has one, or where the field counts fewer
		// holds (lua/hash_fill.lua).
		return &fill{
			cmd: func(left time.Duration, held ack) *backend.Command {
				if held.fence > 0 {
					return e.checkedCommand(hashFillScript, []string{key, fenceCounterKey}, token, left.Milliseconds(), held.count, fenceText(held.fence))
				}
				return e.checkedCommand(hashFillScript, []string{key}, token, left.Milliseconds(), held.count, "")
			},
			taken: tookOne,
		}
	case e.cfg.Fencing:
		// Where the key is free, with the fencing token the quorum holds it
		// with, raising the backend's counter to it (lua/fence_fill.lua). A
		// lock taken before fencing was turned on has none, and is not
		// topped up.
		return &fill{
			cmd: func(left time.Duration, held ack) *backend.Command {
				if held.fence <= 0 {
					return nil
				}
				return e.checkedCommand(fenceFillScript, []string{key, fenceCounterKey}, token, left.Milliseconds(), fenceText(held.fence))
			},
			taken: tookOne,
		}
	default:
		// Where the key is free.
		return &fill{
			cmd: func(left time.Duration, _ ack) *backend.Command {
				return e.checkedCommand(acquireScript, []string{key}, token, left.Milliseconds())
			},
			taken: func(r backend.Reply) bool {
				stamp, err := r.Integer()
				return err == nil && stamp > 0
			},
		}
	}
}

// tookOne reads a fill script's answer: 1 taken, 0 not.
func tookOne(r backend.Reply) bool {
	taken, err := r.Integer()
	return err == nil && taken == 1
}

// topUp is one granted lock's top-up.
type topUp struct {
	e *Engine
	g grant
	// fill is made from g only once the top-up starts: most grants have a
	// top-up that hears their stragglers' votes and finds nothing to do.
	fill     *fill
	stripe   *orderStripe
	sends    *atomic.Uint64
	sent     uint64 // sends at the grant: a later command stops the top-up
	granted  time.Time
	deadline time.Time // the lock's validity ends

	mu sync.Mutex
	// votes are the backends' votes heard, and the top-up's takes as yes
	// votes with the quorum's count: a backend's last one says where it is.
	votes []vote[ack]
	// first is the hold count of the first yes heard: a yes with another
	// count, or a refusal, starts the top-up.
	first    int64
	counted  bool
	started  bool
	finished bool
}

// newTopUp is a top-up of g's lock, valid until its deadline, that stops
// once a command on its key that may end a lock is sent after the one
// that granted it (grant.mark).
func (e *Engine) newTopUp(g grant) *topUp {
	s, sends := e.stripe(backend.HashKey(g.key))
	return &topUp{e: e, g: g, stripe: s, sends: sends, sent: g.mark, granted: e.clock.Now(), deadline: g.deadline,
		votes: make([]vote[ack], 0, len(e.nodes))}
}

// sendMark reads the send count of key's bucket under its send-order lock:
// a command on key queued later moves it, and one queued earlier is on
// every backend's pipe by then.
func (e *Engine) sendMark(key string) uint64 {
	s, sends := e.stripe(backend.HashKey(key))
	s.Lock()
	defer s.Unlock()
	return sends.Load()
}

// vote hears one backend's vote on the acquisition. A refusal, or a hold
// count unlike another's, starts the top-up. A quarantined backend's
// answer does not count, but it did run the command: one that lacks the
// lock (restarted empty, most often) is topped up too, so that it has the
// lock when its quarantine ends.
func (tu *topUp) vote(v vote[ack]) {
	tu.mu.Lock()
	defer tu.mu.Unlock()
	if tu.finished || v.err != nil && !missedInQuarantine(v) {
		return
	}
	work := !v.val.yes
	if v.val.yes {
		work = tu.counted && v.val.count != tu.first
		if !tu.counted {
			tu.first, tu.counted = v.val.count, true
		}
	}
	tu.votes = append(tu.votes, v)
	if work && !tu.started {
		tu.started = true
		tu.fill = tu.e.fillFor(tu.g)
		tu.e.topUps.started.Add(1)
		tu.e.topUps.running.Add(1)
		go tu.run()
	}
}

// toAsk reads the votes: the backends to ask, those that refused the lock
// or count fewer holds than the quorum, and the lock as the quorum holds
// it: its hold count and fencing token, each the quorum-th largest of
// those that granted it (a fenced grant's token, which a quorum carries
// and no quorum exceeds); known is false until a quorum's grants are
// heard (the granting caller may not have handed them over yet). tu.mu
// is held.
func (tu *topUp) toAsk() (ask []int, held ack, known bool) {
	// A vote kept with its error is a quarantined backend's that lacks
	// the lock (vote): never a yes, so never among the counts.
	last := make(map[int]ack, len(tu.votes))
	for _, v := range tu.votes {
		last[v.node] = v.val
	}
	var counts, fences []int64
	for _, a := range last {
		if a.yes {
			counts = append(counts, a.count)
			fences = append(fences, a.fence)
		}
	}
	q := tu.e.quorum
	if len(counts) < q {
		return nil, ack{}, false
	}
	descending := func(a, b int64) int { return cmp.Compare(b, a) }
	slices.SortFunc(counts, descending)
	slices.SortFunc(fences, descending)
	held = ack{yes: true, count: counts[q-1], fence: fences[q-1]}
	for i, a := range last {
		if !a.yes || a.count < held.count {
			ask = append(ask, i)
		}
	}
	return ask, held, true
}

// run asks the backends that refused, or count fewer holds, at each of
// topUpDelays after the grant, until each has the lock as the quorum has
// it, or the top-up stops.
func (tu *topUp) run() {
	e := tu.e
	defer e.topUps.running.Add(-1)
	defer func() {
		tu.mu.Lock()
		tu.finished = true
		tu.mu.Unlock()
	}()
	for _, d := range topUpDelays {
		select {
		case <-e.clock.After(e.clock.Until(tu.granted.Add(d))):
		case <-e.closed:
			return
		}
		tu.mu.Lock()
		ask, held, known := tu.toAsk()
		tu.mu.Unlock()
		left := e.clock.Until(tu.deadline)
		if left < topUpLeast {
			return
		}
		if len(ask) == 0 || !known {
			continue // a refusal may still come
		}
		took, stop := tu.once(ask, left, held)
		if stop {
			return
		}
		tu.mu.Lock()
		for _, i := range took {
			tu.votes = append(tu.votes, vote[ack]{node: i, val: held})
		}
		tu.mu.Unlock()
	}
}

// once asks the backends of ask to take the lock with left of lease, as
// held, and returns those that did; stop when a command on the key was
// sent since the grant, a backend did not answer in time (what it did is
// unknown, and one that slow is left alone), or the lock cannot be
// written as held.
func (tu *topUp) once(ask []int, left time.Duration, held ack) (took []int, stop bool) {
	e := tu.e
	cmd := tu.fill.cmd(left, held)
	if cmd == nil || e.hooks.skipTopUpCopies {
		return nil, true
	}
	replies := make(fillReplies, len(ask))
	reqs := make([]backend.Request, len(ask))
	flushes := make([]backend.Flush, 0, len(ask))
	tu.stripe.Lock()
	if tu.sends.Load() != tu.sent {
		tu.stripe.Unlock()
		return nil, true
	}
	for j, i := range ask {
		reqs[j] = backend.Request{To: replies, ID: i, Cmd: cmd}
		flushes = append(flushes, e.nodes[i].pipe.Queue(&reqs[j]))
	}
	tu.stripe.Unlock()
	for _, w := range flushes {
		w.Write()
	}
	timeout := time.NewTimer(e.cfg.NodeTimeout)
	defer timeout.Stop()
	for range ask {
		select {
		case r := <-replies:
			if r.err == nil && tu.fill.taken(r.reply) {
				e.topUps.copies.Add(1)
				took = append(took, r.node)
			}
		case <-timeout.C:
			return nil, true
		case <-e.closed:
			return nil, true
		}
	}
	return took, false
}

// missedInQuarantine reports whether v is the answer of a backend in
// quarantine that does not hold the lock.
func missedInQuarantine(v vote[ack]) bool {
	var q *QuarantineError
	return v.err != nil && !v.val.yes && errors.As(v.err, &q)
}

// lacks reports whether v says its backend lacks the lock, counted or in
// quarantine: a grant with such a vote is topped up.
func lacks(v vote[ack]) bool { return v.err == nil && !v.val.yes || missedInQuarantine(v) }

// missed reports whether some vote lacks the lock.
func missed(votes []vote[ack]) bool { return slices.ContainsFunc(votes, lacks) }

type fillReply struct {
	node  int
	reply backend.Reply
	err   error
}

// fillReplies hears a top-up's replies.
type fillReplies chan fillReply

func (c fillReplies) Complete(id int, r backend.Reply, err error) { c <- fillReply{id, r, err} }
