package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// redissonVersions are the Redisson releases under test, each a module of
// the Java project running compat.RedissonLocks: the newest, and a 3.2x
// release that still sends its scripts by plain EVAL.
var redissonVersions = []struct{ version, module string }{
	{"4.7.0", "redisson-4"},
	{"3.27.2", "redisson-3"},
}

// The suite's sizes: two clients of redissonThreads threads each take the
// lock redissonRounds times, then a waiter is woken redissonWakeRounds
// times. Small, because one JVM runs it all and CI's budget is tight.
const (
	redissonRounds     = 8
	redissonThreads    = 4
	redissonWakeRounds = 10
)

// redissonHoldMs is how long the watchdog check holds the lock through the
// proxy: past Redisson's default 30 s lease, so that only renewals keep it.
const redissonHoldMs = 35_000

// TestRedissonProgramsOnRedis runs compat.RedissonLocks of each Redisson
// version against one real redis-server: what Redisson does without the
// proxy, so that a failure through the proxy is the proxy's. The watchdog's
// lease is cut to 3 s here (the program's logic is the same, the wait
// shorter); through the proxy it is Redisson's default. RReadWriteLock's
// program (compat.RedissonRWLocks) passes here, and fails by its checker
// with its two clients on two independent redis-servers, and with every
// read hold taken as a write hold.
func TestRedissonProgramsOnRedis(t *testing.T) {
	clientTest(t)
	start := time.Now()
	dir := javaBuild(t)
	s := redistest.Start(t)
	// The read-write checker's negative control: one server per client.
	controlA, controlB := redistest.Start(t), redistest.Start(t)
	short := []string{"-Dcompat.redisson.watchdogMs=3000"}
	var wg sync.WaitGroup
	for _, r := range redissonVersions {
		// The lock names carry the version: both versions share the server.
		wg.Go(func() {
			t.Run(r.version, func(t *testing.T) {
				var phases sync.WaitGroup
				phases.Go(func() {
					t.Run("suite", func(t *testing.T) { runRedissonSuite(t, dir, r.module, s.Addr(), s.Addr(), nil, nil, nil) })
				})
				phases.Go(func() {
					// RReadWriteLock's suite after RLock's watchdog, in its JVM.
					t.Run("watchdog_then_rw", func(t *testing.T) {
						out := runRedisson(t, dir, r.module, slices.Concat(short, redissonRW(false)), "watchdog", s.Addr(), s.Addr(), "4000")
						checkRedissonRW(t, out, false)
					})
				})
				phases.Go(func() {
					t.Run("killed_holder", func(t *testing.T) { redissonKilledHolder(t, dir, r.module, s.Addr(), short, s.Client(t)) })
				})
				phases.Go(func() {
					t.Run("objects", func(t *testing.T) { runRedisson(t, dir, r.module, nil, "objects", s.Addr()) })
				})
				phases.Go(func() {
					t.Run("fenced_lock", func(t *testing.T) { runRedisson(t, dir, r.module, nil, "fenced", s.Addr(), s.Addr(), "6", "3") })
				})
				// The read-write killed holder only shows the test's timing
				// on one Redis, and the checker's controls are the same
				// code for both versions: the newest's suffice here.
				if r == redissonVersions[0] {
					phases.Go(func() {
						t.Run("rw_killed_holder", func(t *testing.T) {
							redissonRWKilledHolder(t, dir, r.module, s.Addr(), s.Addr(), s.Client(t))
						})
					})
					phases.Go(func() {
						t.Run("rw_checker_control", func(t *testing.T) { redissonRWControl(t, dir, r.module, controlA.Addr(), controlB.Addr()) })
					})
				}
				phases.Wait()
			})
		})
	}
	wg.Wait()
	t.Logf("Redisson on one redis-server took %v", time.Since(start).Round(100*time.Millisecond))
}

// TestRedissonThroughProxies runs Redisson's RLock, unchanged, through two
// proxies on the same five backends: each version's suite (contention with
// re-entry and tryLock, the scenario checks, waiters woken by the unlock
// message) with all backends up, with one killed, and with one restarted
// empty under restart quarantine; the watchdog holding a lock past its
// lease; a JVM killed while holding; RFencedLock through two fencing
// proxies, its tokens strictly increasing across both clients and both
// proxies; Redisson's lock objects that lockproxy does not serve (or,
// RFencedLock, not without fencing), refused by name; and RReadWriteLock's
// checked contention (all backends up, and one killed midway), a write
// waiter woken by a read unlock, its watchdog, and a killed holder's read
// and write locks. Every part has its own proxies
// (pubsub counts and quarantine are per cluster) and all run at once: the
// watchdog's and the quarantine's waits dominate, not the work.
func TestRedissonThroughProxies(t *testing.T) {
	clientTest(t)
	start := time.Now()
	// Quarantine on (the later flag overrides twoProxiesWith's =false):
	// fresh backends count only once up for max_ttl, so these start first
	// and age while the Java project builds and the other parts run.
	// max_ttl is Redisson's watchdog lease, the least that lets its locks
	// through.
	qc := make([]*cluster, len(redissonVersions))
	qb := make([]*proxyProcess, len(redissonVersions))
	for i := range redissonVersions {
		qc[i], qb[i] = twoProxiesWith(t, 5, "-restart-quarantine=true", "-max-ttl", "30s")
	}
	dir := javaBuild(t)

	var wg sync.WaitGroup
	run := func(name string, f func(t *testing.T)) { wg.Go(func() { t.Run(name, f) }) }
	// The restart runs once the rest is done, on a machine less loaded:
	// with one backend quarantined only four count, and a holding on
	// exactly three of them, the restarted one among them, is left on two,
	// undecidable. The proxies make such holdings rare (waiters are woken
	// once a release is everywhere, and a lock won on a bare quorum is
	// topped up), but a restart within the milliseconds of a top-up still
	// catches one, and CPU-starved proxies stretch those milliseconds.
	var restartedEmpty []func()
	for i, r := range redissonVersions {
		// RReadWriteLock's suite after RLock's, in its JVM: the checked
		// contention, the reads, the wake-up and the watchdog's three
		// leases, then the contention again with one backend killed at a
		// quarter of it.
		run("backends_up_then_rw/"+r.version, func(t *testing.T) {
			c, b := twoProxies(t, 5)
			out := runRedissonSuite(t, dir, r.module, c.proxy.Addr, b.Addr, slices.Concat(redissonDeliveries, redissonRW(true)), nil, c.servers[0].Kill)
			checkRedissonRW(t, out, true)
		})
		run("backend_killed/"+r.version, func(t *testing.T) {
			c, b := twoProxies(t, 5)
			c.servers[0].Kill()
			runRedissonSuite(t, dir, r.module, c.proxy.Addr, b.Addr, redissonDeliveries, nil, nil)
		})
		restartedEmpty = append(restartedEmpty, func() {
			t.Run("backend_restarted_empty/"+r.version, func(t *testing.T) {
				c, proxies := qc[i], []*proxyProcess{qc[i].proxy, qb[i]}
				waited := time.Now()
				// All five, not just a quorum: the suite restarts one, and
				// with only a quorum left counting every straggling reply of
				// an operation answered at a quorum would split the next.
				for _, p := range proxies {
					awaitQuorum(t, p, 45*time.Second)
					awaitAllCounting(t, p, 5, 15*time.Second)
				}
				t.Logf("the fresh backends counted after %v", time.Since(waited).Round(100*time.Millisecond))
				restarted := c.servers[1]
				// A release that the restart leaves on fewer than a quorum
				// of the backends that count is told to nobody, and its
				// waiters wake at the holder's lease end, as documented
				// (docs/waiting.md): a 10 s watchdog lease keeps
				// that within tryLock's 20 s wait, where the default 30 s
				// would not.
				props := append(slices.Clone(redissonDeliveries), "-Dcompat.redisson.watchdogMs=10000")
				runRedissonSuite(t, dir, r.module, proxies[0].Addr, proxies[1].Addr, props, restarted.Restart, nil)
				// The restarted backend answered throughout but did not count:
				// the suite ran inside its quarantine.
				for _, p := range proxies {
					if info := redisCLI(t, p.Addr, "INFO", "backends"); !strings.Contains(info, "backend1:addr="+restarted.Addr()+",state=quarantined") {
						t.Errorf("INFO backends of %s does not show the restarted backend quarantined after the suite:\n%s", p.Addr, info)
					}
				}
			})
		})
	}
	w, wb := twoProxies(t, 5)
	for _, r := range redissonVersions {
		run("watchdog/"+r.version, func(t *testing.T) {
			runRedisson(t, dir, r.module, nil, "watchdog", w.proxy.Addr, wb.Addr, fmt.Sprint(redissonHoldMs))
		})
	}
	newest := redissonVersions[0]
	run("killed_holder/"+newest.version, func(t *testing.T) {
		redissonKilledHolder(t, dir, newest.module, w.proxy.Addr, nil, w.proxy.Client(t))
	})
	// A killed holder's RReadWriteLock read and write locks, taken through
	// the other proxy once their lease runs out.
	for _, r := range redissonVersions {
		run("rw_killed_holder/"+r.version, func(t *testing.T) {
			redissonRWKilledHolder(t, dir, r.module, w.proxy.Addr, wb.Addr, w.proxy.Client(t))
		})
	}
	// The lock objects lockproxy does not serve are refused by name. Only
	// the newest version shows it: 3.2x replaces every error reply to a
	// script with "Unexpected exception while processing command" (its
	// handleNoSync fails on the error's missing cause).
	fc, fb := twoProxiesWith(t, 5, "-fencing")
	for _, r := range redissonVersions {
		run("fenced_lock/"+r.version, func(t *testing.T) {
			runRedisson(t, dir, r.module, nil, "fenced", fc.proxy.Addr, fb.Addr, "6", "3")
		})
	}
	run("refused_objects/"+newest.version, func(t *testing.T) {
		runRedisson(t, dir, newest.module, nil, "refused", w.proxy.Addr)
	})
	wg.Wait()
	for _, f := range restartedEmpty {
		wg.Go(f)
	}
	wg.Wait()
	t.Logf("Redisson through the proxies took %v", time.Since(start).Round(100*time.Millisecond))
}

// redissonDeliveries makes the suite's wake phase read proxy B's
// pubsub_messages_delivered: each wake must have come as a message.
var redissonDeliveries = []string{"-Dcompat.redisson.deliveries=true"}

// redissonJava is the command that runs compat.RedissonLocks of module
// with props (system properties) and args.
//
// The JVM is killed after redissonJVMLimit: a run stuck (a waiter never
// woken, a client that never connects) then fails with what it printed,
// rather than holding the whole test binary until go test's timeout.
func redissonJava(t *testing.T, dir, module string, props []string, args ...string) *exec.Cmd {
	return redissonJavaMain(t, dir, module, "compat.RedissonLocks", props, args...)
}

// redissonJavaMain is redissonJava for the program main, a class of the
// Redisson modules.
func redissonJavaMain(t *testing.T, dir, module, main string, props []string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(t.Context(), redissonJVMLimit)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "java", slices.Concat(javaFlags, props,
		[]string{"-cp", javaClasspath(dir, module), main}, args)...)
	cmd.WaitDelay = 5 * time.Second // output pipes held by nothing else
	return cmd
}

// redissonJVMLimit bounds one Redisson program's run: the longest, the
// watchdog's, holds 35 s and takes about 45.
const redissonJVMLimit = 3 * time.Minute

// runRedisson runs compat.RedissonLocks with args to its end, logs what
// it printed and returns it.
func runRedisson(t *testing.T, dir, module string, props []string, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := redissonJava(t, dir, module, props, args...).CombinedOutput()
	t.Logf("%s in %v:\n%s", args[0], time.Since(start).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatalf("%s: %v", args[0], err)
	}
	return string(out)
}

// runRedissonSuite runs the suite with client A on a and client B on b,
// checks the holders' log, and returns what it printed. midway, if not nil,
// runs once a quarter of the holdings are in the log: the fault the rest of
// the run goes through. rwFault, if not nil, runs at the read-write suite's
// cue (props from redissonRW, with fault), as midway for its last contention.
func runRedissonSuite(t *testing.T, dir, module, a, b string, props []string, midway, rwFault func()) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "holders.log")
	holdings := 2 * redissonThreads * redissonRounds
	cmd := redissonJava(t, dir, module, props, "suite", a, b, log,
		fmt.Sprint(redissonRounds), fmt.Sprint(redissonThreads), fmt.Sprint(redissonWakeRounds))
	run := startRedisson(t, cmd)
	if midway != nil {
		if err := awaitHoldings(log, holdings/4, run.exited); err != nil {
			t.Fatalf("%v before a quarter of its holdings were logged, so the fault never came:\n%s", err, run.output())
		}
		midway()
	}
	if rwFault != nil {
		run.atQuarter(t, rwFault)
	}
	err := run.wait()
	t.Logf("suite in %v:\n%s", time.Since(run.start).Round(100*time.Millisecond), run.output())
	if err != nil {
		t.Fatalf("suite: %v", err)
	}
	checkLockLog(t, log, holdings)
	return run.output()
}

// awaitHoldings polls the holders' log until it has n holdings, and
// returns nil then, or an error if the program exits first.
func awaitHoldings(log string, n int, exited <-chan error) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the suite exited (%v)", err)
		case <-tick.C:
			data, _ := os.ReadFile(log)
			if bytes.Count(data, []byte("enter ")) >= n {
				return nil
			}
		}
	}
}

// awaitQuorum waits until the proxy takes locks: fresh backends are in
// restart quarantine for max_ttl.
func awaitQuorum(t *testing.T, p *proxyProcess, limit time.Duration) {
	t.Helper()
	cli := p.Client(t)
	deadline := time.Now().Add(limit)
	for {
		token := fmt.Sprint(time.Now().UnixNano())
		got := do(t, cli, "SET", "redisson:probe", token, "NX", "PX", 100)
		if got == "OK" || got == "nil" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s takes no locks after %v: %s", p.Addr, limit, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitAllCounting waits until INFO backends of p shows n backends up
// (counting toward quorum).
func awaitAllCounting(t *testing.T, p *proxyProcess, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		info := redisCLI(t, p.Addr, "INFO", "backends")
		if strings.Count(info, ",state=up,") == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than %d backends count after %v:\n%s", p.Addr, n, limit, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redissonKilledHolder starts a JVM that takes a lock with lock() (the
// watchdog's lease) through addr, waits until the watchdog has renewed it
// once, kills the JVM with SIGKILL, and checks through cli that the lock
// frees when the lease it last renewed runs out: not at once, not later.
func redissonKilledHolder(t *testing.T, dir, module, addr string, props []string, cli *redis.Client) {
	t.Helper()
	cmd := redissonJava(t, dir, module, props, "hold", addr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	var key string
	var lease time.Duration
	for key == "" && lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "held" {
			ms, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("hold printed %q", lines.Text())
			}
			key, lease = f[1], time.Duration(ms)*time.Millisecond
		}
	}
	if key == "" {
		cmd.Wait()
		t.Fatalf("hold ended without taking the lock:\n%s", stderr.String())
	}
	ctx := t.Context()
	// The watchdog renews every lease/3; kill after a renewal, so that the
	// lease that runs out is one the watchdog set, not the acquisition's.
	awaitRenewal(t, cli, key, lease)
	ttl := cli.PTTL(ctx, key).Val()
	cmd.Process.Kill()
	killed := time.Now()
	cmd.Wait()
	for {
		n, err := cli.Exists(ctx, key).Result()
		if err != nil {
			t.Fatalf("EXISTS %s: %v", key, err)
		}
		if n == 0 {
			break
		}
		if time.Since(killed) > ttl+10*time.Second {
			t.Fatalf("%s still exists %v after its holder was killed with %v of lease left", key, time.Since(killed), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	freed := time.Since(killed)
	t.Logf("the killed holder's lock (lease %v, %v left at the kill) freed %v after the kill",
		lease, ttl, freed.Round(time.Millisecond))
	if freed < ttl-time.Second || freed > ttl+2*time.Second {
		t.Fatalf("the killed holder's lock freed %v after the kill, want when its lease ran out, %v after it", freed, ttl)
	}
}

// awaitRenewal polls key's PTTL through cli until it rises: the holder's
// watchdog, which renews every lease/3, has just renewed it.
func awaitRenewal(t *testing.T, cli *redis.Client, key string, lease time.Duration) {
	t.Helper()
	ctx := t.Context()
	last := cli.PTTL(ctx, key).Val()
	deadline := time.Now().Add(lease/3 + 10*time.Second)
	for {
		ttl, err := cli.PTTL(ctx, key).Result()
		if err != nil || ttl <= 0 {
			t.Fatalf("PTTL %s while its holder runs: %v %v", key, ttl, err)
		}
		if ttl > last+100*time.Millisecond {
			return
		}
		last = ttl
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog did not renew %s within %v of the lock (PTTL %v)", key, lease/3+10*time.Second, ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
