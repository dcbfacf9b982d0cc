package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// waitInfo reads one field of the proxy's INFO waits.
func waitInfo(t *testing.T, cli *redis.Client, field string) int {
	t.Helper()
	info, err := cli.Info(t.Context(), "waits").Result()
	if err != nil {
		t.Fatalf("INFO waits: %v", err)
	}
	m := regexp.MustCompile(field + `:(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("INFO waits has no %s:\n%s", field, info)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// awaitWaiters waits until the proxy counts n waiters.
func awaitWaiters(t *testing.T, cli *redis.Client, n int) {
	t.Helper()
	redistest.Eventually(t, func() string {
		if got := waitInfo(t, cli, "waiters"); got != n {
			return fmt.Sprintf("the proxy counts %d waiters, want %d", got, n)
		}
		return ""
	})
}

// clusterHolding is a cluster over 3 backends whose key is held by the
// token "holder" for 30 s, and a client of its proxy.
func clusterHolding(t *testing.T, key string) (*cluster, *redis.Client) {
	t.Helper()
	c := newCluster(t, 3)
	cli := c.proxy.Client(t)
	if got := do(t, cli, "SET", key, "holder", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("SET NX: %q", got)
	}
	return c, cli
}

// twoProxies is a cluster and a second proxy over the same backends.
func twoProxies(t *testing.T, n int) (*cluster, *proxyProcess) {
	t.Helper()
	c := newCluster(t, n)
	urls := make([]string, n)
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	b := startProxy(t, "-backends", strings.Join(urls, ","), "-restart-quarantine=false", "-backend-timeout", "500ms")
	return c, b
}

// TestWaitThroughClients: LOCK.ACQUIRE ... WAIT through go-redis's Do,
// redis-py's execute_command and redis-cli, each waiting on one proxy for
// a lock held through the other: granted once the holder releases, and
// nil when the wait runs out first.
func TestWaitThroughClients(t *testing.T) {
	proxyTest(t)
	c, b := twoProxies(t, 3)
	ctx := t.Context()
	holder, onB := c.proxy.Client(t), b.Client(t)
	host, port, _ := strings.Cut(b.Addr, ":")
	// A client for waiting: its reads outlast WAIT.
	waiter := redis.NewClient(&redis.Options{Addr: b.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { waiter.Close() })

	clients := map[string]func(key, token string, wait int) (string, error){
		"go-redis": func(key, token string, wait int) (string, error) {
			v, err := waiter.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", 30000, "WAIT", wait).Result()
			if err == redis.Nil {
				return "nil", nil
			}
			return fmt.Sprint(v), err
		},
		"redis-py": func(key, token string, wait int) (string, error) {
			out, err := exec.Command(debianPython, "-c", `import redis, sys
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
v = r.execute_command("LOCK.ACQUIRE", sys.argv[3], sys.argv[4], "PX", 30000, "WAIT", int(sys.argv[5]))
print("nil" if v is None else v.decode())`, host, port, key, token, strconv.Itoa(wait)).CombinedOutput()
			return strings.TrimSpace(string(out)), err
		},
		"redis-cli": func(key, token string, wait int) (string, error) {
			out, err := exec.Command("redis-cli", "-h", host, "-p", port, "LOCK.ACQUIRE", key, token, "PX", "30000", "WAIT", strconv.Itoa(wait)).CombinedOutput()
			s := strings.TrimSpace(string(out))
			if s == "" {
				s = "nil" // redis-cli prints a nil reply as an empty line when not on a terminal
			}
			return s, err
		},
	}
	for name, acquire := range clients {
		t.Run(name, func(t *testing.T) {
			key := "wait:" + name
			if got := do(t, holder, "SET", key, "holder", "NX", "PX", 30000); got != "OK" {
				t.Fatalf("SET NX: %q", got)
			}
			// Held: the wait runs out.
			if got, err := acquire(key, "late", 300); err != nil || got != "nil" {
				t.Fatalf("LOCK.ACQUIRE while held, WAIT 300: %q, %v; want nil", got, err)
			}
			type answer struct {
				got string
				err error
			}
			done := make(chan answer, 1)
			go func() {
				got, err := acquire(key, "next", 20000)
				done <- answer{got, err}
			}()
			awaitWaiters(t, onB, 1)
			if got := do(t, holder, "EVAL", compareAndDelete, 1, key, "holder"); got != "1" {
				t.Fatalf("release: %q", got)
			}
			a := <-done
			if a.err != nil || a.got != "OK" {
				t.Fatalf("LOCK.ACQUIRE after the release through the other proxy: %q, %v; want OK", a.got, a.err)
			}
			if got := do(t, holder, "GET", key); got != "next" {
				t.Fatalf("GET after the wait: %q, want the waiter's token", got)
			}
			do(t, holder, "EVAL", compareAndDelete, 1, key, "next")
		})
	}
	if got := waitInfo(t, onB, "wait_grants"); got != 3 {
		t.Errorf("wait_grants %d, want 3", got)
	}
	if got := waitInfo(t, onB, "wait_timeouts"); got != 3 {
		t.Errorf("wait_timeouts %d, want 3", got)
	}
	// Bad input is refused, and the connection lives on.
	for _, args := range [][]any{
		{"LOCK.ACQUIRE", "k", "t"},
		{"LOCK.ACQUIRE", "k", "t", "WAIT", 10},
		{"LOCK.ACQUIRE", "k", "t", "PX", 100, "WAIT", -1},
		{"LOCK.ACQUIRE", "k", "t", "PX", 100, "WAIT", "soon"},
		{"LOCK.ACQUIRE", "k", "t", "PX", 100, "EX", 1},
		{"LOCK.ACQUIRE", "k", "t", "PX", 0},
		{"LOCK.ACQUIRE", "k", "t", "PX", 100, "NX"},
	} {
		if err := holder.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR ") {
			t.Errorf("%v: %v, want an ERR reply", args, err)
		}
	}
	if got := do(t, holder, "PING"); got != "PONG" {
		t.Errorf("PING after the refusals: %q", got)
	}
}

// TestWaitHolderDies: a holder that never releases; the waiter is granted
// once the holder's TTL has run out, not before, and not at its own
// deadline.
// The TTL is timed from before the SET is sent: no backend can have
// started the holder's TTL earlier, so a grant sooner than the TTL after
// it is early however late the OK comes back on a loaded machine (timed
// from the OK, the grant once seemed early).
func TestWaitHolderDies(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	cli := c.proxy.Client(t)
	waiter := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { waiter.Close() })
	const ttl = time.Second
	sent := time.Now()
	if got := do(t, cli, "SET", "orphan", "dead", "NX", "PX", ttl.Milliseconds()); got != "OK" {
		t.Fatalf("SET NX: %q", got)
	}
	if err := waiter.Do(t.Context(), "LOCK.ACQUIRE", "orphan", "heir", "PX", 30000, "WAIT", 20000).Err(); err != nil {
		t.Fatalf("LOCK.ACQUIRE: %v", err)
	}
	after := time.Since(sent)
	if after < ttl {
		t.Fatalf("granted %v after a %v lock was asked for", after, ttl)
	}
	if after > 15*time.Second {
		t.Fatalf("granted only %v after a %v lock was asked for: not by the holder's timer", after, ttl)
	}
	t.Logf("granted %v after the orphaned %v lock was asked for", after, ttl)
}

// TestWaitClientGone: a waiter whose client closes its connection leaves
// the line at once; the lock goes to the next waiter, never to the gone
// one.
func TestWaitClientGone(t *testing.T) {
	proxyTest(t)
	c, cli := clusterHolding(t, "door")
	gone, err := net.Dial("tcp", c.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(gone, "*7\r\n$12\r\nLOCK.ACQUIRE\r\n$4\r\ndoor\r\n$4\r\ngone\r\n$2\r\nPX\r\n$5\r\n30000\r\n$4\r\nWAIT\r\n$5\r\n20000\r\n")
	awaitWaiters(t, cli, 1)
	waiter := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { waiter.Close() })
	done := make(chan error, 1)
	go func() {
		done <- waiter.Do(context.Background(), "LOCK.ACQUIRE", "door", "stays", "PX", 30000, "WAIT", 20000).Err()
	}()
	awaitWaiters(t, cli, 2)
	gone.Close()
	awaitWaiters(t, cli, 1)
	if got := waitInfo(t, cli, "wait_gone"); got != 1 {
		t.Fatalf("wait_gone %d, want 1", got)
	}
	if got := do(t, cli, "EVAL", compareAndDelete, 1, "door", "holder"); got != "1" {
		t.Fatalf("release: %q", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter behind the gone one: %v", err)
	}
	if got := do(t, cli, "GET", "door"); got != "stays" {
		t.Fatalf("GET: %q, want the live waiter's token", got)
	}
}

// TestWaitPipelinedBehind: commands a client pipelines behind a waiting
// LOCK.ACQUIRE are served after it, in order.
func TestWaitPipelinedBehind(t *testing.T) {
	proxyTest(t)
	c, cli := clusterHolding(t, "line")
	conn, err := net.Dial("tcp", c.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "*7\r\n$12\r\nLOCK.ACQUIRE\r\n$4\r\nline\r\n$4\r\nnext\r\n$2\r\nPX\r\n$5\r\n30000\r\n$4\r\nWAIT\r\n$5\r\n20000\r\n")
	awaitWaiters(t, cli, 1)
	// Sent while it waits: read by the watch, served after.
	fmt.Fprintf(conn, "*2\r\n$3\r\nGET\r\n$4\r\nline\r\n*1\r\n$4\r\nPING\r\n")
	if got := do(t, cli, "EVAL", compareAndDelete, 1, "line", "holder"); got != "1" {
		t.Fatalf("release: %q", got)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	var lines []string
	for len(lines) < 4 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", lines, err)
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	if want := []string{"+OK", "$4", "next", "+PONG"}; fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("replies %q, want %q", lines, want)
	}
}

// TestWaitContention: workers on two proxies take one key with
// LOCK.ACQUIRE ... WAIT and hold it briefly, with all backends up and
// then with one killed: no two ever hold it at once, and every one keeps
// getting it.
func TestWaitContention(t *testing.T) {
	proxyTest(t)
	c, b := twoProxies(t, 3)
	const workers = 8
	var (
		holding  atomic.Int32
		overlaps atomic.Int32
		cycles   [2]atomic.Int64 // before and after the kill
		phase    atomic.Int32
		wg       sync.WaitGroup
	)
	ctx, stop := context.WithCancel(t.Context())
	for w := range workers {
		addr := c.proxy.Addr
		if w%2 == 1 {
			addr = b.Addr
		}
		cli := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { cli.Close() })
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				token := fmt.Sprintf("w%d-%d", w, n)
				err := cli.Do(ctx, "LOCK.ACQUIRE", "contended", token, "PX", 5000, "WAIT", 10000).Err()
				if err != nil {
					if ctx.Err() == nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "NOQUORUM") {
						t.Errorf("worker %d: %v", w, err)
					}
					continue
				}
				if holding.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				cycles[phase.Load()].Add(1)
				cli.Do(context.Background(), "EVAL", compareAndDelete, 1, "contended", token)
			}
		})
	}
	started := time.Now()
	redistest.Eventually(t, func() string {
		if n := cycles[0].Load(); n < 200 {
			return fmt.Sprintf("%d cycles with all backends up", n)
		}
		return ""
	})
	t.Logf("%d cycles with all backends up in %v", cycles[0].Load(), time.Since(started))
	c.servers[0].Kill()
	phase.Store(1)
	started = time.Now()
	redistest.Eventually(t, func() string {
		if n := cycles[1].Load(); n < 200 {
			return fmt.Sprintf("%d cycles with one backend killed", n)
		}
		return ""
	})
	t.Logf("%d cycles with one backend killed in %v", cycles[1].Load(), time.Since(started))
	stop()
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times two workers held the lock at once", n)
	}
}

// TestWaitShutdown: a proxy told to stop (SIGTERM) ends its waits at once
// with the shutting-down error, rather than draining until their WAIT runs
// out, and exits.
func TestWaitShutdown(t *testing.T) {
	proxyTest(t)
	c, cli := clusterHolding(t, "closing")
	waiter := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, MaxRetries: -1, ReadTimeout: time.Minute})
	t.Cleanup(func() { waiter.Close() })
	done := make(chan error, 1)
	go func() {
		done <- waiter.Do(context.Background(), "LOCK.ACQUIRE", "closing", "w", "PX", 30000, "WAIT", 60000).Err()
	}()
	awaitWaiters(t, cli, 1)
	c.proxy.Signal(t, syscall.SIGTERM)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("the waiter got %v, want the shutting-down error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the wait outlived the shutdown by 20 s")
	}
	select {
	case <-c.proxy.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the proxy did not exit")
	}
}

// TestWaitClientReadTimeout: a go-redis client left at its default 3 s
// ReadTimeout gives up on a longer WAIT and drops its connection; the
// proxy takes it out of the line, and grants nothing to it.
func TestWaitClientReadTimeout(t *testing.T) {
	proxyTest(t)
	c, cli := clusterHolding(t, "slow")
	defaults := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { defaults.Close() })
	err := defaults.Do(t.Context(), "LOCK.ACQUIRE", "slow", "impatient", "PX", 30000, "WAIT", 20000).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("LOCK.ACQUIRE WAIT 20000 with go-redis's default ReadTimeout: %v, want its read timeout", err)
	}
	awaitWaiters(t, cli, 0)
	if got := waitInfo(t, cli, "wait_gone"); got != 1 {
		t.Fatalf("wait_gone %d, want 1", got)
	}
	if got := do(t, cli, "EVAL", compareAndDelete, 1, "slow", "holder"); got != "1" {
		t.Fatalf("release: %q", got)
	}
	if _, err := cli.Get(t.Context(), "slow").Result(); err != redis.Nil {
		t.Fatalf("GET after the release: %v, want nil: nothing granted to the gone waiter", err)
	}
}
