package proxy

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// realRig is a proxy over an engine of five real redis-servers, with raw
// connections to each backend.
type realRig struct {
	engine   *quorum.Engine
	proxy    *respConn
	addr     string
	backends []*respConn
}

func startRealRig(t *testing.T, fencing bool) *realRig {
	return startRealRigWith(t, fencing, Config{})
}

// startRealRigWith is startRealRig with the proxy's cfg.
func startRealRigWith(t *testing.T, fencing bool, cfg Config) *realRig {
	t.Helper()
	servers := redistest.StartN(t, 5)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	addr, engine := serveEngine(t, quorum.Config{
		Backends: urls, NodeTimeout: 500 * time.Millisecond, MaxTTL: time.Minute, Fencing: fencing,
		DisableRestartQuarantine: true, // fresh servers: nothing to forget
	}, cfg)
	r := &realRig{engine: engine, proxy: dialRESP(t, addr), addr: addr}
	for _, s := range servers {
		r.backends = append(r.backends, dialRESP(t, s.Addr()))
	}
	return r
}

// serveEngine serves a proxy with cfg over an engine of qcfg, both quiet
// and both ended with t, and returns the proxy's address and the engine.
func serveEngine(t testing.TB, qcfg quorum.Config, cfg Config) (string, *quorum.Engine) {
	t.Helper()
	qcfg.Logger = slog.New(slog.DiscardHandler)
	engine, err := quorum.New(qcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	groups, err := shard.New([]*quorum.Engine{engine})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Backends, cfg.Watcher, cfg.Lister = groups, groups, groups
	srv, err := New(groups, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv), engine
}

func (r *realRig) must(t *testing.T, c *respConn, args ...string) string {
	t.Helper()
	reply, err := c.do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return reply
}

// pttl is key's PTTL on each backend.
func (r *realRig) pttl(t *testing.T, key string) []int64 {
	t.Helper()
	var out []int64
	for _, b := range r.backends {
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(r.must(t, b, "PTTL", key), ":"), "\r\n"), 10, 64)
		out = append(out, n)
	}
	return out
}

// TestLockEndingCommandsStopTopUps: a lock granted by three backends of
// five, while a contender held the other two, starts a top-up that copies
// it there once the contender rolls back. Every command that can end or
// shorten the lock, sent after the grant and before the rollback, stops
// that top-up: no backend holds the key afterwards beyond what the command
// left. (A PEXPIRE built without its key once slipped past the key's send
// order, and the top-up wrote a copy with half a minute left.)
func TestLockEndingCommandsStopTopUps(t *testing.T) {
	const (
		release = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
		extend  = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`
	)
	watched := func(last ...string) [][]string {
		return [][]string{{"WATCH", "K"}, {"GET", "K"}, {"MULTI"}, last, {"EXEC"}}
	}
	cases := []struct {
		name    string
		fencing bool
		cmds    [][]string
		left    int64 // the most any backend may hold the key for after it, in ms; -2: nowhere
	}{
		{"PEXPIRE", false, [][]string{{"PEXPIRE", "K", "100"}}, 100},
		{"PEXPIRE fenced", true, [][]string{{"PEXPIRE", "K", "100"}}, 100},
		{"EXPIRE", false, [][]string{{"EXPIRE", "K", "1"}}, 1000},
		{"DEL", false, [][]string{{"DEL", "K"}}, -2},
		{"UNLINK", false, [][]string{{"UNLINK", "K"}}, -2},
		{"DELEX IFEQ", false, [][]string{{"DELEX", "K", "IFEQ", "me"}}, -2},
		{"DELIFEQ", false, [][]string{{"DELIFEQ", "K", "me"}}, -2},
		{"SET IFEQ", false, [][]string{{"SET", "K", "me", "IFEQ", "me", "PX", "100"}}, 100},
		{"release script", false, [][]string{{"EVAL", release, "1", "K", "me"}}, -2},
		{"extend script", false, [][]string{{"EVAL", extend, "1", "K", "me", "100"}}, 100},
		{"EXEC DEL", false, watched("DEL", "K"), -2},
		{"EXEC PEXPIRE", false, watched("PEXPIRE", "K", "100"), 100},
		{"EXEC SET XX", false, watched("SET", "K", "me", "XX", "PX", "100"), 100},
	}
	rigs := map[bool]*realRig{false: startRealRig(t, false), true: startRealRig(t, true)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rigs[c.fencing]
			// A try is conclusive only when the top-up was still running
			// once the contender had rolled back: on a slow machine its
			// rounds may all be over by then, and it could copy nothing
			// whatever the command did.
			for try := 0; ; try++ {
				if try == 5 {
					t.Fatal("the top-up was over before the contender rolled back, five times")
				}
				key := "topup:" + strings.ReplaceAll(t.Name(), " ", "_") + ":" + strconv.Itoa(try)
				before := r.engine.TopUps()
				for _, b := range r.backends[3:] {
					r.must(t, b, "SET", key, "other", "PX", "60000")
				}
				if got := r.must(t, r.proxy, "SET", key, "me", "NX", "PX", "30000"); got != "+OK\r\n" {
					t.Fatalf("SET NX: %q", got)
				}
				for _, cmd := range c.cmds {
					args := append([]string(nil), cmd...)
					for i, a := range args {
						if a == "K" {
							args[i] = key
						}
					}
					if got := r.must(t, r.proxy, args...); strings.HasPrefix(got, "-") {
						t.Fatalf("%q: %q", args, got)
					}
				}
				for _, b := range r.backends[3:] {
					r.must(t, b, "DEL", key)
				}
				running := r.engine.TopUps().Running > 0
				redistest.Eventually(t, func() string {
					if u := r.engine.TopUps(); u.Started == before.Started || u.Running > 0 {
						return "the top-up has not started and ended"
					}
					return ""
				})
				if !running {
					continue
				}
				for i, left := range r.pttl(t, key) {
					if left > c.left || c.left == -2 && left != -2 {
						t.Errorf("backend %d holds the key for %d ms more after %s; want at most %d", i, left, c.name, c.left)
					}
				}
				// A renewal tops itself up, with what it left: copies then
				// are its own, bounded above.
				if copies := r.engine.TopUps().Copies - before.Copies; c.left == -2 && copies != 0 {
					t.Errorf("%d copies made after %s", copies, c.name)
				}
				return
			}
		})
	}
}
