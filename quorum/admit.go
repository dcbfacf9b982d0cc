package quorum

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Which backends' votes count. Every new connection is admitted (admit)
// before any request is written on it, from what its greeting learned: a
// server that lacks what the scripts need, or that another backend already
// reaches (one redis-server, one vote), is refused; a server that
// restarted less than max_ttl ago is quarantined, since it may have
// forgotten locks it granted, and its replies count only once it has been
// up that long (quarantined, asked of every vote).

// admit judges what the greeting of a new connection learned, before any
// request is written on it. A backend that restarted has closed every
// connection we had to it, so the first command to reach the new process
// comes after this: what server it is, and its uptime, are known before
// any of its replies counts. It refuses (fails the connection, so that no
// command is ever sent on it) a server that lacks what the scripts need,
// or that another backend already reaches under another name.
func (n *node) admit(g backend.Greeting) error {
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
	if g.LoadErr != nil {
		return g.LoadErr
	}
	if g.RunID != "" {
		if other := n.servers.claim(n, g.RunID); other != nil {
			return n.refuse(&DuplicateError{Addr: other.addr, RunID: g.RunID})
		}
	}
	n.mu.Lock()
	n.refusal, n.serverID = "", g.RunID
	n.mu.Unlock()
	if n.quarantine > 0 {
		n.observe(g.RunID, g.Uptime)
	}
	return nil
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
		dup *DuplicateError
		old *UnsupportedError
	)
	switch {
	case errors.As(err, &dup):
		n.log.Error("backend does not count toward quorum: it is the same redis-server as another backend, and one server has one vote; checked again on every reconnection",
			"same_as", dup.Addr, "run_id", dup.RunID)
	case errors.As(err, &old):
		n.log.Error("backend does not count toward quorum and is sent no lock commands: lockproxy needs Redis "+minVersion+" or later, or Valkey 7.2 or later (PEXPIRETIME)",
			"reason", old.Reason)
	}
	return err
}

// servers maps each redis-server process (its run_id) to the one backend
// whose votes count for it: two addresses of one server (the same host
// listed twice, a name and its IP, a DNS change) would give it two votes.
type servers struct {
	mu     sync.Mutex
	byID   map[string]*node
	byNode map[*node]string
}

// claim records that n reaches the server runID and returns nil, or the
// backend that already counts that server. A claim lasts until its backend
// reaches another server: a backend that lost its connection may well come
// back to the same one.
func (s *servers) claim(n *node, runID string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other := s.byID[runID]; other != nil && other != n {
		return other
	}
	if s.byID == nil {
		s.byID, s.byNode = map[string]*node{}, map[*node]string{}
	}
	if old, ok := s.byNode[n]; ok {
		delete(s.byID, old)
	}
	s.byID[runID], s.byNode[n] = n, runID
	return nil
}

// observe records that the backend reached the server runID, up for
// uptime: its replies count once that server has been up for the
// quarantine. Each new server is logged.
func (n *node) observe(runID string, uptime time.Duration) {
	// uptime_in_seconds is rounded down, so this errs towards a longer wait.
	eligibleAt := time.Now().Add(n.quarantine - uptime)
	n.mu.Lock()
	previous := n.runID
	n.runID = runID
	n.eligibleAt = eligibleAt
	n.mu.Unlock()
	if previous == runID {
		return
	}
	left := time.Until(eligibleAt)
	switch {
	case left <= 0 && previous == "":
		n.log.Info("backend counts toward quorum", "uptime", uptime)
	case left <= 0:
		n.log.Warn("backend restarted; it has been up longer than max_ttl and counts toward quorum", "uptime", uptime)
	default:
		n.log.Warn("backend quarantined: up for less than max_ttl, it may have forgotten locks; its replies count toward quorum from then on",
			"uptime", uptime, "counts_in", left.Round(time.Second), "counts_at", time.Now().Add(left).Format(time.RFC3339))
	}
}

// quarantined returns a *QuarantineError while the backend's replies must
// not count toward any quorum, and nil otherwise.
func (n *node) quarantined() error {
	if n.quarantine == 0 {
		return nil
	}
	n.mu.Lock()
	left := time.Until(n.eligibleAt)
	n.mu.Unlock()
	if left > 0 {
		return &QuarantineError{Left: left}
	}
	return nil
}
