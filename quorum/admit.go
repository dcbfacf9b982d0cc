package quorum

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Which backends' votes count. Every new connection is admitted (admit)
// before any request is written on it, from what its greeting learned: a
// server that lacks what the scripts need, that another backend already
// reaches (one redis-server, one vote), or that is a replica, is refused;
// a server that may lack locks it or its predecessor granted is
// quarantined, and its replies count only once the quarantine is over
// (quarantined, asked of every vote). Such a server is, by the marker that
// lockproxy keeps in every backend's data set (lua/identity.lua), one
// whose data set was last written by another process (a restart, empty or
// from persistence files, a failover to a replica that may lack the last
// writes) or was never marked (a new, emptied or swapped server); its
// quarantine lasts until the leases it may have lost are gone, as the
// other backends' horizons tell (settle.go), max_ttl where they cannot.

// markerKey is the key of the marker in each backend's data set.
const markerKey = ReservedPrefix + "server"

// admit judges what the greeting of a new connection learned, before any
// request is written on it. A backend that restarted has closed every
// connection we had to it, so the first command to reach the new process
// comes after this: what server it is, and its uptime, are known before
// any of its replies counts. It refuses (fails the connection, so that no
// command is ever sent on it) a server that lacks what the scripts need,
// that another backend already reaches under another name, or that is a
// replica.
func (n *node) admit(g backend.Greeting) error {
	id, idErr := parseIdentity(g.Hello)
	switch {
	case n.skipIdentity:
		id, idErr = identity{}, nil
	case idErr != nil && g.InfoErr == nil:
		// A Redis whose user may not run INFO or TIME in a script, or
		// write the marker: without it a failover goes unseen.
		return fmt.Errorf("quorum: reading the backend's identity: %w", idErr)
	case idErr == nil && id.role != "master":
		return n.refuse(&ReplicaError{Role: id.role})
	}
	if g.RunID != "" {
		if other := n.servers.claim(n, g.RunID); other != nil {
			return n.refuse(&DuplicateError{Addr: other.addr, RunID: g.RunID})
		}
	}
	n.mu.Lock()
	n.refusal, n.serverID = "", g.RunID
	evictionNews := id.eviction != n.eviction
	n.eviction = id.eviction
	n.mu.Unlock()
	if evictionNews && id.eviction != "" {
		// Not refused: it evicts nothing until memory runs short, and
		// many deployments share a server with a cache. But an evicted
		// lock is a lock granted twice, so the operator must hear of it.
		n.log.Warn("backend may evict locks: its maxmemory-policy evicts keys when memory runs short, and an evicted lock can be granted twice; set maxmemory-policy noeviction (or no maxmemory)",
			"maxmemory_policy", id.eviction)
	}
	if idErr == nil || n.quarantine > 0 {
		n.observe(g, id)
		return nil
	}
	// A server without INFO (the embedded ones) carries no marker and no
	// record: it counts by its connection alone.
	n.mu.Lock()
	n.setRecordLocked("", true)
	n.mu.Unlock()
	n.noteRelation()
	return nil
}

// check judges the greeting's first round trip, before the identity script
// is sent: a server that is not fit to carry lock commands is sent nothing
// that writes.
func (n *node) check(g backend.Greeting) error {
	if g.InfoErr != nil && n.quarantine > 0 {
		// Only the quarantine cannot do without it. Without it the server
		// cannot be told apart from the others, but only servers that are
		// not Redis (such as the embedded ones) lack it; the connection's
		// log line says so.
		return g.InfoErr
	}
	if err := checkCommands(g); err != nil {
		return n.refuse(err)
	}
	return g.LoadErr
}

// identity is what lua/identity.lua told of the server and its marker.
type identity struct {
	role     string
	runID    string
	previous string        // the process the marker named; "" when unmarked
	left     time.Duration // until the marker's quarantine is over, by the server's clock
	reason   string        // why the marker's quarantine was written (admit.Reason...)
	promoted bool          // a replica promoted since it started
	record   string        // the backend set record, as it is now; none on a replica
	eviction string        // the maxmemory-policy when it may evict locks, else ""
	seeded   bool          // its fencing counter was re-seeded since the process started (seed.go)
	horizon  time.Duration // how long the longest lease recorded on it has left (0: none)
	floor    time.Duration // how long until the locks of the epochs before the last adopt are gone (0: none)
	marker   admit.Marker  // the marker as the script left it
}

func parseIdentity(replies []backend.Reply) (identity, error) {
	if len(replies) != 1 {
		return identity{}, errors.New("no identity reply")
	}
	a, err := replies[0].Array()
	if err != nil || len(a) != 12 {
		return identity{}, fmt.Errorf("identity script: %v", cmp.Or(err, errors.New("unexpected reply")))
	}
	f := fields{replies: a}
	id := identity{role: f.bulk(), runID: f.bulk(), previous: f.bulk()}
	until, now, promoted := f.integer(), f.integer(), f.integer()
	id.record, id.eviction = f.bulk(), f.bulk()
	seeded := f.integer()
	id.reason = f.bulk()
	id.horizon = time.Duration(f.integer()) * time.Millisecond
	id.floor = time.Duration(f.integer()) * time.Millisecond
	if f.err != nil {
		return identity{}, fmt.Errorf("identity script: %w", f.err)
	}
	if _, err := admit.ParseRecord(id.record); err != nil {
		return identity{}, err
	}
	id.left = time.Duration(until-now) * time.Millisecond
	if id.runID != "" && id.role == "master" {
		id.marker = admit.Marker{Present: true, Owner: id.runID, Until: until, Reason: id.reason}
	}
	id.promoted = promoted == 1
	id.seeded = seeded == 1
	return id, nil
}

// fields reads an array reply's elements in order, keeping the first error.
type fields struct {
	replies []backend.Reply
	next    int
	err     error
}

func (f *fields) bulk() string {
	s, err := f.replies[f.next].Bulk()
	f.next++
	f.err = cmp.Or(f.err, err)
	return s
}

func (f *fields) integer() int64 {
	n, err := f.replies[f.next].Integer()
	f.next++
	f.err = cmp.Or(f.err, err)
	return n
}

// minVersion is the first Redis with PEXPIRETIME, which the acquire and
// rollback scripts call. Valkey, forked from Redis 7.2, reports 7.2 as its
// redis_version.
const minVersion = "7.0"

// checkCommands reads what COMMAND INFO PEXPIRETIME told: an error when
// the server does not know the command (older than Redis 7.0, or the
// command renamed away), where every acquisition would fail after its SET
// landed. Where COMMAND is not allowed, the version in INFO server decides;
// where neither says, the server is taken at its word.
func checkCommands(g backend.Greeting) error {
	if g.Mode == "cluster" {
		return &UnsupportedError{Reason: "it is a Redis Cluster node (redis_mode:cluster)", Need: clusterNodeNeed}
	}
	switch known, told := g.Known["PEXPIRETIME"]; {
	case told && !known:
		return &UnsupportedError{Reason: "it does not know PEXPIRETIME (COMMAND INFO)"}
	case told:
		return nil
	}
	if g.Version != "" && versionLess(g.Version, minVersion) {
		return &UnsupportedError{Reason: "redis_version " + g.Version}
	}
	return nil
}

// versionLess compares dotted versions numerically, part by part.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// refuse logs why the backend does not count, once until it counts again
// (it is redialled while refused), and returns err.
func (n *node) refuse(err error) error {
	n.mu.Lock()
	news := n.refusal != err.Error()
	n.refusal = err.Error()
	n.mu.Unlock()
	if !news {
		return err
	}
	var (
		dup     *DuplicateError
		old     *UnsupportedError
		replica *ReplicaError
		set     *SetError
	)
	switch {
	case errors.As(err, &dup):
		n.log.Error("backend does not count toward quorum: it is the same redis-server as another backend, and one server has one vote; checked again on every reconnection",
			"same_as", dup.Addr, "run_id", dup.RunID)
	case errors.As(err, &old) && old.Need != "":
		n.log.Error("backend does not count toward quorum and is sent no lock commands: "+old.Need, "reason", old.Reason)
	case errors.As(err, &old):
		n.log.Error("backend does not count toward quorum and is sent no lock commands: lockproxy needs Redis "+minVersion+" or later, or Valkey 7.2 or later (PEXPIRETIME)",
			"reason", old.Reason)
	case errors.As(err, &set):
		n.log.Error(otherSetLog,
			"recorded", set.Recorded, "ours", set.Ours)
	case errors.As(err, &replica):
		n.changes[reasonIndex(ChangeReplica)].Add(1)
		n.log.Error("backend does not count toward quorum and is sent no lock commands: it is a replica, and lockproxy counts only masters; checked again on every reconnection (once promoted it counts after its quarantine)",
			"role", replica.Role)
	}
	return err
}

// servers records which redis-server process (its run_id) each backend
// reached last, so that two addresses of one server (the same host listed
// twice, a name and its IP, a DNS change) do not give it two votes
// (admit.Duplicate).
type servers struct {
	nodes []*node // the engine's, set before any is dialled

	mu      sync.Mutex
	claimed []string // by node index
}

// claim records that n reaches the server runID and returns nil, or the
// backend that already counts that server.
func (s *servers) claim(n *node, runID string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.claimed) <= n.index {
		s.claimed = append(s.claimed, "")
	}
	if other := admit.Duplicate(s.claimed, n.index, runID); other >= 0 {
		return s.nodes[other]
	}
	s.claimed[n.index] = runID
	return nil
}

// Reasons a backend's server changed, as Backends counts them.
const (
	ChangeRestart  = "restart"  // its data set was last written by another process of it
	ChangeFailover = "failover" // a replica promoted since it started, carrying its old master's data set
	ChangeUnmarked = "unmarked" // its data set carries no marker: new, emptied or swapped
	ChangeReplica  = "replica"  // it is a replica, and does not count
)

var changeReasons = [...]string{ChangeRestart, ChangeFailover, ChangeUnmarked, ChangeReplica}

// observe records that the backend reached the server of the greeting,
// with the identity its marker and record told (id.runID is "" when there
// was none to tell: a server that cannot carry them, counted by its
// connection alone): its replies count once that server has been up for
// the restart quarantine and the marker's quarantine is over, while its
// record names the engine's set. Each change of server is logged, once,
// with its reason.
func (n *node) observe(g backend.Greeting, id identity) {
	now := n.clock.Now()
	n.mu.Lock()
	previous := n.runID
	n.runID = g.RunID
	// uptime_in_seconds is rounded down, so this errs towards a longer wait.
	n.upSince = now.Add(-g.Uptime)
	n.markerUntil, n.reason = now.Add(id.left), id.reason
	n.marked, n.marker = id.runID != "", id.marker
	n.setRecordLocked(id.record, id.runID == "")
	// Without the identity script's word (a server that is not Redis, or
	// the tests' control) there is nothing to re-seed by.
	n.unseeded = n.fencing && !n.skipIdentity && id.runID != "" && !id.seeded
	eligibleAt := n.eligibleLocked()
	n.eligibleAt = eligibleAt
	recorded := n.relation == admit.Ours
	n.mu.Unlock()
	n.scheduleCount(eligibleAt)
	n.noteRelation()
	if previous == g.RunID {
		return
	}
	left := n.clock.Until(eligibleAt)
	var reason, why string
	switch {
	case id.runID == "":
	case id.promoted && (id.previous != id.runID || id.left > 0):
		// A proxy that saw the failover first has marked it already.
		reason, why = ChangeFailover, "it was a replica and has been promoted: it may lack the last lock writes of the master whose data set it carries (run_id "+cmp.Or(id.previous, "unknown: unmarked")+")"
	case id.previous == "":
		reason, why = ChangeUnmarked, "its data set carries no lockproxy marker (a new, emptied or swapped server, or the first start of this lockproxy version): it may lack locks granted before; on new backends, lockproxy init marks them and they count at once"
	case id.previous != id.runID:
		reason, why = ChangeRestart, "its data set was last written by another process (run_id "+id.previous+"): it restarted"
	}
	if reason != "" {
		n.changes[reasonIndex(reason)].Add(1)
	}
	attrs := []any{"uptime", g.Uptime}
	if why != "" {
		attrs = append(attrs, "why", why)
	}
	switch {
	case left <= 0 && previous == "" && (reason == "" || reason == ChangeUnmarked):
		if recorded {
			n.log.Info("backend counts toward quorum", attrs...)
		}
	case left <= 0:
		n.log.Warn("backend's server changed; no quarantine (restart_quarantine is off, or it has been up longer than max_ttl)", attrs...)
	case id.reason == admit.ReasonEpoch && reason == "":
		n.logEpochWait(left)
	default:
		n.log.Warn("backend quarantined: it may lack locks granted before; its replies count toward quorum from then on",
			append(attrs, "counts_in", left.Round(time.Second), "counts_at", n.clock.Now().Add(left).Format(time.RFC3339))...)
	}
}

// learn records what the identity script told of the backend when its
// records were read again (readRecords): its record, its marker's end and
// whether its counter was re-seeded. It reports false when the reply came
// from another process than the one greeted (it restarted since: its next
// greeting tells).
func (n *node) learn(id identity) bool {
	n.mu.Lock()
	if id.runID != n.runID {
		n.mu.Unlock()
		return false
	}
	until := n.clock.Now().Add(id.left)
	// The same end, read again, moves by a round trip: only a new one is news.
	moved := until.Sub(n.markerUntil).Abs() > time.Second || id.reason != n.reason
	if moved {
		n.markerUntil, n.reason = until, id.reason
	}
	n.marker = id.marker
	n.setRecordLocked(id.record, false)
	if id.seeded {
		n.unseeded = false
	}
	// The identity script rewrote a marker that no longer named the
	// process: its data set was emptied or replaced while connected.
	emptied := id.previous != id.runID
	if emptied {
		n.unseeded = n.fencing && !id.seeded
	}
	eligibleAt := n.eligibleLocked()
	later := eligibleAt.After(n.eligibleAt) && moved
	n.eligibleAt = eligibleAt
	n.mu.Unlock()
	if moved || emptied {
		n.scheduleCount(eligibleAt)
	}
	switch left := n.clock.Until(eligibleAt); {
	case emptied:
		n.changes[reasonIndex(ChangeUnmarked)].Add(1)
		n.log.Warn("backend's data set lost its marker while connected (emptied or replaced: FLUSHALL, DEBUG RELOAD): it may lack locks granted before; its replies count toward quorum from then on",
			"counts_in", left.Round(time.Second), "counts_at", n.clock.Now().Add(left).Format(time.RFC3339))
	case later && id.reason == admit.ReasonEpoch:
		n.logEpochWait(left)
	}
	n.noteRelation()
	return true
}

// logEpochWait logs that the backend waits for the old epoch's locks.
func (n *node) logEpochWait(left time.Duration) {
	n.log.Warn("backend in epoch wait: the backend set changed, and locks granted in the old epoch may still be held; its replies count toward quorum from then on",
		"counts_in", left.Round(time.Second), "counts_at", n.clock.Now().Add(left).Format(time.RFC3339))
}

// setRecordLocked records the backend's set record, raw ("" none). A
// server that cannot carry one (exempt: one without INFO, as the embedded
// ones, or the tests' control) counts by its connection alone. n.mu is
// held.
func (n *node) setRecordLocked(raw string, exempt bool) {
	rec, err := admit.ParseRecord(raw)
	if err != nil {
		rec = admit.Record{Present: true, Set: admit.Set{Epoch: int(^uint(0) >> 1)}} // unreadable: another's, and newer
	}
	n.record, n.recordRaw = rec, raw
	n.relation = admit.Relate(n.set, rec)
	if exempt {
		n.relation = admit.Ours
	}
}

// setRecord records that the backend now records rec (a claim wrote it).
func (n *node) setRecord(raw string) {
	n.mu.Lock()
	n.setRecordLocked(raw, false)
	n.mu.Unlock()
	n.noteRelation()
}

// eligibleLocked is when the backend's waits are over: its marker's, or
// where no marker speaks (a server the tests' control does not ask), the
// restart quarantine since its server started. Where the marker speaks,
// the uptime tells nothing more: a new process found a marker naming
// another and wrote its own wait, which a proof of the horizons may have
// shortened (settle.go). n.mu is held.
func (n *node) eligibleLocked() time.Time {
	at := n.markerUntil
	if q := n.upSince.Add(n.quarantine); n.quarantine > 0 && !n.marked && q.After(at) {
		at = q
	}
	return at
}

// waitLeft is how long until the backend's waits are over (admit.Left).
// n.mu is held.
func (n *node) waitLeft() time.Duration { return n.waitLeftAt(n.clock.Now()) }

// waitLeftAt is waitLeft at now, for a caller that read the time already.
// n.mu is held.
func (n *node) waitLeftAt(now time.Time) time.Duration {
	quarantine := n.quarantine
	if n.marked {
		quarantine = 0
	}
	return admit.Left(now.Sub(n.upSince), quarantine, n.markerUntil.Sub(now))
}

// noteRelation logs, once per change, how the backend's record stands to
// the engine's set when that keeps it from counting, and when it counts
// again; and tells the engine, whose quorum may have changed.
func (n *node) noteRelation() {
	n.mu.Lock()
	rel, was, recorded := n.relation, n.noted, n.recordRaw
	n.noted = rel
	n.mu.Unlock()
	if rel == was {
		return
	}
	defer n.changed()
	if rel != admit.Ours {
		n.readRecords() // a backend that lost its record gets it back at once, where it may
	}
	ours := n.set.Name()
	switch rel {
	case admit.Ours:
		if was != admit.Absent {
			n.log.Info("backend records this proxy's backend set: it counts toward quorum once any quarantine is over", "backend_set", ours)
		}
	case admit.Other:
		n.log.Error(otherSetLog, "recorded", recorded, "ours", ours)
	case admit.Older:
		n.log.Warn("backend does not count toward quorum: it records an older epoch than this proxy's; a new epoch counts once lockproxy adopt has written it to every backend (docs/backends.md: Changing the backend set)",
			"recorded", recorded, "ours", ours)
	case admit.Adopting:
		n.log.Info("backend does not count toward quorum until lockproxy adopt finishes writing this proxy's backend set", "ours", ours)
	}
}

func reasonIndex(reason string) int {
	for i, r := range changeReasons {
		if r == reason {
			return i
		}
	}
	panic("quorum: unknown change reason " + reason)
}

// scheduleCount arranges for the log line that the backend counts again
// at eligibleAt, replacing any earlier arrangement, and for the engine to
// hear that what counts changed.
func (n *node) scheduleCount(eligibleAt time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.countTimer != nil {
		n.countTimer.Stop()
	}
	left := n.clock.Until(eligibleAt)
	if left <= 0 {
		n.countTimer = nil
		n.startSeedLocked()
		return
	}
	n.countTimer = n.clock.AfterFunc(left, func() {
		n.mu.Lock()
		still := n.eligibleAt.Equal(eligibleAt)
		unseeded := n.unseeded
		if still {
			n.startSeedLocked()
		}
		n.mu.Unlock()
		switch {
		case !still:
		case unseeded:
			n.log.Info("backend's quarantine is over; it counts toward quorum once its fencing counter is re-seeded")
		default:
			n.log.Info("backend leaves quarantine: its replies count toward quorum")
			n.changed()
		}
	})
}

// startSeedLocked starts the re-seed of the fencing counter, unless it is
// not needed or already under way. n.mu is held.
func (n *node) startSeedLocked() {
	if n.unseeded && !n.seeding {
		n.seeding = true
		go n.reseed(n)
	}
}

// otherSetLog is logged once when a backend's set record names another
// set than this proxy's, of a newer epoch or of the same one.
const otherSetLog = "backend does not count toward quorum: it records another backend set than this proxy's; every proxy must list the same backends with the same backend_set_epoch, and a change of backends is adopted (lockproxy adopt; docs/backends.md: Changing the backend set)"

// noteSetRefusal records that a script's set check refused the engine's
// set, and showed the record that refused it: read as a record read.
func (n *node) noteSetRefusal(err *SetError) {
	n.mu.Lock()
	n.setRecordLocked(err.Recorded, false)
	n.mu.Unlock()
	n.noteRelation()
}

// verdict is nil when backend i's votes count toward quorum now
// (admit.Counts), else why not: a *SetError, a *QuarantineError or a
// *ClockError.
func (e *Engine) verdict(i int, n *node) error { return e.verdictAt(i, n, e.clock.Now()) }

// verdictAt is verdict at now: a fan-out judges each vote at the time it
// was cast, which it reads anyway.
func (e *Engine) verdictAt(i int, n *node, now time.Time) error {
	n.mu.Lock()
	rel, recorded := n.relation, n.recordRaw
	if e.hooks.brokenSet {
		rel = admit.Ours
	}
	left, reason, unseeded := n.waitLeftAt(now), n.reason, n.unseeded
	n.mu.Unlock()
	clock := e.clocks.err(i)
	switch {
	case admit.Counts(rel, left > 0, clock != nil, unseeded):
		return nil
	case rel != admit.Ours:
		return setError(rel, recorded, e.set)
	case left > 0:
		return &QuarantineError{Left: left, Reason: reason}
	case clock != nil:
		return clock
	}
	return &QuarantineError{Seeding: true}
}
