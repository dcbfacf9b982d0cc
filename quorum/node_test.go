package quorum

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestParseServerInfo(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n"
	runID, uptime, err := parseServerInfo(info)
	if err != nil || runID != "abc123" || uptime != 42*time.Second {
		t.Fatalf("got %q, %s, %v", runID, uptime, err)
	}
	for _, bad := range []string{"", "run_id:x\r\n", "uptime_in_seconds:1\r\n", "run_id:x\r\nuptime_in_seconds:soon\r\n"} {
		if _, _, err := parseServerInfo(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

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
// forgotten locks, so they count only once up for max_ttl.
func TestQuarantineColdStart(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: shortMaxTTL})
	_, err := c.engine.Acquire(t.Context(), uniqueKey(t), "me", time.Second)
	var nq *NoQuorumError
	if !errors.As(err, &nq) {
		t.Fatalf("expected *NoQuorumError while every backend is quarantined, got %v", err)
	}
	if !strings.Contains(nq.Error(), "quarantined") {
		t.Errorf("error does not say why: %v", nq)
	}
	start := time.Now()
	waitAllCount(t, c.engine)
	if waited := time.Since(start); waited > shortMaxTTL+time.Second {
		t.Errorf("backends counted only after %s; max_ttl is %s", waited, shortMaxTTL)
	}
	if _, err := c.engine.Acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Fatalf("Acquire after quarantine: %v", err)
	}
}

// TestQuarantineRestartHazard reproduces the Redlock restart hazard: a lock
// held on backends 0 and 1 of 3; backend 1 restarts empty. Without
// quarantine a second token takes the lock on 1 and 2 while the first still
// holds it. With quarantine it must not, even for an engine (a proxy) started
// after the restart, until backend 1 has been up for max_ttl.
func TestQuarantineRestartHazard(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: shortMaxTTL})
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
		if exp, got := "noquorum", outcome(second(e.Acquire(t.Context(), key, "second", time.Second))); exp != got {
			t.Fatalf("%s: expected %s, got %s", name, exp, got)
		}
	}

	unsafe := cfg
	unsafe.DisableRestartQuarantine = true
	if exp, got := "ok", outcome(second(newEngine(t, unsafe).Acquire(t.Context(), key, "second", time.Second))); exp != got {
		t.Fatalf("without quarantine: expected the hazard (%s), got %s", exp, got)
	}
}

// TestQuarantineEnds: a restarted backend counts again after max_ttl.
func TestQuarantineEnds(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: shortMaxTTL})
	waitAllCount(t, c.engine)
	c.servers[0].Kill()
	c.servers[1].Restart()
	if exp, got := "noquorum", outcome(second(c.engine.Acquire(t.Context(), uniqueKey(t), "me", time.Second))); exp != got {
		t.Fatalf("right after the restart: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		if got := outcome(second(c.engine.Acquire(t.Context(), uniqueKey(t), "me", time.Second))); got != "ok" {
			return "still " + got + " after the quarantine should have ended"
		}
		return ""
	})
}
