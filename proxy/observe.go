package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Outcome is how a lock operation ended, from the Locker's answer.
type Outcome uint8

// The outcomes.
const (
	OutcomeOK            Outcome = iota // done: a release or extension held, a read answered
	OutcomeAcquired                     // an acquisition took the lock
	OutcomeHeldElsewhere                // an acquisition found the lock held by another token
	OutcomeNotHeld                      // a release or extension found the lock gone or held by another token
	OutcomeNoQuorum                     // too few backends answered (or in time) to decide
	OutcomeError                        // anything else: a TTL out of range, shutting down
	NumOutcomes          = iota         // how many Outcomes there are
)

var outcomeNames = [NumOutcomes]string{"ok", "acquired", "held_elsewhere", "not_held", "no_quorum", "error"}

// String is the outcome's name as metrics and INFO label it, e.g. "held_elsewhere".
func (o Outcome) String() string { return outcomeNames[o] }

// Outcomes lists the outcomes op can have, for a reader that wants to show
// zeros for them before the first one happens.
func Outcomes(op quorum.Op) []Outcome {
	switch {
	case op.Takes():
		return []Outcome{OutcomeAcquired, OutcomeHeldElsewhere, OutcomeNoQuorum, OutcomeError}
	case op.ForToken():
		return []Outcome{OutcomeOK, OutcomeNotHeld, OutcomeNoQuorum, OutcomeError}
	}
	return []Outcome{OutcomeOK, OutcomeNoQuorum, OutcomeError}
}

// outcome classifies the error a Locker call of op returned.
func outcome(op quorum.Op, err error) Outcome {
	switch {
	case err == nil:
		if op.Takes() {
			return OutcomeAcquired
		}
		return OutcomeOK
	case errors.Is(err, quorum.ErrNotAcquired):
		return OutcomeHeldElsewhere
	case errors.Is(err, quorum.ErrNotHeld):
		if op.Takes() {
			return OutcomeHeldElsewhere // extend-or-acquire: another token holds it
		}
		return OutcomeNotHeld
	case errors.Is(err, quorum.ErrNotFound), errors.Is(err, quorum.ErrNoExpiry), errors.Is(err, quorum.ErrNoFence), errors.Is(err, quorum.ErrTimeout):
		return OutcomeOK // an answer, as Redis's nil or -1
	case errors.Is(err, quorum.ErrNoQuorum), errors.Is(err, context.DeadlineExceeded):
		return OutcomeNoQuorum // both are NOQUORUM replies (reply.go)
	}
	return OutcomeError
}

// Observer hears of every lock operation as it ends, from the goroutine
// that served it, and of every session lock's renewal as it starts: it
// must be quick and safe for concurrent use. Metrics use it for latency
// histograms; counts are in Server.Stats and Server.SessionStats.
type Observer interface {
	Operation(op quorum.Op, outcome Outcome, d time.Duration)
	// SessionRenewalLag hears how late a session lock's renewal started
	// after it was due: the proxy's own pauses, which a lease must outlast.
	SessionRenewalLag(d time.Duration)
}

// Stats are a Server's counters since it started.
type Stats struct {
	Clients             int64 // connections open now
	ConnectionsReceived int64 // connections accepted
	Commands            int64 // commands received, refused ones included
	// Operations counts lock operations by quorum.Op and Outcome.
	Operations [quorum.NumOps][NumOutcomes]uint64
}

// counters are what Stats reads that the Server does not count elsewhere.
type counters struct {
	commands   atomic.Int64
	operations [quorum.NumOps][NumOutcomes]atomic.Uint64
}

// Stats returns the server's counters. Each is read atomically, not all
// of them at one instant.
func (s *Server) Stats() Stats {
	st := Stats{Clients: s.clients.Load(), ConnectionsReceived: s.nextID.Load(), Commands: s.stats.commands.Load()}
	for op := range st.Operations {
		for o := range st.Operations[op] {
			st.Operations[op][o] = s.stats.operations[op][o].Load()
		}
	}
	return st
}

// observe returns locks wrapped to count (and, with obs, to report) every
// call, with the counters it adds to.
func observe(locks Locker, obs Observer) (Locker, *counters) {
	c := &counters{}
	return &observedLocker{locks: locks, obs: obs, counters: c}, c
}

// observedLocker counts every call on a Locker by operation and outcome,
// and changes nothing. It allocates nothing per call.
type observedLocker struct {
	locks Locker
	obs   Observer
	*counters
}

var _ Locker = (*observedLocker)(nil)

func (l *observedLocker) done(op quorum.Op, start time.Time, err error) {
	o := outcome(op, err)
	l.operations[op][o].Add(1)
	if l.obs != nil {
		l.obs.Operation(op, o, time.Since(start))
	}
}

func (l *observedLocker) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	start := time.Now()
	res, err := l.locks.Lock(ctx, req)
	l.done(req.Op, start, err)
	return res, err
}

func (l *observedLocker) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	start := time.Now()
	res, err := l.locks.Unlock(ctx, req)
	l.done(req.Op, start, err)
	return res, err
}

func (l *observedLocker) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	start := time.Now()
	r, err := l.locks.Read(ctx, req)
	l.done(req.Op, start, err)
	return r, err
}

func (l *observedLocker) Write(ctx context.Context, req quorum.Write) (bool, error) {
	start := time.Now()
	ok, err := l.locks.Write(ctx, req)
	l.done(req.Op, start, err)
	return ok, err
}

// Renew counts each hash lock renewed (Redisson's watchdog, a client's
// request) as an extension. The session locks' renewals are the proxy's
// own upkeep, counted apart (SessionStats.Renewals), not as operations.
func (l *observedLocker) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	start := time.Now()
	out := l.locks.Renew(ctx, req)
	if req.Hash {
		for _, renewed := range out {
			l.done(quorum.OpExtend, start, renewed.Err)
		}
	}
	return out
}

func (l *observedLocker) MaxTTL() time.Duration { return l.locks.MaxTTL() }
