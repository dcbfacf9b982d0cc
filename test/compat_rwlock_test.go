package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's RReadWriteLock (compat.RedissonRWLocks), run by
// TestRedissonProgramsOnRedis and TestRedissonThroughProxies beside RLock.

// The read-write suite's sizes: two clients of redissonRWThreads threads
// each take a read or a write lock redissonRWRounds times, then a write
// waiter is woken redissonRWWakeRounds times, then the watchdog keeps a read
// and a write hold for three of its leases.
const (
	redissonRWRounds     = 8
	redissonRWThreads    = 4
	redissonRWWakeRounds = 5
	redissonRWLeaseMs    = 3000
	redissonRWHoldMs     = 3 * redissonRWLeaseMs
)

// redissonRWShort cuts the watchdog's lease to redissonRWLeaseMs, so that
// three leases and a killed holder's lease are a few seconds.
var redissonRWShort = []string{fmt.Sprintf("-Dcompat.redisson.watchdogMs=%d", redissonRWLeaseMs)}

// redissonRWCheckerFailed is the program's exit status when its checker saw
// holders that exclude each other inside at once, or never two readers.
const redissonRWCheckerFailed = 3

// runRedissonRW runs compat.RedissonRWLocks with args and returns what it
// printed and how it exited. midway, if not nil, runs at the program's "rw
// quarter", while the program holds back the rest of its holdings: the
// fault the other three quarters go through.
func runRedissonRW(t *testing.T, dir, module string, props []string, midway func(), args ...string) (string, error) {
	t.Helper()
	cmd := redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", props, args...)
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	goOn, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	quarter := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		lines := bufio.NewScanner(r)
		for lines.Scan() {
			out.WriteString(lines.Text() + "\n")
			if lines.Text() == "rw quarter" {
				close(quarter)
			}
		}
		io.Copy(io.Discard, r)
	}()
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		w.Close()
		exited <- err
	}()
	if midway != nil {
		select {
		case <-quarter:
			midway()
			if _, err := io.WriteString(goOn, "go on\n"); err != nil {
				t.Fatalf("telling %s to go on after the fault: %v", args[0], err)
			}
			err = <-exited
		case err = <-exited:
			<-read
			t.Fatalf("%s exited (%v) before a quarter of its holdings, so the fault never came:\n%s", args[0], err, out.String())
		}
	} else {
		err = <-exited
	}
	<-read
	t.Logf("%s in %v:\n%s", args[0], time.Since(start).Round(100*time.Millisecond), out.String())
	return out.String(), err
}

// runRedissonRWSuite runs the read-write suite with client A on a and
// client B on b, holdMs for its watchdog phase (0: none), and fails unless
// it passed, its checker included. midway, if not nil, makes it contend
// once more at the end, through the fault midway makes at a quarter of it.
func runRedissonRWSuite(t *testing.T, dir, module string, props []string, a, b string, holdMs int, midway func()) {
	t.Helper()
	fault := "nofault"
	if midway != nil {
		fault = "fault"
	}
	out, err := runRedissonRW(t, dir, module, props, midway, "rwsuite", a, b, fmt.Sprint(redissonRWRounds),
		fmt.Sprint(redissonRWThreads), fmt.Sprint(redissonRWWakeRounds), fmt.Sprint(holdMs), fault)
	if err != nil {
		t.Fatalf("rwsuite: %v", err)
	}
	want := 1
	if midway != nil {
		want = 2
	}
	if n := strings.Count(out, "ok the checker saw no writer beside anyone, and readers together"); n != want {
		t.Fatalf("rwsuite exited 0 with %d verdicts of its checker, want %d", n, want)
	}
}

// redissonRWControl runs the checker's negative controls, rwsuite's
// contention (1) with client A on a and client B on b, two independent
// redis-servers, so that nothing keeps A's holders from B's, and (2) with
// both on a but every read hold taken as a write hold, a lock that never
// lets two readers in. Both must fail, and by the checker: a crash or any
// other failure proves nothing about it.
func redissonRWControl(t *testing.T, dir, module, a, b string) {
	t.Helper()
	out, err := runRedissonRW(t, dir, module, nil, nil, "rwcontrol", a, b, a,
		fmt.Sprint(redissonRWRounds), fmt.Sprint(redissonRWThreads))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != redissonRWCheckerFailed {
		t.Fatalf("rwcontrol ended with %v, want exit status %d (its checker failed both runs)", err, redissonRWCheckerFailed)
	}
	for _, want := range []string{
		"checker failed: holders that exclude each other were inside at once",
		"checker failed: no two readers were ever inside one name at once",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rwcontrol exited %d without %q", redissonRWCheckerFailed, want)
		}
	}
	if strings.Contains(out, "FAIL ") {
		t.Errorf("rwcontrol failed otherwise too")
	}
}

// redissonRWKilledHolder starts a JVM that takes a read lock and a write
// lock (two names) with lock() through holderAddr, waits until the watchdog
// has renewed both, kills it with SIGKILL, and has a second JVM, connected
// through takerAddr before the kill, take the write lock of both names with
// tryLock(wait): each must be taken once the lease last renewed runs out,
// not before it less redissonRWEarly, not long after. cli reads the
// PTTLs through holderAddr's server.
func redissonRWKilledHolder(t *testing.T, dir, module, holderAddr, takerAddr string, cli *redis.Client) {
	t.Helper()
	holder := redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", redissonRWShort, "rwhold", holderAddr)
	held, _ := startLines(t, holder, "rwhold")
	var names []string
	var lease time.Duration
	for l := range held {
		if f := strings.Fields(l.text); len(f) == 4 && f[0] == "held" {
			ms, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatalf("rwhold printed %q", l.text)
			}
			names, lease = f[1:3], time.Duration(ms)*time.Millisecond
			break
		}
	}
	if names == nil {
		t.Fatalf("rwhold ended without taking the locks")
	}
	taker := redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", redissonRWShort, "rwtake", takerAddr, names[0], names[1])
	goSignal, err := taker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	took, takerExit := startLines(t, taker, "rwtake")

	// Kill after a renewal of each, so that the leases that run out are
	// ones the watchdog set, not the acquisitions'.
	ctx := t.Context()
	for _, key := range names {
		last := cli.PTTL(ctx, key).Val()
		deadline := time.Now().Add(lease/3 + 10*time.Second)
		for {
			ttl, err := cli.PTTL(ctx, key).Result()
			if err != nil || ttl <= 0 {
				t.Fatalf("PTTL %s while its holder runs: %v %v", key, ttl, err)
			}
			if ttl > last+100*time.Millisecond {
				break
			}
			last = ttl
			if time.Now().After(deadline) {
				t.Fatalf("the watchdog did not renew %s within %v of the lock (PTTL %v)", key, lease/3+10*time.Second, ttl)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	awaitLine(t, took, "ready", "rwtake")
	ttls := map[string]time.Duration{}
	for _, key := range names {
		ttls[key] = cli.PTTL(ctx, key).Val()
	}
	holder.Process.Kill()
	killed := time.Now()
	if _, err := io.WriteString(goSignal, "go\n"); err != nil {
		t.Fatalf("telling rwtake to go: %v", err)
	}
	for range names {
		var l line
		for l = range took {
			if strings.HasPrefix(l.text, "took ") {
				break
			}
		}
		if !strings.HasPrefix(l.text, "took ") {
			t.Fatalf("rwtake ended without taking both write locks")
		}
		key := strings.Fields(l.text)[1]
		freed, ttl := l.at.Sub(killed), ttls[key]
		t.Logf("the killed holder's %s (lease %v, %v left at the kill) was taken by the other client %v after the kill",
			key, lease, ttl, freed.Round(time.Millisecond))
		if freed < ttl-redissonRWEarly || freed > ttl+2*time.Second {
			t.Errorf("the killed holder's %s was taken %v after the kill, want when its lease ran out, %v after it", key, freed, ttl)
		}
	}
	if err := takerExit(); err != nil {
		t.Fatalf("rwtake: %v", err)
	}
}

// redissonRWEarly is how much before the PTTL read just ahead of the kill
// a killed holder's lock may be taken: the drift allowance of a 3 s lease
// (drift_factor 0.01 and 2 ms) and room for the proxy's PTTL answer, far
// below the watchdog's 1 s period, so that a lock that ran out with the
// lease before its last renewal fails.
const redissonRWEarly = 250 * time.Millisecond

// line is a line a program printed and when it was read.
type line struct {
	text string
	at   time.Time
}

// startLines starts cmd and returns its stdout and stderr line by line,
// each stamped when read, closed once cmd has exited, and a function that
// waits for its exit; what it printed is logged, as name's, at the end of
// the test, which kills it if it still runs.
func startLines(t *testing.T, cmd *exec.Cmd, name string) (<-chan line, func() error) {
	t.Helper()
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var all strings.Builder
	exited := make(chan struct{})
	var waited error
	go func() {
		waited = cmd.Wait()
		w.Close()
		close(exited)
	}()
	lines := make(chan line, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			all.WriteString(sc.Text() + "\n")
			mu.Unlock()
			lines <- line{sc.Text(), time.Now()}
		}
		io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s printed:\n%s", name, all.String())
	})
	return lines, func() error {
		<-exited
		return waited
	}
}

// awaitLine reads lines until want, and fails the test if what printed
// them ends first.
func awaitLine(t *testing.T, lines <-chan line, want, what string) {
	t.Helper()
	for l := range lines {
		if l.text == want {
			return
		}
	}
	t.Fatalf("%s ended without printing %q", what, want)
}
