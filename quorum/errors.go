package quorum

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

var (
	// ErrNotAcquired means the lock was not taken, and would not have been
	// had every backend that did not answer agreed: another token holds it,
	// or the acquisition left no validity. It was rolled back on every
	// backend.
	ErrNotAcquired = errors.New("quorum: not acquired")

	// ErrNotHeld means the token does not hold the key on a quorum of
	// backends, even counting those that did not answer as holders, so it
	// could not be released or extended.
	ErrNotHeld = errors.New("quorum: not held")

	// ErrAbsent means a release found the key absent on a quorum: the lock
	// had expired and nobody holds it. errors.Is(ErrAbsent, ErrNotHeld).
	ErrAbsent = fmt.Errorf("%w: key absent", ErrNotHeld)

	// ErrNotFound means no value is held by a quorum, even counting the
	// backends that did not answer as holders.
	ErrNotFound = errors.New("quorum: not found")

	// ErrNoExpiry means the value held by a quorum has no expiry there.
	ErrNoExpiry = errors.New("quorum: no expiry")

	// ErrNoQuorum is matched (errors.Is) by every *NoQuorumError.
	ErrNoQuorum = errors.New("quorum: no quorum")

	// ErrReservedKey refuses a request for a key that starts with
	// ReservedPrefix: the engine's own keys (the marker of each backend's
	// data set) live there; and a hash lock's owner field that starts with
	// a NUL byte, where the engine keeps its own fields beside the owner's
	// (hashlock.go).
	ErrReservedKey = errors.New("quorum: key reserved for lockproxy")
)

// ReservedPrefix starts the keys the engine keeps in every backend for
// itself; no request may name one.
const ReservedPrefix = "{lockproxy}:"

// NoQuorumError reports an operation that could not be decided: the
// backends that gave no reply that counts could have changed the answer.
// Either fewer than Needed of Total backends answered (Counted), or enough
// answered but only Agreed of them agreed on the outcome that needs a
// quorum (they did what was asked or, for a read, hold the same value), and
// the others could have made it a quorum. Nodes says, for each backend that
// did not count, why not.
type NoQuorumError struct {
	Counted int
	Agreed  int
	Needed  int
	Total   int
	Nodes   []*NodeError
	// Split, where set, says what the answers were when they split
	// between more outcomes than Agreed counts (a release: released,
	// still held, never held), in place of "only Agreed agreed".
	Split string
}

func (e *NoQuorumError) Error() string {
	var b strings.Builder
	b.WriteString("quorum: ")
	b.WriteString(e.Reason())
	for _, n := range e.Nodes {
		b.WriteString("; ")
		b.WriteString(n.Error())
	}
	return b.String()
}

// Reason says why nothing was decided, in words safe to show a client: the
// counts, then each kind of backend that did not count, grouped, such as
// "1 of 3 backends answered, 2 needed (2 timeout)". When some of those
// answered but may not count (quarantined, a clock out of bounds, a
// refusal, our credentials refused), it says so, lest "answered" send an operator looking for a
// network fault: "0 of 3 backends count (3 answered, 3 quarantined after a
// restart for up to 12 s more); 2 needed".
func (e *NoQuorumError) Reason() string {
	groups, answered := e.groups()
	kinds := ""
	if len(groups) > 0 {
		kinds = " (" + strings.Join(groups, ", ") + ")"
	}
	switch {
	case e.Counted >= e.Needed && e.Split != "":
		return fmt.Sprintf("%d of %d backends answered but no %d agreed: %s", e.Counted, e.Total, e.Needed, e.Split) + kinds
	case e.Counted >= e.Needed:
		return fmt.Sprintf("%d of %d backends answered but only %d agreed, %d needed", e.Counted, e.Total, e.Agreed, e.Needed) + kinds
	case answered > 0:
		return fmt.Sprintf("%d of %d backends count (%d answered, %s); %d needed", e.Counted, e.Total, e.Counted+answered, strings.Join(groups, ", "), e.Needed)
	}
	return fmt.Sprintf("%d of %d backends answered, %d needed", e.Counted, e.Total, e.Needed) + kinds
}

// groups counts the backends that did not count by kind, in the order
// first seen: "2 timeout", "1 connection refused"; answered is how many of
// them answered. Each kind of wait is one group, with the longest time
// left, so that a restart of every backend reads as one.
func (e *NoQuorumError) groups() (groups []string, answered int) {
	var (
		order []string
		count = map[string]int{}
		left  = map[string]time.Duration{}
	)
	for _, n := range e.Nodes {
		if n == nil {
			continue
		}
		k := n.Kind()
		var q *QuarantineError
		if errors.As(n.Err, &q) && !q.Seeding {
			k = q.kind()
			left[k] = max(left[k], q.Left)
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		if n.answered() {
			answered++
		}
	}
	for _, k := range order {
		label := k
		if l, ok := left[k]; ok {
			label += " for up to " + seconds(l) + " more"
		}
		groups = append(groups, fmt.Sprintf("%d %s", count[k], label))
	}
	return groups, answered
}

// Is makes errors.Is(err, ErrNoQuorum) true.
func (e *NoQuorumError) Is(target error) bool { return target == ErrNoQuorum }

// Unwrap returns the per-backend errors.
func (e *NoQuorumError) Unwrap() []error {
	errs := make([]error, len(e.Nodes))
	for i, n := range e.Nodes {
		errs[i] = n
	}
	return errs
}

// NodeError is the failure of one backend within a fan-out.
type NodeError struct {
	Node int    // index in Config.Backends
	Addr string // host:port, never the password
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("backend %s: %s", e.Addr, e.Kind())
}

func (e *NodeError) Unwrap() error { return e.Err }

// Kind names the failure in words of our own (timeout, refused,
// quarantined, closed, auth, not redis, error), safe to show to clients: a backend's own
// error text could carry MOVED or READONLY and make clients redirect.
func (e *NodeError) Kind() string {
	var (
		q *QuarantineError
		c *ClockError
		s *SetError
	)
	switch {
	case errors.As(e.Err, &q):
		return q.Error()
	case errors.As(e.Err, &c):
		return c.Error()
	case errors.As(e.Err, &s):
		return strings.ReplaceAll(s.State.String(), "_", " ")
	}
	return failureKind(e.Err)
}

// answered reports whether the backend answered but its answer may not
// count: quarantined, its clock out of bounds, refused by its greeting or a
// script's set check, or refusing our credentials.
func (e *NodeError) answered() bool {
	var (
		q *QuarantineError
		c *ClockError
		a *backend.AuthError
	)
	return errors.As(e.Err, &q) || errors.As(e.Err, &c) || errors.As(e.Err, &a) || isRefusal(e.Err)
}

// quarantineKind is how a quarantine that has time left starts, in
// QuarantineError's text and in NoQuorumError's groups; epochWaitKind the
// epoch wait.
const (
	quarantineKind = "quarantined after a restart"
	epochWaitKind  = "in the epoch wait"
	unmarkedKind   = "quarantined as unmarked (new or emptied; lockproxy init marks new ones)"
)

// seconds writes d as whole seconds, rounded up: "12 s". A quarantine
// shown as "0 s" while it lasts would read as over.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int64((d+time.Second-1)/time.Second))
}

// QuarantineError marks a backend that answered but does not count toward
// any quorum yet: its data set may lack locks granted less than max_ttl
// ago (a restart, a failover, an unmarked data set), or, with fencing on,
// the fencing counter, until it is re-seeded from the other backends.
type QuarantineError struct {
	Left time.Duration
	// Reason is why it waits, as its marker says: restart, unmarked,
	// failover, or epoch (the epoch wait: the backend set changed, and the
	// old epoch's locks may still be held).
	Reason  string
	Seeding bool // Left is over; the fencing counter is not re-seeded yet
}

func (e *QuarantineError) Error() string {
	if e.Seeding {
		return "quarantined after a restart until its fencing counter is re-seeded from the other backends"
	}
	return fmt.Sprintf("%s for %s more", e.kind(), seconds(e.Left))
}

// kind is how the wait is named, in its text and in NoQuorumError's
// groups.
func (e *QuarantineError) kind() string {
	switch e.Reason {
	case admit.ReasonEpoch:
		return epochWaitKind
	case admit.ReasonFailover:
		return "quarantined after a failover"
	case admit.ReasonUnmarked:
		// Most often a cold start on fresh backends, which a restart's
		// words would misname; init is what ends that wait at once.
		return unmarkedKind
	}
	return quarantineKind
}

// State is StateEpochWait for the epoch wait, else StateQuarantined.
func (e *QuarantineError) State() State {
	if e.Reason == admit.ReasonEpoch {
		return StateEpochWait
	}
	return StateQuarantined
}

// ClockError marks a backend whose clock runs at a rate outside the drift
// allowance, relative to the proxy's: its keys expire early (fast) or late
// (slow), so its replies do not count toward any quorum until its rate has
// been within the allowance for max_ttl.
type ClockError struct {
	Rate  float64 // its clock's rate as last measured; the proxy's is 1
	Bound float64 // drift_factor: a backend counts within 1 ± Bound
}

func (e *ClockError) Error() string {
	return fmt.Sprintf("clock rate %.4f of the proxy's, beyond drift_factor %g", e.Rate, e.Bound)
}

// TTLError rejects a TTL outside (0, max_ttl].
type TTLError struct {
	TTL time.Duration
	Max time.Duration
}

func (e *TTLError) Error() string {
	if e.TTL <= 0 {
		return fmt.Sprintf("quorum: ttl %s is not positive", e.TTL)
	}
	return fmt.Sprintf("quorum: ttl %dms exceeds max_ttl %dms", e.TTL.Milliseconds(), e.Max.Milliseconds())
}

// UnsupportedError marks a backend that lacks a command the lock scripts
// need (PEXPIRETIME: Redis 7.0, Valkey 7.2): it is sent no lock commands
// and does not count toward any quorum.
type UnsupportedError struct {
	Reason string // what showed it, e.g. "redis_version 6.2.14"
	// Need says what lockproxy needs instead; "" for the version.
	Need string
}

func (e *UnsupportedError) Error() string {
	return "unsupported server: " + e.Reason + "; " + e.need()
}

func (e *UnsupportedError) need() string {
	if e.Need != "" {
		return e.Need
	}
	return "lockproxy needs Redis " + minVersion + " or later, or Valkey 7.2 or later"
}

// clusterNodeNeed is why a Redis Cluster node is refused as a backend.
const clusterNodeNeed = "lockproxy counts independent standalone masters: a failover inside a cluster's shard loses that shard's locks unseen, and a second holder gets in; run standalone masters, several sets of them as shard groups ([[groups]]) for more capacity"

// DuplicateError marks a backend that reaches the same redis-server (the
// same run_id) as another backend, Addr, which alone counts for it.
type DuplicateError struct {
	Addr  string
	RunID string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("same redis-server as backend %s (run_id %s)", e.Addr, e.RunID)
}

// ReplicaError marks a backend whose server is a replica (INFO
// replication's role): its writes fail, and a replica never counts. It is
// checked again on every reconnection, so that a promoted one counts once
// its quarantine is over.
type ReplicaError struct {
	Role string // "slave", as Redis names it
}

func (e *ReplicaError) Error() string {
	return "the server is a replica (role:" + e.Role + "); lockproxy counts only masters"
}

// isRefusal reports whether err is a greeting's refusal of a backend that
// answered: unsupported, a duplicate of another, or a replica.
func isRefusal(err error) bool {
	var (
		u *UnsupportedError
		d *DuplicateError
		r *ReplicaError
		s *SetError
	)
	return errors.As(err, &u) || errors.As(err, &d) || errors.As(err, &r) || errors.As(err, &s)
}
