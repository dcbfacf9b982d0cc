package test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestPreheldOnMajority: a key held by someone else on 3 of 5 backends gives
// nil, and the acquisition leaves no trace on the other 2.
func TestPreheldOnMajority(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 5)
	for _, s := range c.servers[:3] {
		s.Client(t).Set(t.Context(), "k", "other", time.Minute)
	}
	if got := do(t, c.proxy.Client(t), "SET", "k", "me", "NX", "PX", 30000); got != "nil" {
		t.Fatalf("expected nil, got %q", got)
	}
	redistest.Eventually(t, func() string {
		if held := c.held(t, "k"); !slices.Equal(held, []string{"other", "other", "other", "", ""}) {
			return fmt.Sprintf("backends hold %q after a failed acquisition", held)
		}
		return ""
	})
}

// TestBackendFaults walks through the faults of the acceptance list on one
// proxy over 5 backends, checking PING is answered throughout.
func TestBackendFaults(t *testing.T) {
	proxyTest(t)
	const timeout = 300 * time.Millisecond
	c := newCluster(t, 5, "-backend-timeout", timeout.String())
	cli := c.proxy.Client(t)
	acquire := func(key string) (string, time.Duration) {
		start := time.Now()
		got := do(t, cli, "SET", key, "me", "NX", "PX", 30000)
		return got, time.Since(start)
	}
	ping := func(when string) {
		if got := do(t, cli, "PING"); got != "PONG" {
			t.Errorf("%s: PING got %q", when, got)
		}
	}

	t.Run("one paused backend does not slow acquisitions", func(t *testing.T) {
		c.servers[4].Pause()
		defer c.servers[4].Resume()
		for i := range 10 {
			got, took := acquire(fmt.Sprintf("paused:%d", i))
			if got != "OK" || took >= timeout {
				t.Fatalf("acquisition %d with one paused backend: %q in %s (backend timeout %s)", i, got, took, timeout)
			}
		}
		ping("one paused")
	})

	t.Run("two of five killed still works", func(t *testing.T) {
		c.servers[0].Kill()
		c.servers[1].Kill()
		if got, _ := acquire("twokilled"); got != "OK" {
			t.Fatalf("expected OK, got %q", got)
		}
		if got := do(t, cli, "EVAL", compareAndDelete, 1, "twokilled", "me"); got != "1" {
			t.Fatalf("release: expected 1, got %q", got)
		}
		ping("two killed")
	})

	t.Run("three of five killed is an error, quickly", func(t *testing.T) {
		c.servers[2].Kill()
		got, took := acquire("threekilled")
		if !strings.HasPrefix(got, "ERR:NOQUORUM 2 of 5 backends answered, 3 needed") {
			t.Fatalf("expected a NOQUORUM error naming the counts, got %q", got)
		}
		if took >= 2*timeout {
			t.Errorf("the error took %s, expected under 2 × %s", took, timeout)
		}
		_, err := cli.Get(t.Context(), "threekilled").Result()
		if err == nil || errors.Is(err, redis.Nil) {
			t.Errorf("GET without quorum: expected an error, got %v", err)
		}
		ping("three killed")
	})
}

// TestContention: 16 clients each take one key 100 times, retrying after a
// short random pause when it is held (as lock libraries do), with a
// non-atomic critical section that would see two holders at once.
func TestContention(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 5)
	const workers, rounds = 16, 100
	var (
		mu       sync.Mutex
		inside   int
		overlaps int
		errs     []error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w := range workers {
		cli := c.proxy.Client(t)
		wg.Go(func() {
			for r := 0; r < rounds; {
				token := fmt.Sprintf("w%d-%d", w, r)
				ok, err := cli.SetNX(t.Context(), "contended", token, 10*time.Second).Result()
				if err != nil {
					fail(err)
					return
				}
				if !ok {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					continue
				}
				r++
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				released, err := cli.Eval(t.Context(), compareAndDelete, []string{"contended"}, token).Int()
				if err != nil || released != 1 {
					fail(fmt.Errorf("release by the holder: %d, %v", released, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if overlaps > 0 {
		t.Fatalf("%d overlapping holdings", overlaps)
	}
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
}

// TestShutdownDrains: SIGTERM lets a command in flight finish with its real
// answer, then the process exits 0.
func TestShutdownDrains(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-backend-timeout", "2s")
	cli := c.proxy.Client(t)
	if got := do(t, cli, "PING"); got != "PONG" {
		t.Fatalf("PING: %q", got)
	}
	// With 2 of 3 backends hung, an acquisition waits for its timeout.
	c.servers[0].Pause()
	c.servers[1].Pause()
	defer c.servers[0].Resume()
	defer c.servers[1].Resume()
	sets := commandCalls(t, c.servers[2], "set")
	reply := make(chan string, 1)
	go func() {
		v, err := cli.Do(t.Context(), "SET", "k", "me", "NX", "PX", 30000).Result()
		reply <- fmt.Sprint(v, err)
	}()
	redistest.Eventually(t, func() string {
		// The command is in flight once the proxy has sent SET to the live backend.
		if commandCalls(t, c.servers[2], "set") == sets {
			return "the acquisition has not reached the backends"
		}
		return ""
	})
	if code := c.proxy.Signal(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if got := <-reply; !strings.Contains(got, "NOQUORUM") {
		t.Errorf("the command in flight got %q, expected its NOQUORUM answer", got)
	}
	if !strings.Contains(c.proxy.Log(), "lockproxy stopped") {
		t.Errorf("no clean stop in the log:\n%s", c.proxy.Log())
	}
}
