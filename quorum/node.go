package quorum

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one backend master and what the engine knows of its restarts.
type node struct {
	index   int
	addr    string
	pipe    *pipe
	log     *slog.Logger
	stats   nodeStats
	servers *servers // the engine's: which backend counts which server

	// quarantine is off when the backends persist every write.
	quarantine time.Duration

	mu         sync.Mutex
	runID      string    // the backend process last seen
	eligibleAt time.Time // its replies count from then on (monotonic clock)
	refusal    string    // why the last greeting refused the backend, as logged
	serverID   string    // the run_id of the server connected to; "" if it gave none
}

func newNode(index int, rawURL string, cfg Config, srv *servers) (*node, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backend %d: %w", index, err)
	}
	if opt.TLSConfig != nil && cfg.TLSConfig != nil {
		tc := cfg.TLSConfig.Clone()
		if tc.ServerName == "" {
			tc.ServerName = opt.TLSConfig.ServerName
		}
		tc.InsecureSkipVerify = tc.InsecureSkipVerify || opt.TLSConfig.InsecureSkipVerify
		opt.TLSConfig = tc
	}
	n := &node{
		index:   index,
		addr:    opt.Addr,
		log:     cfg.Logger.With("backend", opt.Addr),
		servers: srv,
	}
	if !cfg.DisableRestartQuarantine {
		n.quarantine = cfg.MaxTTL
	}
	n.pipe = newPipe(opt, cfg.NodeTimeout, n.hello, n.logState)
	return n, nil
}

// hello greets a new connection. A backend that restarted has closed every
// connection we had to it, so the first command to reach the new process
// comes after this: what server it is, and its uptime, are known before any
// of its replies counts. It refuses (fails the connection, so that no
// command is ever sent on it) a server that lacks what the scripts need, or
// that another backend already reaches under another name. The scripts are
// loaded in the same round trip, so that the first lock after a restart is
// as quick as any.
func (n *node) hello(rw *bufio.ReadWriter) error {
	cmds := []*command{
		plainCommand("INFO", "server"),
		plainCommand("COMMAND", "INFO", "PEXPIRETIME"),
	}
	for _, s := range allScripts {
		cmds = append(cmds, plainCommand("SCRIPT", "LOAD", s.src))
	}
	for _, c := range cmds {
		rw.Write(c.wire)
	}
	if err := rw.Flush(); err != nil {
		return err
	}
	replies := make([]reply, len(cmds))
	for i := range cmds {
		r, err := readReply(rw.Reader)
		if err != nil {
			return err
		}
		replies[i] = r
	}
	var info serverInfo
	if r := replies[0]; r.kind == '-' {
		// Only the quarantine cannot do without it. Without it the server
		// cannot be told apart from the others, but only servers that are
		// not Redis (such as the embedded ones) lack it; the connection's
		// log line says so.
		if n.quarantine > 0 {
			return redisError(r.str)
		}
	} else {
		var err error
		if info, err = parseServerInfo(r.str); err != nil {
			return err
		}
	}
	if err := checkCommands(replies[1], info.version); err != nil {
		return n.refuse(err)
	}
	for _, r := range replies[2:] {
		if r.kind == '-' {
			return redisError(r.str)
		}
	}
	if info.runID != "" {
		if other := n.servers.claim(n, info.runID); other != nil {
			return n.refuse(&DuplicateError{Addr: other.addr, RunID: info.runID})
		}
	}
	n.mu.Lock()
	n.refusal, n.serverID = "", info.runID
	n.mu.Unlock()
	if n.quarantine > 0 {
		n.observe(info.runID, info.uptime)
	}
	return nil
}

// minVersion is the first Redis with PEXPIRETIME, which the acquire and
// rollback scripts call. Valkey, forked from Redis 7.2, reports 7.2 as its
// redis_version.
const minVersion = "7.0"

// checkCommands reads COMMAND INFO PEXPIRETIME: nil when the server does
// not know the command (older than Redis 7.0, or the command renamed away),
// where every acquisition would fail after its SET landed. Where COMMAND is
// not allowed, the version in INFO server decides; where neither says, the
// server is taken at its word.
func checkCommands(r reply, version string) error {
	if r.kind == '*' && len(r.array) == 1 {
		switch cmd := r.array[0]; {
		case cmd.kind == 0:
			return &UnsupportedError{Reason: "it does not know PEXPIRETIME (COMMAND INFO)"}
		case cmd.kind == '*' && len(cmd.array) > 0 && strings.EqualFold(cmd.array[0].str, "pexpiretime"):
			return nil
		}
	}
	if version != "" && versionLess(version, minVersion) {
		return &UnsupportedError{Reason: "redis_version " + version}
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

// logState logs each change of the backend's connection, once: a dead
// backend is redialled every timeout, and only the first failure is news.
// hello has logged its refusals already.
func (n *node) logState(up bool, err error) {
	if up {
		n.mu.Lock()
		id := n.serverID
		n.mu.Unlock()
		if id == "" {
			id = "unknown (no INFO server): not checked against the other backends"
		}
		n.log.Info("backend connected", "run_id", id)
		return
	}
	if isRefusal(err) {
		return
	}
	n.log.Warn("backend unreachable; its votes count as failures until it answers again", "err", err)
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

// serverInfo is what INFO server tells of a backend.
type serverInfo struct {
	runID   string
	uptime  time.Duration
	version string // redis_version; "" when not given
}

func parseServerInfo(info string) (serverInfo, error) {
	var si serverInfo
	seconds := -1
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch name {
		case "run_id":
			si.runID = value
		case "redis_version":
			si.version = value
		case "uptime_in_seconds":
			var err error
			if seconds, err = strconv.Atoi(value); err != nil {
				return serverInfo{}, fmt.Errorf("quorum: bad uptime_in_seconds %q", value)
			}
		}
	}
	if seconds < 0 || si.runID == "" {
		return serverInfo{}, fmt.Errorf("quorum: INFO server lacks run_id or uptime_in_seconds")
	}
	si.uptime = time.Duration(seconds) * time.Second
	return si, nil
}

// do sends cmd to the backend and waits for its reply until ctx is done.
// The command is not withdrawn then: its late reply is dropped, and the
// caller must treat its effect as unknown.
func (n *node) do(ctx context.Context, cmd *command) (reply, error) {
	w := make(waiter, 1)
	n.pipe.send(&pending{to: w, node: n.index, cmd: cmd})
	select {
	case o := <-w:
		return o.reply, o.err
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// run runs a script on the backend and waits as do does.
func (n *node) run(ctx context.Context, s *script, keys []string, args ...any) (reply, error) {
	return n.do(ctx, scriptCommand(s, keys, args...))
}

type pipeOutcome struct {
	reply reply
	err   error
}

// waiter is the completer of a single request with someone waiting on it.
type waiter chan pipeOutcome

func (w waiter) complete(_ int, r reply, err error) { w <- pipeOutcome{r, err} }
