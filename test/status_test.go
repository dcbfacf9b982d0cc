package test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestStatusPage: the binary serves its status page at / on the metrics
// address, with every backend and, from its running sampler, the rate of
// the lock operations it served.
func TestStatusPage(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-metrics", "127.0.0.1:0")
	base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if ok, err := c.proxy.Client(t).SetNX(t.Context(), "status:page", "me", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	redistest.Eventually(t, func() string {
		code, body := get("/")
		if code != http.StatusOK || !strings.Contains(body, `<tr data-op="acquire">`) {
			return "the status page shows no acquisition rate:\n" + body
		}
		for _, s := range c.servers {
			if !strings.Contains(body, `<tr data-backend="`+s.Addr()+`" data-state="up">`) {
				return "the status page does not show backend " + s.Addr() + " up:\n" + body
			}
		}
		return ""
	})
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Fatalf("GET /nope: %d, want 404", code)
	}
}
