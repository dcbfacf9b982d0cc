package test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestClockRate: through the binary, a backend whose clock runs at 1.5
// times real speed is found out within a few seconds and shown as clock in
// INFO backends, /readyz and the metrics, and its votes do not count; one
// at 1.001, inside drift_factor, counts.
func TestClockRate(t *testing.T) {
	proxyTest(t)
	servers := []*redistest.Server{
		redistest.StartWith(t, 1, redistest.Options{ClockRate: 1.5})[0],
		redistest.StartWith(t, 1, redistest.Options{ClockRate: 1.001})[0],
		redistest.Start(t),
	}
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	p := startProxy(t, "-backends", strings.Join(urls, ","), "-restart-quarantine=false",
		"-backend-timeout", "500ms", "-max-ttl", "3s", "-metrics", "127.0.0.1:0")
	base := "http://" + p.waitLog(t, metricsLine)[1]
	started := time.Now()

	// INFO backends: the rate of each, and the fast one out.
	rateOf := func(info string, i int) (string, float64) {
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^backend%d:addr=%s,state=(\w+),.*,clock_rate=([\d.]*),`,
			i, regexp.QuoteMeta(servers[i].Addr()))).FindStringSubmatch(info)
		if m == nil {
			t.Fatalf("INFO backends has no line for backend %d:\n%s", i, info)
		}
		rate, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			rate = math.NaN() // not measured yet
		}
		return m[1], rate
	}
	var info string
	redistest.Eventually(t, func() string {
		info = redisCLI(t, p.Addr, "INFO", "backends")
		state0, rate0 := rateOf(info, 0)
		state1, rate1 := rateOf(info, 1)
		if state0 != "clock" || math.Abs(rate0-1.5) > 0.02 || state1 != "up" || math.Abs(rate1-1.001) > 0.002 {
			return "INFO backends:\n" + info
		}
		return ""
	})
	if took := time.Since(started); took > 5*time.Second {
		t.Errorf("the fast backend found out after %s", took)
	}
	if !strings.Contains(info, "backends_up:2") || !strings.Contains(info, "backends_clock:1") {
		t.Errorf("INFO backends counts:\n%s", info)
	}

	// /readyz: ready, on the two that count.
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Counting int
		Backends []struct {
			State     string
			Error     string
			ClockRate float64 `json:"clock_rate"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || ready.Counting != 2 {
		t.Fatalf("/readyz: %d %+v %v", resp.StatusCode, ready, err)
	}
	if b := ready.Backends[0]; b.State != "clock" || b.Error != "clock" || math.Abs(b.ClockRate-1.5) > 0.02 {
		t.Errorf("/readyz, the fast backend: %+v", b)
	}

	// Locks: the two that count make a quorum, the fast one alone with the
	// slightly fast one does not.
	rdb := p.Client(t)
	if ok, err := rdb.SetNX(t.Context(), "c1", "me", 2*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	servers[2].Kill()
	err = rdb.SetNX(t.Context(), "c2", "me", 2*time.Second).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") || !regexp.MustCompile(`clock rate 1\.(4[89]|5[01])`).MatchString(err.Error()) {
		t.Fatalf("SET NX with the normal backend down: expected NOQUORUM naming the clock rate, got %v", err)
	}

	m := scrape(t, base)
	if got := m[fmt.Sprintf(`lockproxy_backend_clock_rate{backend=%q}`, servers[0].Addr())]; math.Abs(got-1.5) > 0.02 {
		t.Errorf("lockproxy_backend_clock_rate of the fast backend: %v", got)
	}
	if got := m[fmt.Sprintf(`lockproxy_backend_clock_rate{backend=%q}`, servers[1].Addr())]; math.Abs(got-1.001) > 0.005 {
		t.Errorf("lockproxy_backend_clock_rate of the slightly fast backend: %v", got)
	}
	if got := m[fmt.Sprintf(`lockproxy_backend_failures_total{backend=%q,kind="clock"}`, servers[0].Addr())]; got < 2 {
		t.Errorf("clock failures of the fast backend: %v, expected one per SET NX", got)
	}
	if n := strings.Count(p.Log(), "clock runs at a rate outside"); n != 1 {
		t.Errorf("logged %d times that a clock is off, expected once:\n%s", n, p.Log())
	}
}
