package test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// python-redis-lock through the proxy beyond the compatibility suite's
// rows (TestCompatPyPI runs its contention and scenario): a waiter woken
// across proxies, a lock of expire=100, expire=None's session-bound lock,
// and BLPOP's bytes beside a real redis-server's.

// pyRedisLock runs test/compat/python/pyredislock.py with args in its
// virtual environment, and returns what it printed.
func pyRedisLock(t *testing.T, args ...string) (string, error) {
	t.Helper()
	python, interpreter, dir := pyInterpreter(t)
	venvPython := pyVenv(t, python, interpreter, dir, "pyredislock")
	program := filepath.Join(dir, "pyredislock.py")
	if _, err := os.Stat(program); err != nil { // for go test's cache, as in pyPIClients
		t.Fatal(err)
	}
	cmd := exec.Command(venvPython, append([]string{program}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPyRedisLockAcrossProxies: a python-redis-lock waiter blocked in
// BLPOP on proxy B is woken by the holder's release through proxy A, well
// before its BLPOP's timeout (the lock's 30 s expire) would end it.
func TestPyRedisLockAcrossProxies(t *testing.T) {
	clientTest(t)
	c, b := twoProxies(t, 3)
	out, err := pyRedisLock(t, "handoff", c.proxy.Addr, b.Addr)
	t.Logf("handoff:\n%s", out)
	if err != nil {
		t.Fatalf("handoff: %v", err)
	}
	m := regexp.MustCompile(`woken after ([0-9.]+) ms`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("handoff printed no wake-up time")
	}
	if ms, _ := strconv.ParseFloat(m[1], 64); ms > 2000 {
		t.Fatalf("woken %.1f ms after the release on the other proxy, want well under the 30 s expire (at most 2 s)", ms)
	}
}

// TestPyRedisLockExpire100: issue 37's acceptance with default settings:
// python-redis-lock's Lock(expire=100, auto_renewal=True), a lock longer
// than max_ttl's earlier default (60 s) refused, is acquired, extended
// and released through the proxy.
func TestPyRedisLockExpire100(t *testing.T) {
	clientTest(t)
	c := newCluster(t, 3)
	out, err := pyRedisLock(t, "expire", c.proxy.Addr, "100")
	t.Logf("expire 100:\n%s", out)
	if err != nil {
		t.Fatalf("expire 100: %v", err)
	}
	if !strings.Contains(out, "ok   release\n") {
		t.Fatalf("expire 100 exited 0 without releasing")
	}
}

// TestPyRedisLockNoExpire: python-redis-lock's Lock(expire=None) and
// redis-py's Lock(timeout=None) send SET NX without a TTL, which one
// redis-server keeps for ever, stuck once its holder dies. Through the
// proxy it is a session-bound lock: held for many leases with only the
// short lease on the backends, released by its holder as usual, and freed
// within a lease of its holder's process being killed.
func TestPyRedisLockNoExpire(t *testing.T) {
	clientTest(t)
	const lease = 500 * time.Millisecond
	c := newCluster(t, 3, "-session-lease", lease.String())
	other := c.proxy.Client(t)
	// python-redis-lock keeps its lock at "lock:" and the name.
	for lib, key := range map[string]string{"redis-py": "compat:held", "python-redis-lock": "lock:compat:held"} {
		t.Run(lib, func(t *testing.T) {
			holder := startPyRedisLock(t, "hold", lib, c.proxy.Addr, "3")
			holder.await(t, "acquired")
			for i, d := range c.pttls(t, key) {
				if d <= 0 || d > lease {
					t.Fatalf("backend %d: PTTL %v, want the lease (%v) at most", i, d, lease)
				}
			}
			if got := do(t, other, "SET", key, "theirs", "NX", "PX", 10000); got != "nil" {
				t.Fatalf("SET NX while %s holds the lock: %q", lib, got)
			}
			holder.await(t, "released") // six leases later
			if err := holder.cmd.Wait(); err != nil {
				t.Fatalf("%s hold: %v\n%s", lib, err, holder.out.String())
			}
			if got := do(t, other, "EXISTS", key); got != "0" {
				t.Fatalf("EXISTS after the release: %s", got)
			}

			killed := startPyRedisLock(t, "hold", lib, c.proxy.Addr, "forever")
			killed.await(t, "acquired")
			killed.cmd.Process.Kill()
			start := time.Now()
			redistest.Eventually(t, func() string {
				if got := do(t, other, "SET", key, "next", "NX", "PX", 10000); got != "OK" {
					return "the lock of the killed holder is still held: " + got
				}
				return ""
			})
			if took := time.Since(start); took > lease {
				t.Fatalf("the killed holder's lock was freed after %v, want within one lease (%v)", took, lease)
			} else {
				t.Logf("%s: the killed holder's lock was free for another client after %v", lib, took.Round(time.Millisecond))
			}
			do(t, other, "DEL", key)
		})
	}
	reference, err := pyRedisLock(t, "noexpire", c.servers[0].Addr())
	if err != nil || strings.TrimSpace(reference) != "acquired: True" {
		t.Fatalf("on one redis-server: %q, %v; want acquired: True", reference, err)
	}
}

// pyRedisLockRun is pyredislock.py running in the background.
type pyRedisLockRun struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	out   strings.Builder
}

// startPyRedisLock starts test/compat/python/pyredislock.py with args; it
// is killed when the test ends.
func startPyRedisLock(t *testing.T, args ...string) *pyRedisLockRun {
	t.Helper()
	python, interpreter, dir := pyInterpreter(t)
	venvPython := pyVenv(t, python, interpreter, dir, "pyredislock")
	cmd := exec.Command(venvPython, append([]string{filepath.Join(dir, "pyredislock.py")}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &pyRedisLockRun{cmd: cmd, lines: bufio.NewScanner(stdout)}
}

// await reads the program's lines until one is want.
func (r *pyRedisLockRun) await(t *testing.T, want string) {
	t.Helper()
	for r.lines.Scan() {
		r.out.WriteString(r.lines.Text() + "\n")
		if r.lines.Text() == want {
			return
		}
	}
	t.Fatalf("pyredislock.py ended without printing %q:\n%s", want, r.out.String())
}

// TestBLPopLikeRedis compares BLPOP's replies through the proxy with a
// real redis-server's, byte for byte, in RESP2 and RESP3: the element when
// the signal comes (a release through the proxy, an LPUSH on Redis), the
// nil array at the timeout, and the errors of bad timeouts and arity.
func TestBLPopLikeRedis(t *testing.T) {
	clientTest(t)
	c := newCluster(t, 3)
	redisAddr := c.servers[0].Addr() // a backend answers as a plain redis-server for keys the proxy never touched
	cli := c.proxy.Client(t)
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			name := "blpop" + proto
			signal, lock := "lock-signal:"+name, "lock:"+name
			proxy, redis := dialRaw(t, c.proxy.Addr), dialRaw(t, redisAddr)
			both := func(t *testing.T, args ...string) (got, want string) {
				t.Helper()
				var replies [2]string
				for i, conn := range []*rawConn{proxy, redis} {
					if _, err := io.WriteString(conn, wireCmd(args...)); err != nil {
						t.Fatal(err)
					}
					r, err := readReply(conn.rd)
					if err != nil {
						t.Fatalf("%v: %v", args, err)
					}
					replies[i] = r
				}
				return replies[0], replies[1]
			}
			if proto == "3" {
				both(t, "HELLO", "3") // the servers' names and versions differ: not compared
			}
			// Held through the proxy; the list empty on Redis: both wait.
			if got := do(t, cli, "SET", lock, "holder", "NX", "EX", 30); got != "OK" {
				t.Fatalf("SET NX: %s", got)
			}
			for _, args := range [][]string{
				{"BLPOP", signal, "0.05"},
				{"BLPOP", signal, "-1"},
				{"BLPOP", signal, "soon"},
				{"BLPOP", signal, "nan"},
				{"BLPOP", signal, "1e16"},
				{"BLPOP", signal},
			} {
				got, want := both(t, args...)
				if got != want {
					t.Errorf("%v: proxy %q, redis-server %q", args, got, want)
				}
			}
			// The signal: python-redis-lock's release through the proxy,
			// its LPUSH on Redis.
			if got := do(t, cli, "EVAL", pyRedisLockRelease(t), 2, lock, signal, "holder", 1000); got != "0" {
				t.Fatalf("python-redis-lock's release: %s, want 0", got)
			}
			if got := do(t, c.servers[0].Client(t), "LPUSH", signal, 1); got != "1" {
				t.Fatalf("LPUSH on redis-server: %s", got)
			}
			got, want := both(t, "BLPOP", signal, "5")
			if got != want || want != fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$1\r\n1\r\n", len(signal), signal) {
				t.Errorf("BLPOP after the signal: proxy %q, redis-server %q", got, want)
			}
		})
	}
}

// pyRedisLockRelease is python-redis-lock 4.0.1's release script, as it
// sends it.
func pyRedisLockRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../proxy/testdata/scripts/python-redis-lock-4.0.1-release.lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
