package test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"
)

// TestRueidisDefaults: rueidis and valkey-go connect with their default
// options (HELLO 3, CLIENT TRACKING ON OPTIN), and a value they cache
// client-side is invalidated by an acquisition through the same proxy and
// by the release through the other one.
func TestRueidisDefaults(t *testing.T) {
	clientTest(t)
	c, other := twoProxies(t, 3)
	ctx := t.Context()
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.proxy.Addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient with its defaults: %v", err)
	}
	t.Cleanup(ru.Close)
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{c.proxy.Addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("valkey.NewClient with its defaults: %v", err)
	}
	t.Cleanup(vk.Close)

	here := c.proxy.Client(t)
	there := redis.NewClient(&redis.Options{Addr: other.Addr, MaxRetries: -1})
	t.Cleanup(func() { there.Close() })

	cachedGet := func(key string) (string, bool) {
		r := ru.DoCache(ctx, ru.B().Get().Key(key).Cache(), time.Minute)
		v, err := r.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("rueidis DoCache GET %s: %v", key, err)
		}
		return v, r.IsCacheHit()
	}
	// Nothing held: cached as absent.
	if v, _ := cachedGet("job"); v != "" {
		t.Fatalf("GET of a free key: %q", v)
	}
	if _, hit := cachedGet("job"); !hit {
		t.Fatal("the second GET was not served from rueidis's cache")
	}
	// Taken through this proxy: the cached absence is invalidated.
	if err := here.SetNX(ctx, "job", "mine", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, hit := cachedGet("job"); return v == "mine" && !hit })
	if _, hit := cachedGet("job"); !hit {
		t.Fatal("the value read after the invalidation was not cached")
	}
	// Released through the other proxy: invalidated again.
	if n, err := there.Eval(ctx, compareAndDelete, []string{"job"}, "mine").Int(); err != nil || n != 1 {
		t.Fatalf("release through the other proxy: %d, %v", n, err)
	}
	waitFor(t, func() bool { v, _ := cachedGet("job"); return v == "" })

	// valkey-go, the same way.
	vget := func() (string, bool) {
		r := vk.DoCache(ctx, vk.B().Get().Key("vjob").Cache(), time.Minute)
		v, _ := r.ToString()
		return v, r.IsCacheHit()
	}
	vget()
	if err := there.SetNX(ctx, "vjob", "theirs", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := there.Del(ctx, "vjob").Err(); err != nil {
		t.Fatal(err)
	}
	if err := here.SetNX(ctx, "vjob", "mine", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { v, _ := vget(); return v == "mine" })
}

// TestRueidisLockThroughTwoProxies: rueidislock and valkeylock, unchanged,
// through two proxies. A holder keeps its lock past its validity (each
// extension is told back to it as an invalidation, which it waits for);
// a waiter through the other proxy is woken by the invalidation that the
// release sends, long before its own timer would try again.
func TestRueidisLockThroughTwoProxies(t *testing.T) {
	clientTest(t)
	c, other := twoProxies(t, 3)
	const validity = 3 * time.Second
	// A waiter tries again on its own at its extend interval: a long one
	// leaves only the invalidation to wake it in time.
	const retry = 20 * time.Second
	type locker interface {
		WithContext(ctx context.Context, name string) (context.Context, context.CancelFunc, error)
		Close()
	}
	lockers := map[string]func(addr string, validity, interval time.Duration) locker{
		"rueidislock": func(addr string, validity, interval time.Duration) locker {
			l, err := rueidislock.NewLocker(rueidislock.LockerOption{ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
				KeyValidity: validity, ExtendInterval: interval})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		"valkeylock": func(addr string, validity, interval time.Duration) locker {
			l, err := valkeylock.NewLocker(valkeylock.LockerOption{ClientOption: valkey.ClientOption{InitAddress: []string{addr}},
				KeyValidity: validity, ExtendInterval: interval})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	there := redis.NewClient(&redis.Options{Addr: other.Addr, MaxRetries: -1})
	t.Cleanup(func() { there.Close() })
	refusals := func() int {
		info, err := there.Info(t.Context(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if n, ok := strings.CutPrefix(line, "lock_held_elsewhere:"); ok {
				v, _ := strconv.Atoi(n)
				return v
			}
		}
		return 0
	}
	for name, newLocker := range lockers {
		t.Run(name, func(t *testing.T) {
			holder, waiter := newLocker(c.proxy.Addr, validity, validity/3), newLocker(other.Addr, 3*retry, retry)
			t.Cleanup(holder.Close)
			t.Cleanup(waiter.Close)
			held, release, err := holder.WithContext(t.Context(), name)
			if err != nil {
				t.Fatalf("the holder's lock: %v", err)
			}
			// Twice the validity later, it still holds: its extensions
			// went on.
			deadline := time.Now().Add(2 * validity)
			waitFor(t, func() bool { return time.Now().After(deadline) })
			if held.Err() != nil {
				t.Fatalf("the holder lost its lock while extending it: %v", held.Err())
			}
			before := refusals()
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), retry/2)
				defer cancel()
				_, unlock, err := waiter.WithContext(ctx, name)
				if err == nil {
					unlock()
				}
				got <- err
			}()
			// The waiter waits once its first key refused it.
			redistest.Eventually(t, func() string {
				if refusals() > before {
					return ""
				}
				info, _ := there.Info(t.Context(), "stats").Result()
				return "the waiter was not refused yet: " + info
			})
			release()
			if err := <-got; err != nil {
				t.Fatalf("the waiter through the other proxy, before its own retry at %v: %v", retry, err)
			}
		})
	}
}

// TestTrackingRedirectGoRedis: go-redis in RESP2 tracks keys the way
// RESP2 allows, with CLIENT TRACKING ON REDIRECT to its own connection
// subscribed to __redis__:invalidate, and hears there of an acquisition
// through the same proxy and of a release through the other one.
func TestTrackingRedirectGoRedis(t *testing.T) {
	clientTest(t)
	c, other := twoProxies(t, 3)
	ctx := t.Context()
	sinkID := make(chan int64, 1)
	sink := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: 2, MaxRetries: -1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			id, err := cn.ClientID(ctx).Result()
			if err == nil {
				sinkID <- id
			}
			return err
		}})
	t.Cleanup(func() { sink.Close() })
	ps := sink.Subscribe(ctx, "__redis__:invalidate")
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("SUBSCRIBE __redis__:invalidate: %v", err)
	}
	id := <-sinkID
	tracker := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: 2, PoolSize: 1, MaxRetries: -1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err()
		}})
	t.Cleanup(func() { tracker.Close() })
	here := c.proxy.Client(t)
	there := redis.NewClient(&redis.Options{Addr: other.Addr, MaxRetries: -1})
	t.Cleanup(func() { there.Close() })

	invalidated := func(key string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := ps.ReceiveMessage(rctx)
		if err != nil || msg.Channel != "__redis__:invalidate" || len(msg.PayloadSlice) != 1 || msg.PayloadSlice[0] != key {
			t.Fatalf("the invalidation of %s: %+v, %v", key, msg, err)
		}
	}
	if err := tracker.Get(ctx, "job").Err(); err != redis.Nil {
		t.Fatalf("GET of a free key: %v", err)
	}
	if err := here.SetNX(ctx, "job", "mine", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	invalidated("job")
	if v, err := tracker.Get(ctx, "job").Result(); err != nil || v != "mine" {
		t.Fatalf("GET of a held key: %q, %v", v, err)
	}
	if n, err := there.Eval(ctx, compareAndDelete, []string{"job"}, "mine").Int(); err != nil || n != 1 {
		t.Fatalf("release through the other proxy: %d, %v", n, err)
	}
	invalidated("job")
}

// waitFor polls cond until it holds, failing the test if it never does.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, func() string {
		if cond() {
			return ""
		}
		return "not yet"
	})
}
