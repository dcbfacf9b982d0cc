package test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestPortInUseFailsAtOnce: a listen address already taken stops the start
// before any backend is dialled, in one line and at once, though each
// backend would hold the start for its timeout: they accept and never
// answer, and none of them is connected to.
func TestPortInUseFailsAtOnce(t *testing.T) {
	proxyTest(t)
	if runtime.GOOS != "linux" {
		t.Skip("the wording of a port in use is the system's")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var dialled atomic.Int32
	var urls []string
	for range 3 {
		addr := redistest.Serve(t, func(c net.Conn) {
			dialled.Add(1)
			t.Cleanup(func() { c.Close() })
		})
		urls = append(urls, "redis://"+addr)
	}
	start := time.Now()
	stdout, stderr, code := runExit(t, "-listen", taken.Addr().String(), "-backends", strings.Join(urls, ","), "-backend-timeout", "5s")
	took := time.Since(start)
	want := "lockproxy: listen: listen tcp " + taken.Addr().String() + ": bind: address already in use\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, want 1 and stderr\n%q\ngot stdout %q and stderr\n%q", code, want, stdout, stderr)
	}
	// Dialling first took a backend timeout (5 s) or more.
	if took > 2*time.Second {
		t.Errorf("the start took %v to fail", took)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("%d backend connections before the listener failed", n)
	}
}

// TestUnknownKeyAtStart: a misspelt key of the file stops the start with
// the key probably meant, in one line.
func TestUnknownKeyAtStart(t *testing.T) {
	proxyTest(t)
	conf := writeFile(t, "lockproxy.toml", "backends = [\"redis://127.0.0.1:1\"]\nrestart_quarantime = false\n")
	stdout, stderr, code := runExit(t, "-config", conf)
	want := "lockproxy: " + conf + ": unknown key \"restart_quarantime\"; did you mean restart_quarantine?\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, want 1 and stderr\n%q\ngot stdout %q and stderr\n%q", code, want, stdout, stderr)
	}
}

// TestWarningsAtStart: the configuration's warnings are logged once each
// at start, before the backends' lines.
func TestWarningsAtStart(t *testing.T) {
	proxyTest(t)
	s := redistest.Start(t)
	p := startProxy(t, "-backends", s.URL(), "-restart-quarantine=false")
	for _, w := range []string{
		"backends: only one: every lock is on that one Redis and lost with it, with no fault tolerance; list 3 or 5 independent Redis masters",
		"restart_quarantine: off: a backend that restarted without its locks (without appendfsync always) counts toward quorum at once, and a lock it forgot may be granted twice; turn it on unless every backend runs with appendfsync always",
	} {
		line := fmt.Sprintf("level=WARN msg=%q\n", w)
		if n := strings.Count(p.Log(), line); n != 1 {
			t.Errorf("%d lines end with %q in\n%s", n, line, p.Log())
		}
		if i, j := strings.Index(p.Log(), line), strings.Index(p.Log(), "backend connected"); i > j {
			t.Errorf("%q is logged after the backend connected:\n%s", w, p.Log())
		}
	}
}
