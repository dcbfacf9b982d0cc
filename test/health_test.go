package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var metricsLine = regexp.MustCompile(`msg="metrics and health listening" addr=(\S+)`)

// TestHealthEndpoints: /healthz answers while the process runs; /readyz
// flips to 503 when a majority of backends is down and names each state.
func TestHealthEndpoints(t *testing.T) {
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
