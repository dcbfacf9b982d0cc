package quorum

import (
	"bytes"
	"log/slog"
	"testing"
	"time"
)

// TestStartLogOneLinePerEvent: until flushed, the backends' lines are
// gathered; then each event that several backends logged is one line
// naming them in the order of the configuration, with the attributes they
// logged alike and each one's value of the others; an event of one
// backend is its own line. From then on a line is logged as it comes.
func TestStartLogOneLinePerEvent(t *testing.T) {
	var out bytes.Buffer
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	s := &startLog{next: slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: noTime})}
	log := func(node int) *slog.Logger {
		return slog.New(s.handler(node, []string{"a:1", "b:1", "c:1"}[node]))
	}
	log(2).Info("backend connected", "run_id", "unknown")
	log(0).Info("backend connected", "run_id", "unknown")
	log(1).Warn("backend quarantined", "uptime", 4*time.Second, "counts_in", time.Minute)
	log(0).Warn("backend quarantined", "uptime", 2*time.Second, "counts_in", time.Minute)
	log(1).Info("backend connected", "run_id", "unknown")
	log(1).With("epoch", 2).Error("backend records another set")
	if out.Len() != 0 {
		t.Fatalf("logged before the flush:\n%s", out.String())
	}
	for node := range 3 {
		s.connected(node)
	}
	s.flush(3)
	s.flush(3) // once only
	log(2).Warn("backend quarantined", "uptime", time.Second)
	const want = `level=INFO msg="backend connected" backends=a:1,b:1,c:1 run_id=unknown
level=WARN msg="backend quarantined" backends=a:1,b:1 uptime=2s,4s counts_in=1m0s
level=ERROR msg="backend records another set" backend=b:1 epoch=2
level=WARN msg="backend quarantined" backend=c:1 uptime=1s
`
	if exp, got := want, out.String(); exp != got {
		t.Errorf("want\n%s\ngot\n%s", exp, got)
	}
}

// TestStartLogDebug: at level debug each backend's own line is logged as
// it comes, at debug, besides the event's line at the flush.
func TestStartLogDebug(t *testing.T) {
	var out bytes.Buffer
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	s := &startLog{next: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: noTime})}
	slog.New(s.handler(0, "a:1")).Info("backend connected", "run_id", "x")
	slog.New(s.handler(1, "b:1")).Info("backend connected", "run_id", "y")
	s.flush(0)
	const want = `level=DEBUG msg="backend connected" backend=a:1 run_id=x
level=DEBUG msg="backend connected" backend=b:1 run_id=y
level=INFO msg="backend connected" backends=a:1,b:1 run_id=x,y
`
	if exp, got := want, out.String(); exp != got {
		t.Errorf("want\n%s\ngot\n%s", exp, got)
	}
}

// TestStartLogLate: the lines of the backends that had not connected when
// New flushed are gathered on until all of those have connected, and the
// others' pass at once; Close logs those gathered at once.
func TestStartLogLate(t *testing.T) {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	var out bytes.Buffer
	s := &startLog{next: slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: noTime})}
	log := func(node int) *slog.Logger {
		return slog.New(s.handler(node, []string{"a:1", "b:1", "c:1"}[node]))
	}
	s.connected(0)
	log(1).Warn("backend unreachable", "err", "refused")
	log(2).Warn("backend unreachable", "err", "refused")
	s.flush(3)
	const down = "level=WARN msg=\"backend unreachable\" backends=b:1,c:1 err=refused\n"
	if exp, got := down, out.String(); exp != got {
		t.Fatalf("at the flush: want\n%s\ngot\n%s", exp, got)
	}
	log(2).Warn("backend quarantined", "counts_in", time.Minute)
	log(2).Info("backend connected", "run_id", "z")
	s.connected(2)
	log(0).Warn("backend may evict locks")
	const evicts = "level=WARN msg=\"backend may evict locks\" backend=a:1\n"
	if exp, got := down+evicts, out.String(); exp != got {
		t.Fatalf("before the last late backend connected: want\n%s\ngot\n%s", exp, got)
	}
	log(1).Warn("backend quarantined", "counts_in", time.Minute)
	log(1).Info("backend connected", "run_id", "y")
	s.connected(1)
	const late = `level=WARN msg="backend quarantined" backends=b:1,c:1 counts_in=1m0s
level=INFO msg="backend connected" backends=b:1,c:1 run_id=y,z
`
	if exp, got := down+evicts+late, out.String(); exp != got {
		t.Fatalf("once the late backends connected: want\n%s\ngot\n%s", exp, got)
	}

	out.Reset()
	s = &startLog{next: slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: noTime})}
	s.flush(2)
	slog.New(s.handler(0, "a:1")).Info("backend connected", "run_id", "x")
	s.close()
	if exp, got := "level=INFO msg=\"backend connected\" backend=a:1 run_id=x\n", out.String(); exp != got {
		t.Fatalf("at Close: want\n%s\ngot\n%s", exp, got)
	}
}
