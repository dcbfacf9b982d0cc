package test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redissonScript reads one of Redisson's scripts, byte for byte as it
// sends it (proxy/testdata/scripts).
func redissonScript(t *testing.T, file string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("../proxy/testdata/scripts/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// TestRedissonWire runs Redisson 4.7's RLock commands, as it sends them,
// through two proxies on five real backends: re-entry and hold counts, the
// reads, a release by a non-owner, the latch of a retried release, the
// batched watchdog, forceUnlock, and the unlock message on
// redisson_lock__channel:{name} that a subscriber on the other proxy
// hears once per release (and not for a release that leaves holds).
// TestRedisson* in compat_redisson_test.go runs the real Redisson.
func TestRedissonWire(t *testing.T) {
	clientTest(t)
	c, b := twoProxies(t, 5)
	ctx := t.Context()
	a, other := c.proxy.Client(t), b.Client(t)
	acquire := redissonScript(t, "redisson-4.7.0-acquire.lua")
	release := redissonScript(t, "redisson-4.7.0-release.lua")
	force := redissonScript(t, "redisson-4.7.0-forceunlock.lua")
	watchdog := redissonScript(t, "redisson-4.7.0-renew-watchdog-multikey.lua")

	const name, me, them = "orders", "uuid-a:1", "uuid-b:7"
	channel := "redisson_lock__channel:{" + name + "}"
	sub := other.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	messages := sub.Channel()

	take := func(cl *redis.Client, owner string) (any, error) {
		return acquire.Run(ctx, cl, []string{name}, 30000, owner).Result()
	}
	leave := func(cl *redis.Client, owner, latch string) (any, error) {
		return release.Run(ctx, cl, []string{name, channel, "redisson_unlock_latch:{" + name + "}:" + latch},
			0, 30000, owner, "PUBLISH", 13500).Result()
	}
	if _, err := take(a, me); err != redis.Nil {
		t.Fatalf("first acquisition: %v, want null (taken)", err)
	}
	if _, err := take(a, me); err != redis.Nil {
		t.Fatalf("re-entry: %v, want null (taken)", err)
	}
	if n, err := other.HGet(ctx, name, me).Int(); err != nil || n != 2 {
		t.Fatalf("HGET (getHoldCount) through the other proxy: %d, %v; want 2", n, err)
	}
	if ok, err := other.HExists(ctx, name, me).Result(); err != nil || !ok {
		t.Fatalf("HEXISTS (isHeldByThread): %v, %v; want true", ok, err)
	}
	if ok, err := other.HExists(ctx, name, them).Result(); err != nil || ok {
		t.Fatalf("HEXISTS of another thread: %v, %v; want false", ok, err)
	}
	if _, err := other.HGet(ctx, name, them).Result(); err != redis.Nil {
		t.Fatalf("HGET of another thread: %v, want null", err)
	}
	if n, err := other.Exists(ctx, name).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS (isLocked): %d, %v; want 1", n, err)
	}
	if d, err := other.PTTL(ctx, name).Result(); err != nil || d <= 25*time.Second || d > 30*time.Second {
		t.Fatalf("PTTL (remainTimeToLive): %v, %v; want the lease left, about 30 s", d, err)
	}
	wait, err := take(other, them)
	if ms, ok := wait.(int64); err != nil || !ok || ms <= 25000 || ms > 30000 {
		t.Fatalf("another thread's acquisition: %v, %v; want the holder's PTTL", wait, err)
	}
	if _, err := leave(other, them, "00"); err != redis.Nil {
		t.Fatalf("a release by a thread that holds nothing: %v, want null (IllegalMonitorStateException)", err)
	}
	if n, err := leave(a, me, "01"); err != nil || n != int64(0) {
		t.Fatalf("leaving one of two holds: %v, %v; want 0", n, err)
	}
	// A retry of the same request, with its latch, does not leave again.
	if n, err := leave(a, me, "01"); err != nil || n != int64(0) {
		t.Fatalf("the same release again: %v, %v; want 0 (its latch)", n, err)
	}
	if n, err := other.HGet(ctx, name, me).Int(); err != nil || n != 1 {
		t.Fatalf("hold count after one release, retried: %d, %v; want 1", n, err)
	}
	renewed, err := watchdog.Run(ctx, a, []string{name, "idle"}, 30000, me, me).Int64Slice()
	if err != nil || len(renewed) != 2 || renewed[0] != 1 || renewed[1] != 0 {
		t.Fatalf("watchdog batch: %v, %v; want [1 0] (held, and a lock nobody holds)", renewed, err)
	}
	select {
	case m := <-messages:
		t.Fatalf("an unlock message while the lock is still held: %+v", m)
	default:
	}
	start := time.Now()
	if n, err := leave(a, me, "02"); err != nil || n != int64(1) {
		t.Fatalf("the last hold: %v, %v; want 1 (released)", n, err)
	}
	select {
	case m := <-messages:
		if m.Channel != channel || m.Payload != "0" {
			t.Fatalf("unlock message %+v, want 0 on %s", m, channel)
		}
		t.Logf("the unlock message reached the other proxy's subscriber %v after the release was sent", time.Since(start).Round(time.Microsecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no unlock message on the other proxy")
	}
	if n, err := other.Exists(ctx, name).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after the release: %d, %v; want 0", n, err)
	}

	// forceUnlock: the other thread takes it, and an administrator frees it.
	if _, err := take(other, them); err != redis.Nil {
		t.Fatalf("the other thread's acquisition of the free lock: %v", err)
	}
	if n, err := force.Run(ctx, a, []string{name, channel}, 0, "PUBLISH").Int(); err != nil || n != 1 {
		t.Fatalf("forceUnlock of a held lock: %d, %v; want 1", n, err)
	}
	select {
	case m := <-messages:
		if m.Payload != "0" {
			t.Fatalf("forceUnlock's message %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no unlock message for forceUnlock")
	}
	if n, err := force.Run(ctx, a, []string{name, channel}, 0, "PUBLISH").Int(); err != nil || n != 0 {
		t.Fatalf("forceUnlock of a free lock: %d, %v; want 0", n, err)
	}
	for i, s := range c.servers {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := s.Client(t).Exists(cctx, name).Result()
		cancel()
		if err != nil || n != 0 {
			t.Errorf("backend %d still has the lock: %d, %v", i, n, err)
		}
	}
}

// TestRedissonFencedWire runs Redisson's RFencedLock commands, byte for
// byte, through two fencing proxies on five backends: the tokens that
// lockAndGetToken answers strictly increase across owners and proxies, a
// re-entry answers its lock's token, getToken's GET of
// redisson_lock_token:{name} answers the holder's token through either
// proxy (null once released), and a lock() by another owner waits. Its
// unlock is RLock's release script.
func TestRedissonFencedWire(t *testing.T) {
	clientTest(t)
	c, b := twoProxiesWith(t, 5, "-fencing")
	ctx := t.Context()
	proxies := []*redis.Client{c.proxy.Client(t), b.Client(t)}
	acquireToken := redissonScript(t, "redisson-4.7.0-fencedlock-acquire-token.lua")
	acquire := redissonScript(t, "redisson-4.7.0-fencedlock-acquire.lua")
	release := redissonScript(t, "redisson-4.7.0-release.lua")
	const name = "fenced"
	keys := []string{name, "redisson_lock_token:{" + name + "}"}
	unlock := func(cl *redis.Client, owner string, n int) {
		t.Helper()
		_, err := release.Run(ctx, cl, []string{name, "redisson_lock__channel:{" + name + "}", fmt.Sprintf("redisson_unlock_latch:{%s}:%d", name, n)},
			0, 30000, owner, "PUBLISH", 13500).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	var last int64
	for i := range 6 {
		cl, other := proxies[i%2], proxies[(i+1)%2]
		owner := fmt.Sprintf("client-%d:1", i%3)
		pair, err := acquireToken.Run(ctx, cl, keys, 30000, owner).Int64Slice()
		if err != nil || len(pair) != 2 || pair[0] != -1 {
			t.Fatalf("lockAndGetToken %d: %v, %v; want [-1 token]", i, pair, err)
		}
		token := pair[1]
		if token <= last {
			t.Fatalf("holding %d got token %d, not above the last holder's %d", i, token, last)
		}
		last = token
		// The acquisition was answered at a quorum; the other proxy's
		// re-entry must find it on every backend, not race its
		// stragglers (where it would take the lock afresh, and answer
		// the larger token minted there, as designed).
		heldEverywhere(t, c, name, owner)
		// Re-entry: the same lock, the same token.
		if again, err := acquireToken.Run(ctx, other, keys, 30000, owner).Int64Slice(); err != nil || again[0] != -1 || again[1] != token {
			t.Fatalf("re-entry through the other proxy: %v, %v; want [-1 %d]", again, err, token)
		}
		// getToken through either proxy.
		for _, p := range proxies {
			if got, err := p.Get(ctx, keys[1]).Int64(); err != nil || got != token {
				t.Fatalf("getToken: %d, %v; want %d", got, err, token)
			}
		}
		// Another owner is told to wait, by either script.
		if wait, err := acquire.Run(ctx, other, keys, 30000, "intruder:9").Int64(); err != nil || wait <= 0 {
			t.Fatalf("lock() by another owner: %d, %v; want the holder's PTTL", wait, err)
		}
		if pair, err := acquireToken.Run(ctx, other, keys, 30000, "intruder:9").Int64Slice(); err != nil || pair[0] <= 0 || pair[1] != -1 {
			t.Fatalf("lockAndGetToken by another owner: %v, %v; want [PTTL -1]", pair, err)
		}
		unlock(cl, owner, 2*i)
		unlock(other, owner, 2*i+1)
	}
	if _, err := proxies[0].Get(ctx, keys[1]).Result(); err != redis.Nil {
		t.Fatalf("getToken of a free lock: %v, want null", err)
	}
	// lock() without the token still mints one: the next holder's is above.
	if _, err := acquire.Run(ctx, proxies[1], keys, 30000, "plain:1").Result(); err != redis.Nil {
		t.Fatalf("lock(): %v, want null (taken)", err)
	}
	if got, err := proxies[0].Get(ctx, keys[1]).Int64(); err != nil || got <= last {
		t.Fatalf("getToken after lock(): %d, %v; want above %d", got, err, last)
	}
}

// heldEverywhere waits until every backend of c holds the hash lock name
// for owner.
func heldEverywhere(t *testing.T, c *cluster, name, owner string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i, s := range c.servers {
		for {
			held, err := s.Client(t).HExists(t.Context(), name, owner).Result()
			if err == nil && held {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("backend %d does not hold %s for %s: %v, %v", i, name, owner, held, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestRedissonSplitWire: with one of five backends down, a rival's copies
// of an RLock on two of the four left split Redisson's acquisition two
// and two. The lock is nobody's, and no unlock message will come: the
// proxy tries once more, and then tells Redisson to try again within
// milliseconds, not to wait out the rival's 60 s lease. One refused by
// the rival's copies on a quorum waits out that lease.
func TestRedissonSplitWire(t *testing.T) {
	clientTest(t)
	c := newCluster(t, 5, "-metrics", "127.0.0.1:0")
	base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
	c.servers[0].Kill()
	ctx := t.Context()
	acquire := redissonScript(t, "redisson-4.7.0-acquire.lua")
	rival := func(name string, backends ...int) {
		for _, i := range backends {
			d := c.servers[i].Client(t)
			if err := d.HSet(ctx, name, "uuid-rival:1", 1).Err(); err != nil {
				t.Fatal(err)
			}
			if err := d.PExpire(ctx, name, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rival("split", 1, 2)
	wait, err := acquire.Run(ctx, c.proxy.Client(t), []string{"split"}, 30000, "uuid-me:1").Result()
	if ms, ok := wait.(int64); err != nil || !ok || ms < 10 || ms > 40 {
		t.Fatalf("acquisition split two and two: %v, %v; want a wait of 10 to 40 ms", wait, err)
	}
	m := scrape(t, base)
	if got := m["lockproxy_split_retries_total"]; got != 1 {
		t.Errorf("lockproxy_split_retries_total = %v, want 1", got)
	}
	if got := m["lockproxy_split_retries_granted_total"]; got != 0 {
		t.Errorf("lockproxy_split_retries_granted_total = %v, want 0", got)
	}
	for _, i := range []int{3, 4} {
		redistest.Eventually(t, func() string {
			if n, err := c.servers[i].Client(t).Exists(ctx, "split").Result(); err != nil || n != 0 {
				return fmt.Sprintf("backend %d keeps the split attempt: %d, %v", i, n, err)
			}
			return ""
		})
	}

	rival("held", 1, 2, 3)
	wait, err = acquire.Run(ctx, c.proxy.Client(t), []string{"held"}, 30000, "uuid-me:1").Result()
	if ms, ok := wait.(int64); err != nil || !ok || ms <= 50000 || ms > 60000 {
		t.Fatalf("acquisition refused by a quorum: %v, %v; want the rival's lease left, about 60 s", wait, err)
	}
	if got := scrape(t, base)["lockproxy_split_retries_total"]; got != 1 {
		t.Errorf("lockproxy_split_retries_total = %v after a refusal by a quorum, want still 1", got)
	}
}
