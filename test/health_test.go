package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

var metricsLine = regexp.MustCompile(`msg="metrics and health listening" addr=(\S+)`)

// TestHealthEndpoints: /healthz answers while the process runs; /readyz
// flips to 503 when a majority of backends is down and names each state.
func TestHealthEndpoints(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-metrics", "127.0.0.1:0")
	base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
	get := func(path string) (int, map[string]any, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		return resp.StatusCode, body, fmt.Sprint(body)
	}

	if code, _, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _, text := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with every backend up: %d %s", code, text)
	}
	if code, _, _ := get("/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	if code, _, _ := get("/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without -pprof: %d, want 404", code)
	}

	c.servers[0].Kill()
	c.servers[1].Kill()
	code, body, text := get("/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with 2 of 3 backends down: %d %s", code, text)
	}
	states := map[string]int{}
	for _, b := range body["backends"].([]any) {
		states[b.(map[string]any)["state"].(string)]++
	}
	if states["down"] != 2 || states["up"] != 1 {
		t.Fatalf("/readyz backend states: %v", text)
	}
	if code, _, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with backends down: %d", code)
	}
}

// TestPprofEndpoint: -pprof serves Go's profiles next to /metrics.
func TestPprofEndpoint(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-metrics", "127.0.0.1:0", "-pprof")
	base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
	resp, err := http.Get(base + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("/debug/pprof/goroutine: %d %.200s", resp.StatusCode, body)
	}
}

// TestBackendMistakesShown: through the binary, a backend address where an
// HTTP server answers and a backend whose password is wrong are each told
// in their own words in the log, /readyz, the failure metric and INFO,
// not as "bad reply type 'H'" or "unreachable".
func TestBackendMistakesShown(t *testing.T) {
	proxyTest(t)
	// Two mistakes made after the deployment's set was recorded (a first
	// start records nothing until every backend answers): a backend's
	// password changed but not its URL, and another service took a
	// backend's port.
	servers := redistest.StartN(t, 5)
	webAddr, authAddr := servers[3].Addr(), servers[4].Addr()
	if err := servers[4].Client(t).ConfigSet(t.Context(), "requirepass", "guess").Err(); err != nil {
		t.Fatal(err)
	}
	list := strings.Join([]string{servers[0].URL(), servers[1].URL(), servers[2].URL(), "redis://" + webAddr, "redis://:guess@" + authAddr}, ",")
	first := startProxy(t, "-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms")
	waitForQuorum(t, first)
	first.Kill()
	guarded := redis.NewClient(&redis.Options{Addr: authAddr, Password: "guess"})
	defer guarded.Close()
	if err := guarded.ConfigSet(t.Context(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	servers[3].Kill()
	ln, err := net.Listen("tcp", webAddr)
	if err != nil {
		t.Fatal(err)
	}
	web := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.NotFoundHandler()}}
	web.Start()
	t.Cleanup(web.Close)
	p := startProxy(t, "-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms", "-metrics", "127.0.0.1:0")
	base := "http://" + p.waitLog(t, metricsLine)[1]

	notRedis := `backend ` + webAddr + ` did not answer as Redis (its first bytes: "HTTP/1.1 400 Bad Request"): is this a Redis port?`
	auth := `authentication failed on backend ` + authAddr + ` as user "default" (its URL names no user): check the password in its URL (WRONGPASS invalid username-password pair or user is disabled.)`
	if got := do(t, p.Client(t), "SET", "k", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("SET on the three good backends: %q", got)
	}
	for _, line := range []string{notRedis, auth} {
		want := fmt.Sprintf("level=ERROR msg=%q", line+"; it does not count toward quorum until this is fixed")
		if n := strings.Count(p.Log(), want); n != 1 {
			t.Errorf("%d log lines start with\n%s", n, want)
		}
	}
	if strings.Contains(p.Log(), "bad reply type") {
		t.Errorf("the log speaks of the reply parser")
	}

	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Backends []struct{ Addr, State, Error, Detail string }
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(ready.Backends) != 5 {
		t.Fatalf("/readyz: %d %+v %v", resp.StatusCode, ready, err)
	}
	for i, exp := range []struct{ kind, detail string }{3: {"not_redis", notRedis}, 4: {"auth", auth}} {
		if b := ready.Backends[i]; i >= 3 && (b.State != "down" || b.Error != exp.kind || b.Detail != exp.detail) {
			t.Errorf("/readyz backend %d: %+v; want down, %s, %q", i, b, exp.kind, exp.detail)
		}
	}

	m := scrape(t, base)
	for addr, kind := range map[string]string{webAddr: "not_redis", authAddr: "auth"} {
		if got := m[fmt.Sprintf(`lockproxy_backend_failures_total{backend=%q,kind=%q}`, addr, kind)]; got < 1 {
			t.Errorf("lockproxy_backend_failures_total of %s, kind %s: %v", addr, kind, got)
		}
	}
	info := redisCLI(t, p.Addr, "INFO", "backends")
	for i, kind := range []string{3: "not_redis", 4: "auth"} {
		if i >= 3 && !regexp.MustCompile(fmt.Sprintf(`(?m)^backend%d:addr=[^,]+,state=down,[^\r\n]*last_error=%s,`, i, kind)).MatchString(info) {
			t.Errorf("INFO backends does not show backend %d down with last_error=%s:\n%s", i, kind, info)
		}
	}
}
