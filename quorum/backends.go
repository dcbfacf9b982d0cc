package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// State is what a backend is doing now, as Backends reports it.
type State uint8

// The states. Their order is the order in which INFO lists them.
const (
	StateUp          State  = iota // connected, and its replies count
	StateQuarantined               // connected, but in quarantine: its data set may lack locks that have not expired yet (settle.go)
	StateEpochWait                 // connected, but the backend set changed and the old epoch's locks may still be held (members.go)
	StateDown                      // no connection: the last dial or connection failed
	StateIdle                      // not dialled yet
	StateUnsupported               // answered, but lacks PEXPIRETIME (older than Redis 7.0): sent nothing
	StateDuplicate                 // answered, but another backend reaches the same server: sent nothing
	StateReplica                   // answered, but is a replica: sent nothing
	StateOtherSet                  // answered, but records another backend set: a newer epoch, or other members (members.go)
	StateNotAdopted                // answered, but records an older epoch: this proxy's has not been adopted
	StateAdopting                  // answered, but lockproxy adopt is writing this proxy's set and has not finished
	StateUnrecorded                // answered, but records no set yet (a new or emptied server)
	StateClock                     // connected, but its clock runs at a rate beyond drift_factor (clock.go)
	NumStates        = iota        // how many States there are
)

var stateNames = [NumStates]string{"up", "quarantined", "epoch_wait", "down", "idle", "unsupported", "duplicate", "replica", "other_set", "not_adopted", "adopting", "unrecorded", "clock"}

// String is the state's name, e.g. "quarantined", as INFO and /readyz
// show it.
func (s State) String() string {
	if s >= NumStates {
		return fmt.Sprintf("state(%d)", uint8(s))
	}
	return stateNames[s]
}

// stateOf is a backend's state as far as its connection tells.
func stateOf(s backend.Status) State {
	switch s {
	case backend.StatusUp:
		return StateUp
	case backend.StatusDown:
		return StateDown
	}
	return StateIdle
}

// What a quarantined backend's wait rests on (BackendState.WaitFor).
const (
	WaitHorizon = "horizon" // the horizons its witnesses answered: the longest lease it may have lost
	WaitFull    = "full"    // max_ttl: too few witnesses have answered to bound its leases
	WaitFloor   = "floor"   // a promoted replica's floor, for an old master that may still run
)

// Failure kinds, as NodeError.Kind names them and metrics label them.
const (
	KindTimeout     = "timeout"
	KindRefused     = "connection refused"
	KindClosed      = "connection closed"
	KindQuarantined = "quarantined"
	KindUnsupported = "unsupported" // lacks a command the scripts need
	KindDuplicate   = "duplicate"   // the same server as another backend
	KindReplica     = "replica"     // a replica, not a master
	KindOtherSet    = "other set"   // it records another backend set
	KindClock       = "clock"       // its clock runs at a rate beyond drift_factor
	KindAuth        = "auth"        // it refused the user or password of its URL
	KindNotRedis    = "not redis"   // what answers at its address speaks another protocol
	KindError       = "error"
)

// failureKinds lists every kind, in a fixed order for reports.
var failureKinds = [...]string{KindTimeout, KindRefused, KindClosed, KindQuarantined, KindUnsupported, KindDuplicate, KindReplica, KindOtherSet, KindClock, KindAuth, KindNotRedis, KindError}

// failureKind classifies a backend failure into one of failureKinds.
func failureKind(err error) string {
	var (
		q *QuarantineError
		u *UnsupportedError
		d *DuplicateError
		r *ReplicaError
		s *SetError
		c *ClockError
		a *backend.AuthError
		x *backend.NotRedisError
	)
	switch {
	case errors.As(err, &a):
		return KindAuth
	case errors.As(err, &x):
		return KindNotRedis
	case errors.As(err, &s):
		return KindOtherSet
	case errors.As(err, &q):
		return KindQuarantined
	case errors.As(err, &u):
		return KindUnsupported
	case errors.As(err, &d):
		return KindDuplicate
	case errors.As(err, &r):
		return KindReplica
	case errors.As(err, &c):
		return KindClock
	case backend.IsTimeout(err):
		return KindTimeout
	case backend.IsRefused(err):
		return KindRefused
	case backend.IsClosed(err):
		return KindClosed
	}
	return KindError
}

// Observer hears what the engine does as it happens. It is called from
// the engine's goroutines, so it must be quick and must not block.
type Observer interface {
	// Vote is every vote a backend casts, as it is cast: kind is "" for a
	// reply that counts toward quorum, else one of the Kind constants.
	// latency is from the start of the operation to the vote.
	Vote(backend string, latency time.Duration, kind string)
	// Waited is every wait as it ends: how long it lasted, and its
	// outcome: "granted", "timeout" (the wait's deadline passed) or
	// "gone" (the caller went away).
	Waited(d time.Duration, outcome string)
}

// BackendState is what the engine knows of one backend now, without asking
// it (Probe asks).
type BackendState struct {
	Addr  string
	State State
	// RunID is the run_id of the redis-server process last connected to,
	// which tells a restart or another server behind the address; empty
	// before the first connection, or when the server gave none.
	RunID string
	// QuarantineLeft is, for StateQuarantined and StateEpochWait, how long
	// until it counts; Reason, for StateQuarantined, why it waits: restart,
	// failover or unmarked (ChangeRestart, ...).
	QuarantineLeft time.Duration
	Reason         string
	// WaitFor is, for StateQuarantined, what the wait's end rests on:
	// WaitHorizon (the longest lease it may have lost, as the horizons of
	// its witnesses bound it), WaitFull (max_ttl: too few witnesses have
	// answered yet) or WaitFloor (a promoted replica's floor, for an old
	// master that may still run).
	WaitFor string
	// Witnesses is, for StateQuarantined, how many of the other backends
	// answered as witnesses in the last read, and how many are needed
	// (admit.Witnesses).
	Witnesses, WitnessesNeeded int
	// HorizonLeft is how long the longest lease recorded on it has left,
	// as last read (0: none).
	HorizonLeft time.Duration
	// ClockRate is the rate of its clock relative to the proxy's monotonic
	// clock, as last measured (1: the same); NaN until measured.
	ClockRate float64
	// LastLatency is the latency of its last vote; LastError the kind of
	// its last failure and when it happened.
	LastLatency time.Duration
	LastError   string
	LastErrorAt time.Time
	// Replies counts the votes that counted; Failures the others, by kind.
	Replies  uint64
	Failures map[string]uint64
	// Changes counts the changes of the server behind the backend, by
	// reason: ChangeRestart, ChangeFailover, ChangeUnmarked, ChangeReplica.
	Changes map[string]uint64
}

// nodeStats are one backend's counters, updated from the I/O goroutines.
type nodeStats struct {
	replies     atomic.Uint64
	failures    [len(failureKinds)]atomic.Uint64
	lastLatency atomic.Int64

	mu          sync.Mutex
	lastError   string
	lastErrorAt time.Time
}

func (s *nodeStats) record(at time.Time, latency time.Duration, kind string) {
	s.lastLatency.Store(int64(latency))
	if kind == "" {
		s.replies.Add(1)
		return
	}
	for i, k := range failureKinds {
		if k == kind {
			s.failures[i].Add(1)
		}
	}
	s.mu.Lock()
	s.lastError, s.lastErrorAt = kind, at
	s.mu.Unlock()
}

// Backends reports every backend's state, in configuration order.
func (e *Engine) Backends() []BackendState {
	out := make([]BackendState, len(e.nodes))
	for i, n := range e.nodes {
		status, downErr := n.pipe.Status()
		st := BackendState{
			Addr:        n.addr,
			State:       stateOf(status),
			ClockRate:   e.clocks.rate(i),
			LastLatency: time.Duration(n.stats.lastLatency.Load()),
			Replies:     n.stats.replies.Load(),
			Failures:    make(map[string]uint64, len(failureKinds)),
		}
		for j, k := range failureKinds {
			st.Failures[k] = n.stats.failures[j].Load()
		}
		st.Changes = make(map[string]uint64, len(changeReasons))
		for j, r := range changeReasons {
			st.Changes[r] = n.changes[j].Load()
		}
		n.stats.mu.Lock()
		st.LastError, st.LastErrorAt = n.stats.lastError, n.stats.lastErrorAt
		n.stats.mu.Unlock()
		n.mu.Lock()
		st.RunID = n.serverID
		st.HorizonLeft = n.horizonLeft
		waitFor, witnesses, needed := n.waitFor, n.witnesses, n.needed
		n.mu.Unlock()
		var (
			q *QuarantineError
			c *ClockError
			u *UnsupportedError
			d *DuplicateError
			r *ReplicaError
			o *SetError
		)
		switch v := e.verdict(i, n); {
		case st.State == StateUp && errors.As(v, &o):
			st.State = o.State
		case st.State == StateUp && errors.As(v, &q):
			st.State, st.QuarantineLeft, st.Reason = q.State(), q.Left, q.Reason
			if st.State == StateQuarantined && lossReason(q.Reason) {
				st.WaitFor, st.Witnesses, st.WitnessesNeeded = cmp.Or(waitFor, WaitFull), witnesses, needed
			}
		case st.State == StateUp && errors.As(v, &c):
			st.State = StateClock
		case st.State == StateDown && errors.As(downErr, &u):
			st.State = StateUnsupported
		case st.State == StateDown && errors.As(downErr, &d):
			st.State = StateDuplicate
		case st.State == StateDown && errors.As(downErr, &r):
			st.State = StateReplica
		}
		out[i] = st
	}
	return out
}

// NodeStatus is one backend as seen by Probe.
type NodeStatus struct {
	Addr    string
	Latency time.Duration
	// Err is nil when the backend answered PING and counts toward quorum;
	// a *QuarantineError or *ClockError when it answered but does not count.
	Err error
}

// Probe pings every backend once, which also reads the uptime of each new
// connection, and reports each one's state. A backend that has not
// answered when ctx ends has ctx's error.
func (e *Engine) Probe(ctx context.Context) []NodeStatus {
	type pong struct{ latency time.Duration }
	start := time.Now()
	f := fanout(e, backend.KeylessCommand("PING"), func(_ *node, r backend.Reply) (pong, error) {
		if _, err := r.Status(); err != nil {
			return pong{}, err
		}
		return pong{time.Since(start)}, nil
	})
	votes := collectAll(ctx, f, len(e.nodes))
	statuses := make([]NodeStatus, len(e.nodes))
	for i, n := range e.nodes {
		statuses[i] = NodeStatus{Addr: n.addr, Err: ctx.Err()} // until it is heard from
	}
	for _, v := range votes {
		s := NodeStatus{Addr: e.nodes[v.node].addr, Latency: v.val.latency}
		if v.err != nil {
			s.Err = v.err.(*NodeError).Err
		}
		statuses[v.node] = s
	}
	return statuses
}
