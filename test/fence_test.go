package test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// TestFenceThroughClients: FENCE through go-redis's Do, redis-py's
// execute_command and redis-cli answers the holder's fencing token, nil to
// another token and after the release, and NOQUORUM with a majority down;
// CLIENT FENCING ON makes LOCK.ACQUIRE answer the token itself, and leaves
// SET NX answering OK, which redis-py's Lock and go-redis's SetNX need; the
// next holder's token is larger.
func TestFenceThroughClients(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 5, "-fencing")
	ctx := t.Context()
	cli := c.proxy.Client(t)

	if got := do(t, cli, "SET", "job", "first", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("SET NX: %q", got)
	}
	first, err := cli.Do(ctx, "FENCE", "job", "first").Int64()
	if err != nil || first <= 0 {
		t.Fatalf("go-redis FENCE: %d, %v", first, err)
	}
	if got := redisCLI(t, c.proxy.Addr, "FENCE", "job", "first"); got != strconv.FormatInt(first, 10) {
		t.Errorf("redis-cli FENCE: %q, want %d", got, first)
	}
	py := exec.Command(debianPython, "-c", `import redis, sys
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
print(r.execute_command("FENCE", "job", "first"), r.execute_command("FENCE", "job", "someone"))`,
		strings.Split(c.proxy.Addr, ":")[0], strings.Split(c.proxy.Addr, ":")[1])
	if out, err := py.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != strconv.FormatInt(first, 10)+" None" {
		t.Errorf("redis-py execute_command FENCE: %q, %v; want %d None", out, err, first)
	}
	if _, err := cli.Do(ctx, "FENCE", "job", "someone").Result(); err != redis.Nil {
		t.Errorf("FENCE by another token: %v, want nil", err)
	}

	// Opted in, LOCK.ACQUIRE answers the token; released and taken again,
	// the token is larger.
	opted := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, MaxRetries: -1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "CLIENT", "FENCING", "ON").Err() }})
	t.Cleanup(func() { opted.Close() })
	if n, err := opted.Do(ctx, "LOCK.ACQUIRE", "job", "second", "PX", 30000).Result(); err != redis.Nil {
		t.Fatalf("LOCK.ACQUIRE while held, fencing on: %v, %v; want nil", n, err)
	}
	if got := do(t, cli, "EVAL", compareAndDelete, 1, "job", "first"); got != "1" {
		t.Fatalf("release: %q", got)
	}
	if _, err := cli.Do(ctx, "FENCE", "job", "first").Result(); err != redis.Nil {
		t.Errorf("FENCE after the release: %v, want nil", err)
	}
	second, err := opted.Do(ctx, "LOCK.ACQUIRE", "job", "second", "PX", 30000).Int64()
	if err != nil || second <= first {
		t.Fatalf("LOCK.ACQUIRE with fencing on: %d, %v; want a token above %d", second, err, first)
	}
	// A typed SetNX on the same opted-in connections reads its grant.
	if ok, err := opted.SetNX(ctx, "job:typed", "mine", 30*time.Second).Result(); err != nil || !ok {
		t.Errorf("go-redis SetNX with fencing on: %v, %v; want true", ok, err)
	}
	// And redis-py's Lock, on a connection opted in: acquire() is True, and
	// the token comes from FENCE, or from LOCK.ACQUIRE in one round trip.
	py = exec.Command(debianPython, "-c", `import redis, sys
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), single_connection_client=True)
r.execute_command("CLIENT", "FENCING", "ON")
lock = r.lock("job:py", timeout=30)
print(lock.acquire(blocking=False), r.execute_command("FENCE", "job:py", lock.local.token) > 0,
      r.execute_command("LOCK.ACQUIRE", "job:py2", "t", "PX", 30000) > 0)`,
		strings.Split(c.proxy.Addr, ":")[0], strings.Split(c.proxy.Addr, ":")[1])
	if out, err := py.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "True True True" {
		t.Errorf("redis-py Lock with fencing on: %q, %v; want True True True", out, err)
	}
	if got, err := cli.Do(ctx, "FENCE", "job", "second").Int64(); err != nil || got != second {
		t.Errorf("FENCE of the second holder: %d, %v; want %d", got, err, second)
	}

	info := redisCLI(t, c.proxy.Addr, "INFO", "backends")
	// The backends were new to fencing: each was re-seeded from the others
	// at the start.
	if want := "fencing_tokens:5\nfencing_write_backs:0\nfencing_reseeds:5\n"; !strings.Contains(strings.ReplaceAll(info, "\r\n", "\n"), want) {
		t.Errorf("INFO backends does not count the five tokens minted and the five re-seeds:\n%s", info)
	}
	for _, s := range c.servers[:3] {
		s.Kill()
	}
	if _, err := cli.Do(ctx, "FENCE", "job", "second").Result(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM ") {
		t.Errorf("FENCE with a majority down: %v, want NOQUORUM", err)
	}
}

// TestFenceOff: without -fencing, CLIENT FENCING ON says so and FENCE
// answers nil: no lock has a token.
func TestFenceOff(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	cli := c.proxy.Client(t)
	if got := do(t, cli, "CLIENT", "FENCING", "ON"); got != "ERR:ERR fencing is off: set fencing = true on every lockproxy of this deployment" {
		t.Errorf("CLIENT FENCING ON with fencing off: %q", got)
	}
	if got := do(t, cli, "SET", "job", "me", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("SET NX: %q", got)
	}
	if got := do(t, cli, "FENCE", "job", "me"); got != "nil" {
		t.Errorf("FENCE with fencing off: %q, want nil", got)
	}
	if info := redisCLI(t, c.proxy.Addr, "INFO", "backends"); strings.Contains(info, "fencing_tokens") {
		t.Errorf("INFO backends shows fencing counters with fencing off:\n%s", info)
	}
}

// TestFenceThroughLockLibraries: locks taken by lock libraries' own scripts
// get a fencing token too, read with FENCE key value: bsm/redislock's
// obtain (acquire-or-renew) and its refresh keep it; redsync's extension
// with WithSetNXOnExtend (extend-or-acquire) keeps it; the next
// acquisition's token is larger.
func TestFenceThroughLockLibraries(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-fencing")
	ctx := t.Context()
	cli := c.proxy.Client(t)
	fence := func(key, value string) int64 {
		t.Helper()
		n, err := cli.Do(ctx, "FENCE", key, value).Int64()
		if err != nil || n <= 0 {
			t.Fatalf("FENCE %s %s: %d, %v", key, value, n, err)
		}
		return n
	}

	lock, err := redislock.New(cli).Obtain(ctx, "bsm", 10*time.Second, &redislock.Options{Metadata: ":meta"})
	if err != nil {
		t.Fatal(err)
	}
	obtained := fence("bsm", lock.Token()+lock.Metadata())
	if err := lock.Refresh(ctx, 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if got := fence("bsm", lock.Token()+lock.Metadata()); got != obtained {
		t.Errorf("after the refresh: token %d, want %d", got, obtained)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	mutex := redsync.New(redsyncgoredis.NewPool(cli)).NewMutex("redsync", redsync.WithExpiry(10*time.Second), redsync.WithSetNXOnExtend())
	if err := mutex.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	locked := fence("redsync", mutex.Value())
	if locked <= obtained {
		t.Errorf("redsync's token %d is not above the one before, %d", locked, obtained)
	}
	if ok, err := mutex.ExtendContext(ctx); !ok || err != nil {
		t.Fatalf("redsync extend: %v, %v", ok, err)
	}
	if got := fence("redsync", mutex.Value()); got != locked {
		t.Errorf("after redsync's extension: token %d, want %d", got, locked)
	}
}
