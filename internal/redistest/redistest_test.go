package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !s.Running() {
		t.Fatal("Running() = false right after Start")
	}
	host, _, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := "127.0.0.1", host; exp != got {
		t.Errorf("host: expected %q, got %q", exp, got)
	}
	if exp, got := "redis://"+s.Addr(), s.URL(); exp != got {
		t.Errorf("URL: expected %q, got %q", exp, got)
	}

	c := s.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	// A Restart must lose every key, which holds only without persistence.
	for key, exp := range map[string]string{"save": "", "appendonly": "no"} {
		cfg, err := c.ConfigGet(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg[key]; exp != got {
			t.Errorf("CONFIG GET %s: expected %q, got %q", key, exp, got)
		}
	}
}

func TestStartOptions(t *testing.T) {
	t.Parallel()
	c := Start(t, "--maxmemory", "1mb").Client(t)
	cfg, err := c.ConfigGet(t.Context(), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := "1048576", cfg["maxmemory"]; exp != got {
		t.Errorf("maxmemory: expected %q, got %q", exp, got)
	}
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3)
	if exp, got := 3, len(servers); exp != got {
		t.Fatalf("expected %d servers, got %d", exp, got)
	}
	if err := servers[0].Client(t).Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("server %d shares address %s", i, s.Addr())
		}
		seen[s.Addr()] = true
		got, err := s.Client(t).Exists(t.Context(), "k").Result()
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		if exp := map[bool]int64{true: 1, false: 0}[i == 0]; exp != got {
			t.Errorf("server %d: EXISTS k: expected %d, got %d", i, exp, got)
		}
	}
}

func TestRestartLosesData(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	c := s.Client(t)
	if err := c.Set(t.Context(), "lock", "token", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := runID(t, c)

	s.Restart()
	if !s.Running() {
		t.Fatal("Running() = false after Restart")
	}
	if exp, got := addr, s.Addr(); exp != got {
		t.Errorf("Addr after Restart: expected %s, got %s", exp, got)
	}
	// The client from before the restart must work on its first try: its
	// pooled connection died with the old process.
	if err := c.Get(t.Context(), "lock").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET lock after Restart: expected redis.Nil, got %v", err)
	}
	if after := runID(t, c); before == after {
		t.Errorf("run_id %s unchanged: Restart did not start a new process", after)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING before Kill: %v", err)
	}

	s.Kill()
	if s.Running() {
		t.Error("Running() = true after Kill")
	}
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Error("PING after Kill succeeded")
	}
	s.Kill() // a second Kill is a no-op, not a hang

	s.Restart()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after Kill and Restart: %v", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}

	s.Pause()
	if !s.Running() {
		t.Error("Running() = false while paused")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING to a paused server succeeded")
	}

	s.Resume()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}
}

func TestRestartPaused(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause()
	s.Restart()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Pause and Restart: %v", err)
	}
}

// TestLaunchOnTakenPortFails covers the race Start retries around: another
// redis-server holds the port, answers PING at once, and ours is exiting.
func TestLaunchOnTakenPortFails(t *testing.T) {
	t.Parallel()
	taken := Start(t)
	s := &Server{t: t, bin: taken.bin, dir: t.TempDir()}
	if p, err := s.launch(taken.port); err == nil {
		p.kill()
		t.Fatal("launch on a port another redis-server holds reported ready")
	}
}

func TestCleanupKills(t *testing.T) {
	var s *Server
	t.Run("paused", func(t *testing.T) {
		s = Start(t)
		s.Pause() // cleanup must kill a stopped process too
	})
	if s.Running() {
		t.Error("Running() = true after the test ended")
	}
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the test ended", s.Addr())
	}
	s.Restart() // must not start an orphan
	if s.Running() {
		t.Error("Restart after the test ended started a process")
	}
}

func TestMissingRedisServerFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	msg := fatalMessage(t, func(tb testing.TB) { Start(tb) })
	if !strings.Contains(msg, installHint) {
		t.Errorf("message %q does not say %q", msg, installHint)
	}
}

func TestBadOptionFails(t *testing.T) {
	t.Parallel()
	msg := fatalMessage(t, func(tb testing.TB) { Start(tb, "--no-such-directive", "1") })
	// The message carries redis-server's own explanation from its log.
	if !strings.Contains(msg, "no-such-directive") {
		t.Errorf("message does not show redis-server's complaint:\n%s", msg)
	}
}

// fatalMessage runs f with a TB whose Fatalf records its message and ends
// f's goroutine, as the real one would, and returns the message. It fails
// t if f does not call Fatalf.
func fatalMessage(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	if tb.msg == "" {
		t.Fatal("Fatalf was not called")
	}
	return tb.msg
}

// fatalTB intercepts Fatalf; everything else, such as TempDir and Cleanup,
// goes to the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (tb *fatalTB) Fatalf(format string, args ...any) {
	tb.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if id, ok := strings.CutPrefix(line, "run_id:"); ok {
			return id
		}
	}
	t.Fatalf("no run_id in INFO server:\n%s", info)
	return ""
}

// TestClockRate: a server started with ClockRate 1.5 tells the time (TIME,
// which key expiry reads too) at 1.5 times real speed, until SetClockRate
// and Restart put it back on the real clock; it is the process that Kill
// ends.
func TestClockRate(t *testing.T) {
	t.Parallel()
	s := StartWith(t, 1, Options{ClockRate: 1.5})[0]
	c := s.Client(t)
	rate := func() float64 {
		t.Helper()
		serverTime := func() (time.Time, time.Time) {
			before := time.Now()
			at, err := c.Time(t.Context()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return at, before
		}
		at0, t0 := serverTime()
		time.Sleep(500 * time.Millisecond) // the span measured, not synchronisation
		at1, t1 := serverTime()
		// Each reading is off by at most its round trip, well under 10 ms here.
		return at1.Sub(at0).Seconds() / t1.Sub(t0).Seconds()
	}
	if r := rate(); r < 1.4 || r > 1.6 {
		t.Errorf("clock rate %.3f, expected 1.5", r)
	}
	s.SetClockRate(0)
	s.Restart()
	if r := rate(); r < 0.9 || r > 1.1 {
		t.Errorf("clock rate %.3f after SetClockRate(0) and Restart, expected 1", r)
	}
	s.Kill()
	if s.Running() {
		t.Error("Running() = true after Kill")
	}
}
