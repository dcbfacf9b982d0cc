package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's RReadWriteLock (compat.RedissonRWLocks), run by
// TestRedissonProgramsOnRedis and TestRedissonThroughProxies beside RLock,
// its suite in the JVMs of RLock's suite or watchdog.

// The read-write suite's sizes: two clients of redissonThreads threads
// each take a read or a write lock redissonRounds times, then a write
// waiter is woken redissonRWWakeRounds times, then the watchdog keeps a
// read and a write hold for three of its redissonRWLeaseMs leases.
const (
	redissonRWWakeRounds = 5
	redissonRWLeaseMs    = 3000
	redissonRWHoldMs     = 3 * redissonRWLeaseMs
)

// redissonRWShort cuts the watchdog's lease of the read-write program's
// clients to redissonRWLeaseMs, so that three leases and a killed holder's
// lease are a few seconds; RLock's clients in the same JVM keep theirs.
var redissonRWShort = []string{fmt.Sprintf("-Dcompat.redisson.rwWatchdogMs=%d", redissonRWLeaseMs)}

// redissonRW are the properties that make compat.RedissonLocks' suite or
// watchdog run the read-write suite after its own phases; with fault, a
// last contention through a fault, whose cue runRedissonSuite's rwFault
// answers.
func redissonRW(fault bool) []string {
	f := "nofault"
	if fault {
		f = "fault"
	}
	return append(slices.Clone(redissonRWShort), fmt.Sprintf("-Dcompat.redisson.rw=%d,%d,%d,%d,%s",
		redissonRounds, redissonThreads, redissonRWWakeRounds, redissonRWHoldMs, f))
}

// checkRedissonRW fails unless the read-write suite ran through its
// watchdog phase in out, its checker passing each contention: one, or two
// with fault.
func checkRedissonRW(t *testing.T, out string, fault bool) {
	t.Helper()
	want := 1
	if fault {
		want = 2
	}
	if n := strings.Count(out, "ok the checker saw no writer beside anyone, and readers together"); n != want {
		t.Errorf("the read-write suite printed %d passing verdicts of its checker, want %d", n, want)
	}
	if !strings.Contains(out, "ok after A's write unlock B's write tryLock() takes it") {
		t.Errorf("the read-write suite did not reach the end of its watchdog phase")
	}
}

// redissonRWCheckerFailed is the program's exit status when its checker saw
// holders that exclude each other inside at once, or never two readers.
const redissonRWCheckerFailed = 3

// redissonRWControl runs the checker's negative controls, the read-write
// contention (1) with client A on a and client B on b, two independent
// redis-servers, so that nothing keeps A's holders from B's, and (2) with
// both on a but every read hold taken as a write hold, a lock that never
// lets two readers in. Both must fail, and by the checker: a crash or any
// other failure proves nothing about it.
func redissonRWControl(t *testing.T, dir, module, a, b string) {
	t.Helper()
	run := startRedisson(t, redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", redissonRWShort, "rwcontrol", a, b, a,
		fmt.Sprint(redissonRounds), fmt.Sprint(redissonThreads)))
	err := run.wait()
	out := run.output()
	t.Logf("rwcontrol in %v:\n%s", time.Since(run.start).Round(100*time.Millisecond), out)
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
	holder := startRedisson(t, redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", redissonRWShort, "rwhold", holderAddr))
	t.Cleanup(func() { t.Logf("rwhold printed:\n%s", holder.output()) })
	var names []string
	var lease time.Duration
	for l := range holder.lines {
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
	taker := startRedisson(t, redissonJavaMain(t, dir, module, "compat.RedissonRWLocks", redissonRWShort, "rwtake", takerAddr, names[0], names[1]))
	t.Cleanup(func() { t.Logf("rwtake printed:\n%s", taker.output()) })

	// Kill after a renewal of each, so that the leases that run out are
	// ones the watchdog set, not the acquisitions'.
	ctx := t.Context()
	for _, key := range names {
		awaitRenewal(t, cli, key, lease)
	}
	awaitLine(t, taker.lines, "ready", "rwtake")
	ttls := map[string]time.Duration{}
	for _, key := range names {
		ttls[key] = cli.PTTL(ctx, key).Val()
	}
	holder.kill()
	killed := time.Now()
	if _, err := io.WriteString(taker.stdin, "go\n"); err != nil {
		t.Fatalf("telling rwtake to go: %v", err)
	}
	for range names {
		var l line
		for l = range taker.lines {
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
	if err := taker.wait(); err != nil {
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

// redissonRun is a Redisson program started by startRedisson.
type redissonRun struct {
	start time.Time
	// lines are its stdout and stderr line by line, each stamped when
	// read, closed once it has exited; a reader may leave them.
	lines <-chan line
	// exited has its exit once, and is then closed.
	exited  <-chan error
	quarter <-chan struct{} // closed at "rw quarter"
	stdin   io.Writer
	mu      sync.Mutex
	out     strings.Builder
	err     error
	done    chan struct{}
	kill    func() // SIGKILL
}

// startRedisson starts cmd; the test's end kills it if it still runs.
func startRedisson(t *testing.T, cmd *exec.Cmd) *redissonRun {
	t.Helper()
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	lines, exited, quarter := make(chan line, 10_000), make(chan error, 1), make(chan struct{})
	run := &redissonRun{start: time.Now(), lines: lines, exited: exited, quarter: quarter, stdin: stdin, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	run.kill = func() { cmd.Process.Kill() }
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			run.mu.Lock()
			run.out.WriteString(sc.Text() + "\n")
			run.mu.Unlock()
			if sc.Text() == "rw quarter" {
				close(quarter)
			}
			select {
			case lines <- line{sc.Text(), time.Now()}:
			default: // nobody reads them
			}
		}
		io.Copy(io.Discard, r)
	}()
	go func() {
		err := cmd.Wait()
		w.Close()
		<-read
		run.err = err
		close(run.done)
		exited <- err
		close(exited)
	}()
	t.Cleanup(func() {
		run.kill()
		<-run.done
	})
	return run
}

// output is what the program printed so far.
func (run *redissonRun) output() string {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.out.String()
}

// wait waits for the program's exit, all it printed read, and returns it.
func (run *redissonRun) wait() error {
	<-run.done
	return run.err
}

// atQuarter waits for the read-write suite's cue, runs fault, and lets the
// program go on; the test fails if the program exits first.
func (run *redissonRun) atQuarter(t *testing.T, fault func()) {
	t.Helper()
	select {
	case <-run.quarter:
	case <-run.done:
		t.Fatalf("the program exited (%v) before the read-write suite's cue, so the fault never came:\n%s", run.err, run.output())
	}
	fault()
	if _, err := io.WriteString(run.stdin, "go on\n"); err != nil {
		t.Fatalf("telling the program to go on after the fault: %v", err)
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
