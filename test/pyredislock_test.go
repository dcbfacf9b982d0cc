package test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// python-redis-lock through the proxy beyond the compatibility suite's
// rows (TestCompatPyPI runs its contention and scenario): a waiter woken
// across proxies, what expire=None gets, and BLPOP's bytes beside a real
// redis-server's.

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

// TestPyRedisLockNoExpire: Lock(expire=None) sends SET NX without an
// expiry, which lockproxy refuses (a lock without a TTL would never
// expire; session-bound locks are issue 17): acquire raises redis-py's
// ResponseError with the proxy's reason, where one redis-server grants it.
func TestPyRedisLockNoExpire(t *testing.T) {
	c := newCluster(t, 3)
	out, err := pyRedisLock(t, "noexpire", c.proxy.Addr)
	if err != nil {
		t.Fatalf("noexpire: %v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "ResponseError: ") || !strings.Contains(out, "TTL") {
		t.Fatalf("Lock(expire=None).acquire() through the proxy: %q, want a ResponseError naming the missing TTL", out)
	}
	t.Logf("through the proxy: %s", strings.TrimSpace(out))
	if got := do(t, c.proxy.Client(t), "EXISTS", "lock:compat:noexpire"); got != "0" {
		t.Fatalf("EXISTS after the refused acquire: %s", got)
	}
	reference, err := pyRedisLock(t, "noexpire", c.servers[0].Addr())
	if err != nil || strings.TrimSpace(reference) != "acquired: True" {
		t.Fatalf("on one redis-server: %q, %v; want acquired: True", reference, err)
	}
}

// TestBLPopLikeRedis compares BLPOP's replies through the proxy with a
// real redis-server's, byte for byte, in RESP2 and RESP3: the element when
// the signal comes (a release through the proxy, an LPUSH on Redis), the
// nil array at the timeout, and the errors of bad timeouts and arity.
func TestBLPopLikeRedis(t *testing.T) {
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
