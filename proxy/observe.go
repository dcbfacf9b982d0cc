package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Op is a lock operation: one call on the Locker. A command makes one,
// except a script over several keys that the Locker serves key by key.
type Op uint8

// The operations, one per Locker method.
const (
	OpAcquire Op = iota
	OpRelease
	OpExtend
	OpGet
	OpPTTL
	OpExists
	OpDelete
	OpExpire
	OpAcquireAll
	OpReleaseAll
	OpExtendAll
	OpExtendBy
	OpExtendOrAcquire
	OpAcquireOrRenew
	OpOwnerPTTL
	NumOps = iota // how many Ops there are
)

var opNames = [NumOps]string{
	"acquire", "release", "extend", "get", "pttl", "exists", "delete", "expire",
	"acquire_all", "release_all", "extend_all", "extend_by", "extend_or_acquire", "acquire_or_renew", "owner_pttl",
}

// String is the operation's name as metrics label it, e.g. "acquire_all".
func (o Op) String() string { return opNames[o] }

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

// opClass groups the operations by the outcomes they can have.
type opClass uint8

const (
	classRead    opClass = iota // ok
	classAcquire                // acquired, held_elsewhere
	classOwner                  // ok, not_held
)

var opClasses = [NumOps]opClass{
	OpAcquire: classAcquire, OpAcquireAll: classAcquire, OpAcquireOrRenew: classAcquire, OpExtendOrAcquire: classAcquire,
	OpRelease: classOwner, OpExtend: classOwner, OpReleaseAll: classOwner, OpExtendAll: classOwner,
	OpExtendBy: classOwner, OpOwnerPTTL: classOwner,
}

// Outcomes lists the outcomes o can have, for a reader that wants to show
// zeros for them before the first one happens.
func (o Op) Outcomes() []Outcome {
	switch opClasses[o] {
	case classAcquire:
		return []Outcome{OutcomeAcquired, OutcomeHeldElsewhere, OutcomeNoQuorum, OutcomeError}
	case classOwner:
		return []Outcome{OutcomeOK, OutcomeNotHeld, OutcomeNoQuorum, OutcomeError}
	}
	return []Outcome{OutcomeOK, OutcomeNoQuorum, OutcomeError}
}

// outcome classifies the error a Locker call of op returned.
func outcome(op Op, err error) Outcome {
	switch {
	case err == nil:
		if opClasses[op] == classAcquire {
			return OutcomeAcquired
		}
		return OutcomeOK
	case errors.Is(err, quorum.ErrNotAcquired):
		return OutcomeHeldElsewhere
	case errors.Is(err, quorum.ErrNotHeld):
		if opClasses[op] == classAcquire {
			return OutcomeHeldElsewhere // extend-or-acquire: another token holds it
		}
		return OutcomeNotHeld
	case errors.Is(err, quorum.ErrNotFound), errors.Is(err, quorum.ErrNoExpiry):
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
	Operation(op Op, outcome Outcome, d time.Duration)
}

// Stats are a Server's counters since it started.
type Stats struct {
	Clients             int64 // connections open now
	ConnectionsReceived int64 // connections accepted
	Commands            int64 // commands received, refused ones included
	// Operations counts lock operations by Op and Outcome.
	Operations [NumOps][NumOutcomes]uint64
}

// counters are what Stats reads that the Server does not count elsewhere.
type counters struct {
	commands   atomic.Int64
	operations [NumOps][NumOutcomes]atomic.Uint64
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
	return &observedLocker{Locker: locks, obs: obs, counters: c}, c
}

// observedLocker counts every call on a Locker by operation and outcome.
// It allocates nothing per call.
type observedLocker struct {
	Locker // MaxTTL, and any method added later, pass through unobserved
	obs    Observer
	*counters
}

func (l *observedLocker) done(op Op, start time.Time, err error) {
	o := outcome(op, err)
	l.operations[op][o].Add(1)
	if l.obs != nil {
		l.obs.Operation(op, o, time.Since(start))
	}
}

func (l *observedLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.Acquire(ctx, key, token, ttl)
	l.done(OpAcquire, start, err)
	return res, err
}

func (l *observedLocker) Release(ctx context.Context, key, token string) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.Release(ctx, key, token)
	l.done(OpRelease, start, err)
	return res, err
}

func (l *observedLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.Extend(ctx, key, token, ttl)
	l.done(OpExtend, start, err)
	return res, err
}

func (l *observedLocker) Get(ctx context.Context, key string) (string, error) {
	start := time.Now()
	v, err := l.Locker.Get(ctx, key)
	l.done(OpGet, start, err)
	return v, err
}

func (l *observedLocker) PTTL(ctx context.Context, key string) (time.Duration, error) {
	start := time.Now()
	d, err := l.Locker.PTTL(ctx, key)
	l.done(OpPTTL, start, err)
	return d, err
}

func (l *observedLocker) Exists(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := l.Locker.Exists(ctx, key)
	l.done(OpExists, start, err)
	return ok, err
}

func (l *observedLocker) Delete(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := l.Locker.Delete(ctx, key)
	l.done(OpDelete, start, err)
	return ok, err
}

func (l *observedLocker) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	start := time.Now()
	ok, err := l.Locker.Expire(ctx, key, ttl)
	l.done(OpExpire, start, err)
	return ok, err
}

func (l *observedLocker) AcquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.AcquireAll(ctx, keys, token, ttl)
	l.done(OpAcquireAll, start, err)
	return res, err
}

func (l *observedLocker) ReleaseAll(ctx context.Context, keys []string, token string) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.ReleaseAll(ctx, keys, token)
	l.done(OpReleaseAll, start, err)
	return res, err
}

func (l *observedLocker) ExtendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.ExtendAll(ctx, keys, token, ttl)
	l.done(OpExtendAll, start, err)
	return res, err
}

func (l *observedLocker) ExtendBy(ctx context.Context, key, token string, add time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.ExtendBy(ctx, key, token, add)
	l.done(OpExtendBy, start, err)
	return res, err
}

func (l *observedLocker) ExtendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.ExtendOrAcquire(ctx, key, token, ttl)
	l.done(OpExtendOrAcquire, start, err)
	return res, err
}

func (l *observedLocker) AcquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (quorum.Result, error) {
	start := time.Now()
	res, err := l.Locker.AcquireOrRenew(ctx, key, value, tokenLen, ttl)
	l.done(OpAcquireOrRenew, start, err)
	return res, err
}

func (l *observedLocker) OwnerPTTL(ctx context.Context, key, token string) (time.Duration, error) {
	start := time.Now()
	d, err := l.Locker.OwnerPTTL(ctx, key, token)
	l.done(OpOwnerPTTL, start, err)
	return d, err
}
