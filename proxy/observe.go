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
// that served it: it must be quick and safe for concurrent use. Metrics
// use it for latency histograms; counts are in Server.Stats.
type Observer interface {
	Operation(op quorum.Op, outcome Outcome, d time.Duration)
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
// and tells the session locks (session.go) of every release, deletion and
// TTL set whoever holds the key that a quorum carried out. It allocates
// nothing per call, and implements every method itself, so that a method
// added to Locker must say how it is observed.
type observedLocker struct {
	locks    Locker
	obs      Observer
	sessions *sessions // nil in tests that observe a Locker alone
	tracking *tracking // likewise
	*counters
}

// changed tells the tracking connections (tracking.go) that keys changed.
func (l *observedLocker) changed(keys ...string) {
	if l.tracking != nil {
		for _, k := range keys {
			l.tracking.invalidate(k)
		}
	}
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
	if err == nil {
		l.changed(req.Keys...)
	}
	return res, err
}

func (l *observedLocker) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	start := time.Now()
	res, err := l.locks.Unlock(ctx, req)
	l.done(req.Op, start, err)
	if err == nil {
		l.changed(req.Keys...)
	}
	// A hash lock left with holds is still its owner's.
	gone := req.Op != quorum.OpHashRelease || res.Released
	if err == nil && gone && l.sessions != nil {
		for _, k := range req.Keys {
			l.sessions.released(k, req.Token)
		}
	}
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
	if ok && err == nil {
		l.changed(req.Key)
	}
	if ok && err == nil && l.sessions != nil {
		switch req.Op {
		case quorum.OpDelete:
			l.sessions.released(req.Key, "")
		case quorum.OpExpire:
			// PEXPIRE after SETNX, the legacy recipe's second step: an
			// ordinary lock with that TTL from now on, no longer renewed.
			l.sessions.released(req.Key, "")
		}
	}
	return ok, err
}

func (l *observedLocker) MaxTTL() time.Duration { return l.locks.MaxTTL() }

// RenewFields renews hash locks (Redisson's watchdog), each counted as an
// extension.
func (l *observedLocker) RenewFields(ctx context.Context, ttl time.Duration, locks []quorum.Held) []quorum.Renewed {
	r, ok := l.locks.(FieldRenewer)
	if !ok {
		return notRenewed(len(locks))
	}
	start := time.Now()
	out := r.RenewFields(ctx, ttl, locks)
	for i, renewed := range out {
		l.done(quorum.OpExtend, start, renewed.Err)
		if renewed.Err == nil {
			l.changed(locks[i].Key)
		}
	}
	return out
}
