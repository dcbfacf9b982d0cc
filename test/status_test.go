package test

import (
	"io"
	"net/http"
	"regexp"
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

// TestStatusPageColdStart: the binary's status page on a cold start over
// fresh backends that hold a lock no proxy recorded says that the wait is
// a start's and when it ends, and lists the lock as undecided.
func TestStatusPageColdStart(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	for _, s := range servers {
		if err := s.Client(t).Set(t.Context(), "orders:1", "worker-7", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p := startProxy(t, "-backends", list, "-backend-timeout", "500ms", "-max-ttl", "60s", "-metrics", "127.0.0.1:0")
	base := "http://" + p.waitLog(t, metricsLine)[1]
	note := regexp.MustCompile(`Expected after a start: backends wait until the locks they may have held expire; quorum in \d+ s \(at \d\d:\d\d:\d\d UTC\)\. Run <code>lockproxy init</code> on fresh backends to skip this\.`)
	redistest.Eventually(t, func() string {
		resp, err := http.Get(base + "/")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		switch {
		case !note.MatchString(body):
			return "the status page has no start-up note:\n" + body
		case !strings.Contains(body, `1 lock undecided: no quorum answers`) || !strings.Contains(body, `<tr data-undecided="orders:1">`):
			return "the status page does not show orders:1 undecided:\n" + body
		case strings.Contains(body, "No locks held"):
			return "the status page says no locks are held:\n" + body
		}
		return ""
	})
}
