package quorum

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

const shortMaxTTL = 3 * time.Second

// waitAllCount waits until every backend counts toward quorum.
func waitAllCount(t *testing.T, e *Engine) {
	t.Helper()
	redistest.Eventually(t, func() string {
		for _, s := range e.Probe(t.Context()) {
			if s.Err != nil {
				return s.Addr + ": " + s.Err.Error()
			}
		}
		return ""
	})
}

// TestQuarantineColdStart: backends that have just started may have
// forgotten locks, so they count only once up for max_ttl (the default
// minute, of stepped time), and not a step before.
func TestQuarantineColdStart(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{})
	noQuorum := func(left string) {
		t.Helper()
		_, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second)
		var nq *NoQuorumError
		if !errors.As(err, &nq) {
			t.Fatalf("expected *NoQuorumError while every backend is quarantined, got %v", err)
		}
		// They answered: the reason must say so, and why they do not count.
		want := "0 of 3 backends count (3 answered, 3 quarantined as unmarked (new or emptied; lockproxy init marks new ones) for up to " + left + " more); 2 needed"
		if got := nq.Reason(); got != want {
			t.Errorf("reason %q, expected %q", got, want)
		}
	}
	noQuorum("60 s")
	c.step(t, defaultMaxTTL-time.Second)
	noQuorum("1 s")
	c.step(t, time.Second)
	waitAllCount(t, c.engine)
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Fatalf("Acquire after quarantine: %v", err)
	}
}

// TestQuarantineRestartHazard reproduces the Redlock restart hazard: a lock
// held on backends 0 and 1 of 3; backend 1 restarts empty. Without
// quarantine a second token takes the lock on 1 and 2 while the first still
// holds it. With quarantine it must not, even for an engine (a proxy) started
// after the restart, until backend 1 has been up for max_ttl.
func TestQuarantineRestartHazard(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{})
	c.step(t, defaultMaxTTL)
	waitAllCount(t, c.engine)
	key := uniqueKey(t)
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), key, "first", time.Minute)
	}
	c.servers[1].Restart()

	cfg := c.cfg
	cfg.Backends = append([]string(nil), cfg.Backends...)
	for name, e := range map[string]*Engine{
		"engine running across the restart": c.engine,
		"engine started after the restart":  newEngine(t, cfg),
	} {
		// Not refused either: backend 1 would grant it, were it counted.
		if exp, got := "noquorum", outcome(second(e.acquire(t.Context(), key, "second", time.Second))); exp != got {
			t.Fatalf("%s: expected %s, got %s", name, exp, got)
		}
	}

	// The control: every check off. (With only the restart quarantine off,
	// the marker's quarantine, which the engines above wrote on backend 1,
	// still holds.)
	unsafe := cfg
	unsafe.DisableRestartQuarantine, unsafe.skipIdentity = true, true
	if exp, got := "ok", outcome(second(newEngine(t, unsafe).acquire(t.Context(), key, "second", time.Second))); exp != got {
		t.Fatalf("without quarantine: expected the hazard (%s), got %s", exp, got)
	}
}

// TestQuarantineEnds: two of three backends restarted empty count again
// at max_ttl of stepped time, not a step before: the set record the third
// keeps is recorded on them again.
func TestQuarantineEnds(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{})
	c.step(t, defaultMaxTTL)
	waitAllCount(t, c.engine)
	for i := range 2 {
		c.servers[i].Restart()
		c.connected(t, i)
	}
	try := func() error { return second(c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second)) }
	if exp, got := "noquorum", outcome(try()); exp != got {
		t.Fatalf("right after the restarts: expected %s, got %s", exp, got)
	}
	c.step(t, defaultMaxTTL-time.Second)
	// The records are back by now; the quarantine alone keeps them out.
	for _, i := range []int{0, 1} {
		redistest.Eventually(t, func() string {
			if c.direct[i].Exists(t.Context(), setKey).Val() == 0 {
				return "backend " + c.servers[i].Addr() + " has no set record"
			}
			return ""
		})
	}
	var nq *NoQuorumError
	if err := try(); !errors.As(err, &nq) || !strings.Contains(nq.Reason(), "2 quarantined as unmarked (new or emptied; lockproxy init marks new ones) for up to 1 s more") {
		t.Fatalf("a second before max_ttl: expected NOQUORUM for the quarantine, got %v", err)
	}
	c.step(t, time.Second)
	redistest.Eventually(t, func() string {
		if got := outcome(try()); got != "ok" {
			return "still " + got + " after the quarantine should have ended"
		}
		return ""
	})
}

// commandCalls returns how many times srv has run each command since it
// started, from INFO commandstats.
func commandCalls(t *testing.T, srv *redistest.Server) map[string]int {
	t.Helper()
	c := srv.Client(t)
	defer c.Close()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if name, found := strings.CutPrefix(name, "cmdstat_"); ok && found {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			calls[name] = n
		}
	}
	return calls
}

// TestUnsupportedBackend: a server without PEXPIRETIME (Redis before 7.0,
// KeyDB, or the command renamed away) would fail every acquisition after
// its SET landed. It is refused when connected: it never counts, is sent no
// lock command, and is logged once, however often it is redialled.
func TestUnsupportedBackend(t *testing.T) {
	old := redistest.Start(t, "--rename-command", "PEXPIRETIME", "")
	good := redistest.StartN(t, 2)
	var logged syncBuffer
	cfg := Config{
		Backends:                 []string{old.URL(), good[0].URL(), good[1].URL()},
		DisableRestartQuarantine: true,
		NodeTimeout:              200 * time.Millisecond,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	}
	recordSet(t, cfg, good...)
	e := newEngine(t, cfg)
	// Two supported backends of three still take and release locks.
	for range 3 {
		key := uniqueKey(t)
		if _, err := e.acquire(t.Context(), key, "tok", 10*time.Second); err != nil {
			t.Fatalf("acquire with one unsupported backend of three: %v", err)
		}
		if _, err := e.release(t.Context(), key, "tok"); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	calls := commandCalls(t, old)
	for _, cmd := range []string{"evalsha", "eval", "set", "del", "pexpire"} {
		if calls[cmd] != 0 {
			t.Errorf("the unsupported backend ran %s %d times; want never (all: %v)", cmd, calls[cmd], calls)
		}
	}
	st := e.Backends()[0]
	if st.State != StateUnsupported || st.LastError != KindUnsupported || st.Replies != 0 {
		t.Errorf("unsupported backend: %+v", st)
	}

	// Alone, it answers but cannot decide anything, and the error says why.
	alone := newEngine(t, Config{Backends: []string{old.URL()}, DisableRestartQuarantine: true, NodeTimeout: 200 * time.Millisecond})
	_, err := alone.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second)
	var nq *NoQuorumError
	if !errors.As(err, &nq) || len(nq.Nodes) != 1 || nq.Nodes[0].Kind() != KindUnsupported {
		t.Errorf("acquire on an unsupported backend alone: %v; want no quorum naming it unsupported", err)
	}
	if calls := commandCalls(t, old); calls["evalsha"]+calls["eval"]+calls["set"] != 0 {
		t.Errorf("the unsupported backend ran lock commands: %v", calls)
	}

	// Redialled (once a second) while requests come, and refused each
	// time, but logged once: each greeting asks COMMAND INFO, which nothing
	// else here does.
	redistest.Eventually(t, func() string {
		e.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second)
		if n := commandCalls(t, old)["command|info"]; n < 4 { // alone's, and e's three
			return fmt.Sprintf("greeted %d times so far", n)
		}
		return ""
	})
	if n := strings.Count(logged.String(), "lockproxy needs Redis 7.0 or later"); n != 1 {
		t.Errorf("%d lines say the backend is unsupported, want 1:\n%s", n, logged.String())
	}
	if strings.Contains(logged.String(), "backend unreachable") {
		t.Errorf("the unsupported backend is logged as unreachable:\n%s", logged.String())
	}
}

func TestCheckCommands(t *testing.T) {
	// What COMMAND INFO PEXPIRETIME told (backend's TestCommandsKnown
	// reads these from the replies): nothing when COMMAND is denied.
	known := map[string]bool{"PEXPIRETIME": true}
	unknown := map[string]bool{"PEXPIRETIME": false}
	var denied map[string]bool
	for _, tc := range []struct {
		name    string
		r       map[string]bool
		version string
		ok      bool
	}{
		{"known", known, "7.0.15", true},
		{"renamed away", unknown, "7.0.15", false},
		{"too old", unknown, "6.2.14", false},
		{"COMMAND denied, recent", denied, "7.2.4", true},
		{"COMMAND denied, old", denied, "6.2.14", false},
		{"COMMAND denied, KeyDB", denied, "6.3.4", false},
		{"nothing to go by", denied, "", true},
	} {
		if err := checkCommands(backend.Greeting{Known: tc.r, Version: tc.version}); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestNewRefusesDuplicateBackends: one server listed twice, or under two
// names, would have two votes; New fails and names both.
func TestNewRefusesDuplicateBackends(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	_, port, _ := strings.Cut(srvs[0].Addr(), ":")
	for name, backends := range map[string][]string{
		"listed twice":    {srvs[0].URL(), srvs[1].URL(), srvs[0].URL()},
		"under two names": {"redis://localhost:" + port, srvs[1].URL(), srvs[0].URL()},
	} {
		t.Run(name, func(t *testing.T) {
			e, err := New(Config{Backends: backends, DisableRestartQuarantine: true, NodeTimeout: time.Second,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				e.Close()
				t.Fatal("New accepted one server as two backends")
			}
			first, third := strings.TrimPrefix(backends[0], "redis://"), strings.TrimPrefix(backends[2], "redis://")
			if !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), third) {
				t.Fatalf("the error does not name both backends (%s, %s): %v", first, third, err)
			}
		})
	}
}

// TestDuplicateBackendLater: a backend that cannot be reached when the
// engine starts is checked when it connects; while it reaches the server
// another backend counts already, its votes do not count, and once it
// reaches a server of its own again, they do.
func TestDuplicateBackendLater(t *testing.T) {
	srvs := redistest.StartN(t, 4) // a, its own server, c, and one to move to
	r := newRelay(t, srvs[1].Addr())
	r.down()
	var logged syncBuffer
	e := newEngine(t, Config{
		Backends:                 []string{srvs[0].URL(), r.URL(), srvs[2].URL()},
		DisableRestartQuarantine: true,
		NodeTimeout:              200 * time.Millisecond,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	})
	key := uniqueKey(t)
	a := srvs[0].Client(t)
	if err := a.Set(t.Context(), key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	// Backend 1 now reaches a's server: a's holding must count once.
	r.to(srvs[0].Addr())
	redistest.Eventually(t, func() string {
		e.Probe(t.Context()) // dials, and returns once the greeting is done
		if r.forwarded(srvs[0].Addr()) == 0 {
			return "backend 1 has not reached a's server yet"
		}
		return ""
	})
	if got, err := e.get(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("Get of a key one server holds, reached twice: %q, %v; want no quorum", got, err)
	}
	if ok, err := e.exists(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("Exists: %v, %v; want no quorum", ok, err)
	}
	if st := e.Backends()[1]; st.State != StateDuplicate {
		t.Errorf("backend 1: %+v; want duplicate", st)
	}
	_, err := e.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second)
	var nq *NoQuorumError
	if err != nil && !errors.As(err, &nq) {
		t.Fatalf("acquire: %v", err)
	}
	if st := e.Backends()[1]; st.Failures[KindDuplicate] == 0 {
		t.Errorf("the duplicate is not counted: %+v", st)
	}
	// Down at start, its start-up lines are gathered a while (lateWait).
	redistest.Eventually(t, func() string {
		if !strings.Contains(logged.String(), "same redis-server as another backend") {
			return "the duplicate is not logged:\n" + logged.String()
		}
		return ""
	})
	if n := strings.Count(logged.String(), "same redis-server as another backend"); n != 1 {
		t.Errorf("%d lines report the duplicate, want 1:\n%s", n, logged.String())
	}

	// A server of its own again: it counts.
	r.to(srvs[3].Addr())
	waitAllCount(t, e)
	if got, err := e.get(t.Context(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a key one server of three holds: %q, %v; want not found", got, err)
	}
}

// TestClusterNodeBackend: a Redis Cluster node is refused as a backend,
// with the reason: a failover inside its shard would lose its locks
// unseen. It is sent no lock command and counts toward no quorum.
func TestClusterNodeBackend(t *testing.T) {
	node := redistest.Start(t, "--cluster-enabled", "yes")
	good := redistest.StartN(t, 2)
	var logged syncBuffer
	cfg := Config{
		Backends:                 []string{node.URL(), good[0].URL(), good[1].URL()},
		DisableRestartQuarantine: true,
		NodeTimeout:              time.Second,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	}
	recordSet(t, cfg, good...)
	e := newEngine(t, cfg)
	if _, err := e.acquire(t.Context(), uniqueKey(t), "tok", 10*time.Second); err != nil {
		t.Fatalf("acquire with two standalone backends of three: %v", err)
	}
	if calls := commandCalls(t, node); calls["evalsha"]+calls["eval"]+calls["set"] != 0 {
		t.Errorf("the cluster node ran lock commands: %v", calls)
	}
	if st := e.Backends()[0]; st.State != StateUnsupported || st.Replies != 0 {
		t.Errorf("cluster node backend: %+v", st)
	}
	const want = `level=ERROR msg="backend does not count toward quorum and is sent no lock commands: lockproxy counts independent standalone masters: a failover inside a cluster's shard loses that shard's locks unseen`
	if n := strings.Count(logged.String(), want); n != 1 {
		t.Errorf("%d log lines start with %s:\n%s", n, want, logged.String())
	}
}
