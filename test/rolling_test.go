package test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// TestRollingRestartKeepsExtendedLock: redsync, unchanged, holds a lock
// through the proxy and extends it a few times per lease, while every
// backend restarts empty in turn, as docs/backends.md's Restarts section tells
// operators to restart them: one at a time, the next once the last has
// left its quarantine. Each extension gives the lock back to the backend
// that lost it, so the lock is on all five at the end and nobody else can
// take it. Without that, the third restart would leave it on two backends,
// and redsync's Extend would fail from then on. With fencing, the copies
// carry the lock's fencing token, and FENCE answers it to the end.
func TestRollingRestartKeepsExtendedLock(t *testing.T) {
	proxyTest(t)
	for _, fencing := range []bool{false, true} {
		t.Run(fmt.Sprintf("fencing=%v", fencing), func(t *testing.T) { rollWhileExtending(t, fencing) })
	}
}

func rollWhileExtending(t *testing.T, fencing bool) {
	const lease = 2 * time.Second // and max_ttl: each restart's quarantine
	c := newCluster(t, 5, "-restart-quarantine=true", "-max-ttl", lease.String(), fmt.Sprintf("-fencing=%v", fencing))
	cli := redis.NewClient(&redis.Options{Addr: c.proxy.Addr})
	t.Cleanup(func() { cli.Close() })
	rs := redsync.New(redsyncgoredis.NewPool(cli))
	ctx := t.Context()
	key := "rolling:" + t.Name()

	// A cold start: every backend is in quarantine for max_ttl first.
	m := rs.NewMutex(key, redsync.WithExpiry(lease), redsync.WithTries(200), redsync.WithRetryDelay(50*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	// What each backend holds: the holder's value, and with fencing the
	// lock's token after a NUL byte, 19 digits.
	want := m.Value()
	var fence int64
	if fencing {
		var err error
		if fence, err = cli.Do(ctx, "FENCE", key, m.Value()).Int64(); err != nil || fence <= 0 {
			t.Fatalf("FENCE: %d, %v", fence, err)
		}
		want = fmt.Sprintf("%s\x00%019d", m.Value(), fence)
	}
	state := func(i int) string {
		info := redisCLI(t, c.proxy.Addr, "INFO", "backends")
		prefix := fmt.Sprintf("backend%d:addr=%s,state=", i, c.servers[i].Addr())
		for line := range strings.SplitSeq(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				st, _, _ := strings.Cut(rest, ",")
				return st
			}
		}
		return "missing from INFO backends:\n" + info
	}
	lastExtend := time.Now()
	// holdUntil extends the lock every lease/5, as a holder of a long
	// job would, until cond says nothing is wrong.
	holdUntil := func(what string, cond func() string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for wrong := cond(); wrong != ""; wrong = cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, wrong)
			}
			if time.Since(lastExtend) > lease/5 {
				if ok, err := m.ExtendContext(ctx); !ok || err != nil {
					t.Fatalf("%s: Extend: %v, %v; backends hold %q", what, ok, err, c.held(t, key))
				}
				lastExtend = time.Now()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range c.servers {
		c.servers[i].Restart()
		quarantined := false
		holdUntil(fmt.Sprintf("backend %d restarted", i), func() string {
			quarantined = quarantined || state(i) == "quarantined"
			if got := c.held(t, key)[i]; got != want {
				return fmt.Sprintf("it holds %q, not the lock's value %q", got, want)
			}
			return ""
		})
		holdUntil(fmt.Sprintf("backend %d's quarantine", i), func() string {
			st := state(i)
			quarantined = quarantined || st == "quarantined"
			if st != "up" {
				return "state " + st
			}
			return ""
		})
		if !quarantined {
			t.Fatalf("backend %d was never seen quarantined: the restart was not noticed", i)
		}
	}
	if got, want := c.held(t, key), slices.Repeat([]string{want}, 5); !slices.Equal(got, want) {
		t.Fatalf("after the roll the backends hold %q, want %q", got, want)
	}
	if fencing {
		if got, err := cli.Do(ctx, "FENCE", key, m.Value()).Int64(); err != nil || got != fence {
			t.Fatalf("FENCE after the roll: %d, %v; want the lock's %d", got, err, fence)
		}
	}
	var taken *redsync.ErrTaken
	if err := rs.NewMutex(key, redsync.WithExpiry(lease)).TryLockContext(ctx); !errors.As(err, &taken) {
		t.Fatalf("another mutex's TryLock after the roll: %v, want ErrTaken", err)
	}
	if ok, err := m.UnlockContext(ctx); !ok || err != nil {
		t.Fatalf("Unlock: %v, %v", ok, err)
	}
}
