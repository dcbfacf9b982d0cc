package test

import (
	"bufio"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// scrape GETs /metrics and returns each lockproxy series (name{labels} as
// exposed) with its value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "lockproxy_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsEndpoint: after a lock cycle /metrics shows it, and each
// backend's up gauge follows the backend.
func TestMetricsEndpoint(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-metrics", "127.0.0.1:0")
	base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
	rdb := c.proxy.Client(t)
	ctx := t.Context()
	if ok, err := rdb.SetNX(ctx, "m", "me", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if ok, err := rdb.SetNX(ctx, "m", "you", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX of a held lock: %v %v", ok, err)
	}
	if n, err := rdb.Eval(ctx, compareAndDelete, []string{"m"}, "me").Int(); n != 1 || err != nil {
		t.Fatalf("release: %v %v", n, err)
	}

	m := scrape(t, base)
	up := func(i int) string { return fmt.Sprintf(`lockproxy_backend_up{backend="%s"}`, c.servers[i].Addr()) }
	for series, want := range map[string]float64{
		`lockproxy_operations_total{operation="acquire",outcome="acquired"}`:       1,
		`lockproxy_operations_total{operation="acquire",outcome="held_elsewhere"}`: 1,
		`lockproxy_operations_total{operation="release",outcome="ok"}`:             1,
		`lockproxy_operations_total{operation="release",outcome="not_held"}`:       0,
		`lockproxy_operation_duration_seconds_count{operation="acquire"}`:          2,
		`lockproxy_connected_clients`:                                              1,
		`lockproxy_quorum_size`:                                                    2,
		up(0):                                                                      1,
		up(1):                                                                      1,
		up(2):                                                                      1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s: want %v, got %v (present: %v)", series, want, got, ok)
		}
	}
	// Polled: the replies came on a quorum of votes, and backend 0's may be
	// the one counted after them.
	votes := fmt.Sprintf(`lockproxy_backend_vote_duration_seconds_count{backend="%s"}`, c.servers[0].Addr())
	redistest.Eventually(t, func() string {
		if got := scrape(t, base)[votes]; got < 1 {
			return fmt.Sprintf("no vote latency observed for backend 0: %v", got)
		}
		return ""
	})

	c.servers[0].Kill()
	// Polled, not read once: the proxy answers on a quorum of votes, so the
	// killed backend's failed vote may be counted after the reply.
	redistest.Eventually(t, func() string {
		rdb.SetNX(ctx, "m2", "me", time.Second) // makes the proxy notice, if it has not yet
		m = scrape(t, base)
		if m[up(0)] != 0 || m[up(1)] != 1 {
			return fmt.Sprintf("after killing backend 0: %s %v, %s %v", up(0), m[up(0)], up(1), m[up(1)])
		}
		failures := 0.0
		for series, v := range m {
			if strings.HasPrefix(series, fmt.Sprintf(`lockproxy_backend_failures_total{backend="%s"`, c.servers[0].Addr())) {
				failures += v
			}
		}
		if failures == 0 {
			return "no failure counted for the killed backend"
		}
		return ""
	})
}

// TestInfoBackendsRedisCLI: redis-cli INFO backends shows every backend's
// state, and a killed one as down.
func TestInfoBackendsRedisCLI(t *testing.T) {
	proxyTest(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli: %v", err)
	}
	c := newCluster(t, 3)
	line := func(i int, state string) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^backend%d:addr=%s,state=%s,latency_ms=[\d.]+,last_error=[a-z_]*,`,
			i, regexp.QuoteMeta(c.servers[i].Addr()), state))
	}
	// A first lock command dials the backends.
	redisCLI(t, c.proxy.Addr, "SET", "i", "me", "NX", "PX", "10000")
	info := redisCLI(t, c.proxy.Addr, "INFO", "backends")
	for _, want := range []string{"# Backends", "backends:3", "quorum:2", "backends_up:3", "backends_down:0"} {
		if !strings.Contains(info, want+"\r\n") && !strings.Contains(info, want+"\n") {
			t.Errorf("INFO backends lacks %q:\n%s", want, info)
		}
	}
	for i := range c.servers {
		if !line(i, "up").MatchString(info) {
			t.Errorf("INFO backends: backend%d is not up:\n%s", i, info)
		}
	}

	c.servers[1].Kill()
	redistest.Eventually(t, func() string {
		redisCLI(t, c.proxy.Addr, "SET", "i2", "me", "NX", "PX", "10000") // makes the proxy notice
		info = redisCLI(t, c.proxy.Addr, "INFO", "backends")
		if !line(1, "down").MatchString(info) || !strings.Contains(info, "backends_down:1") || !line(0, "up").MatchString(info) {
			return "after killing backend 1, INFO backends:\n" + info
		}
		return ""
	})
	if !regexp.MustCompile(`backend1:.*last_error=connection_(refused|closed),`).MatchString(info) {
		t.Errorf("the killed backend's last error: %s", info)
	}
	stats := redisCLI(t, c.proxy.Addr, "INFO", "stats")
	if !strings.Contains(stats, "lock_acquired:2") || !strings.Contains(stats, "total_commands_processed:") {
		t.Errorf("INFO stats:\n%s", stats)
	}
}
