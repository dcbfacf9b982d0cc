package quorum

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestSplitTriedAgain: with one of five backends down, an acquisition
// that another contender's copies on two backends split two and two is
// rolled back and tried once more after a pause: granted when the other's
// copies went in the pause, failed with Split when they did not. One
// refused by a quorum is not tried again.
func TestSplitTriedAgain(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
	c.servers[0].Kill()
	e := c.engine
	other := func(t *testing.T, key string, backends ...int) {
		t.Helper()
		for _, i := range backends {
			if err := c.direct[i].Set(t.Context(), key, "other", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	acquire := func(t *testing.T, key string) (Result, error) {
		return e.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 10 * time.Second})
	}
	resetStats := func(t *testing.T) {
		for i := 1; i < 5; i++ {
			c.resetStats(t, i)
		}
	}
	expectValues := func(t *testing.T, key string, want ...string) {
		t.Helper()
		redistest.Eventually(t, func() string {
			if got := c.values(t, key); !slices.Equal(got, want) {
				return fmt.Sprintf("%s is %q on the backends, want %q", key, got, want)
			}
			return ""
		})
	}

	t.Run("split again", func(t *testing.T) {
		key := uniqueKey(t)
		other(t, key, 1, 2)
		resetStats(t)
		before := e.Splits()
		res, err := acquire(t, key)
		if !errors.Is(err, ErrNoQuorum) || !res.Split {
			t.Fatalf("acquire split two and two, twice: %+v, %v; want ErrNoQuorum, Split", res, err)
		}
		for _, i := range []int{3, 4} {
			if calls := c.setCalls(t, i); calls != 2 {
				t.Errorf("backend %d ran SET %d times, want 2: one per try", i, calls)
			}
		}
		if got := e.Splits(); got.Retried != before.Retried+1 || got.Granted != before.Granted {
			t.Errorf("Splits went from %+v to %+v, want one more retried, none granted", before, got)
		}
		expectValues(t, key, "?", "other", "other", "", "")
	})

	// Every acquisition a client's waiter may be making: Spring's obtain
	// (extend or acquire), bsm/redislock's, Redisson's.
	for _, op := range []Op{OpExtendOrAcquire, OpAcquireOrRenew, OpAcquireAll, OpHashAcquire} {
		t.Run("split again/"+op.String(), func(t *testing.T) {
			key := uniqueKey(t)
			if op == OpHashAcquire {
				c.hashHold(t, 1, key, "other:1", 1, time.Minute)
				c.hashHold(t, 2, key, "other:1", 1, time.Minute)
			} else {
				other(t, key, 1, 2)
			}
			before := e.Splits()
			res, err := e.Lock(t.Context(), Lock{Op: op, Keys: []string{key}, Token: "me:1", TokenLen: 2, TTL: 10 * time.Second})
			if !errors.Is(err, ErrNoQuorum) || !res.Split {
				t.Fatalf("%s split two and two, twice: %+v, %v; want ErrNoQuorum, Split", op, res, err)
			}
			if got := e.Splits(); got.Retried != before.Retried+1 {
				t.Errorf("Splits went from %+v to %+v, want one more retried", before, got)
			}
		})
	}

	t.Run("granted on the second try", func(t *testing.T) {
		key := uniqueKey(t)
		other(t, key, 1, 2)
		before := e.Splits()
		// The other contender rolls back in the pause.
		e.hooks.splitPaused = func() time.Duration {
			c.direct[1].Del(t.Context(), key)
			c.direct[2].Del(t.Context(), key)
			return 0
		}
		defer func() { e.hooks.splitPaused = nil }()
		if res, err := acquire(t, key); err != nil || res.Validity <= 0 {
			t.Fatalf("acquire whose rival rolled back in the pause: %+v, %v; want granted", res, err)
		}
		if got := e.Splits(); got.Retried != before.Retried+1 || got.Granted != before.Granted+1 {
			t.Errorf("Splits went from %+v to %+v, want one more retried and granted", before, got)
		}
		expectValues(t, key, "?", "me", "me", "me", "me")
	})

	t.Run("refused by a quorum", func(t *testing.T) {
		key := uniqueKey(t)
		other(t, key, 1, 2, 3)
		resetStats(t)
		before := e.Splits()
		res, err := acquire(t, key)
		if !errors.Is(err, ErrNotAcquired) || res.Split {
			t.Fatalf("acquire against a quorum of another: %+v, %v; want ErrNotAcquired, no Split", res, err)
		}
		// The answer comes with the quorum's refusals; backend 4's may
		// still be on its way.
		waitFor(t, func() bool { return c.setCalls(t, 4) >= 1 })
		if calls := c.setCalls(t, 4); calls != 1 {
			t.Errorf("backend 4 ran SET %d times, want 1: not tried again", calls)
		}
		if got := e.Splits(); got != before {
			t.Errorf("Splits went from %+v to %+v, want unchanged", before, got)
		}
		expectValues(t, key, "?", "other", "other", "other", "")
	})

	t.Run("no contender", func(t *testing.T) {
		c.servers[1].Kill()
		c.servers[2].Kill()
		defer func() {
			c.servers[1].Restart()
			c.servers[2].Restart()
		}()
		key := uniqueKey(t)
		before := e.Splits()
		if res, err := acquire(t, key); !errors.Is(err, ErrNoQuorum) || res.Split {
			t.Fatalf("acquire with three of five down: %+v, %v; want ErrNoQuorum, no Split", res, err)
		}
		if got := e.Splits(); got != before {
			t.Errorf("Splits went from %+v to %+v, want unchanged: nobody contended", before, got)
		}
	})
}
