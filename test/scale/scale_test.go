//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestScaleSmall runs the whole command with figures small enough for CI:
// the point is that every part works end to end, not the numbers.
func TestScaleSmall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	for _, tool := range []string{"ip", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not in PATH", tool)
		}
	}
	// run removes its namespaces itself; this covers a panic or a failure
	// half-way through setting them up.
	t.Cleanup(func() {
		if err := removeStale(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// The build has no deadline of its own: on a clean CI clone it compiles
	// the whole module without -race, which took over 35 s on a loaded
	// machine. The deadline is for the run, whose every step must end.
	bin, err := buildProxy(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	const locks, conns = 2000, 200
	var out bytes.Buffer
	res, err := run(ctx, []string{"-proxy-bin", bin, "-locks", "2000", "-conns", "200", "-group-counts", "1,2",
		"-rounds", "1", "-duration", "1s", "-workers", "16", "-json", t.TempDir() + "/scale.json"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"== Held locks", "== Connections", "== Throughput", "cycles/s"} {
		if !strings.Contains(out.String(), title) {
			t.Errorf("output lacks %q", title)
		}
	}

	h := res.Held
	if h == nil || h.Locks != locks || h.Groups != 3 {
		t.Fatalf("held locks: %+v", h)
	}
	keysByIndex := map[int]int64{}
	for _, b := range h.Backends {
		keysByIndex[b.Index] += b.Keys
		if b.Keys > 0 && (b.BytesPerLock <= 0 || b.BytesPerLock > 10_000) {
			t.Errorf("backend %s: %.0f bytes per lock", b.Addr, b.BytesPerLock)
		}
	}
	for i := range backendsPerGrp {
		if keysByIndex[i] != locks {
			t.Errorf("backend %d of each group: %d keys in all, want %d", i, keysByIndex[i], locks)
		}
	}
	if h.ProxyRSSAfter <= 0 || h.ProxyRSSBefore <= 0 {
		t.Errorf("proxy RSS not read: %+v", h)
	}

	c := res.Conns
	if c == nil || c.Conns != conns || !c.ServingAfterClose || c.ProxyRSSHeld <= 0 {
		t.Fatalf("connections: %+v", c)
	}
	if c.GoroutinesPerConn != nil && *c.GoroutinesPerConn < 0.5 {
		t.Errorf("%.2f goroutines per connection: the connections were not all open", *c.GoroutinesPerConn)
	}

	if len(res.Throughput) != 2 {
		t.Fatalf("throughput: %d group counts, want 2", len(res.Throughput))
	}
	for i, tr := range res.Throughput {
		m := tr.Median
		if tr.Groups != i+1 || tr.Backends != 3*(i+1) || m.Cycles <= 0 || m.CyclesPerSecond <= 0 {
			t.Errorf("throughput with %d groups: %+v", tr.Groups, m)
		}
		if m.ProxyUS <= 0 || m.BackendUS <= 0 || m.ClientUS <= 0 || m.MachineBusyPct <= 0 || m.MachineBusyPct > 100 {
			t.Errorf("CPU figures with %d groups: %+v", tr.Groups, m)
		}
		if m.Errors > m.Cycles/100 {
			t.Errorf("%d errors in %d cycles; first: %s", m.Errors, m.Cycles, m.FirstError)
		}
	}
}
