package quorum

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func (c *cluster) resetCalls(t *testing.T) {
	t.Helper()
	for i, d := range c.direct {
		if err := d.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatalf("backend %d: CONFIG RESETSTAT: %v", i, err)
		}
	}
}

// TestLockCycleCommands holds the per-cycle budget of docs/cost.md: a lock
// cycle (acquisition, release) runs two scripts on each backend, and in
// them the recipe's SET, GET (an MGET here, which reads the waiting marks
// with the key) and DEL, plus the lease read (the set check's record and
// the horizon, one MGET) and the expiry stamp: five commands, six with
// the scripts. The horizon's record moves about once a second, not per
// grant, and a release that nobody waits for publishes nothing.
func TestLockCycleCommands(t *testing.T) {
	// Without the records' rounds, whose reads would mix with the counts.
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true, skipIdentity: true})
	ctx := t.Context()
	// The engine's first locks may move the horizon from nothing, and the
	// first cycle loads its scripts on each connection.
	warm := uniqueKey(t) + ":warm"
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{warm}, Token: "t", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{warm}, Token: "t"}); err != nil {
		t.Fatal(err)
	}
	for i := range c.direct {
		waitFor(t, func() bool { return commandCalls(t, c.servers[i])["del"] >= 1 })
	}
	c.resetCalls(t)
	const cycles = 300
	start := time.Now()
	for i := range cycles {
		key := fmt.Sprintf("%s:%d", uniqueKey(t), i)
		if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "t", TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Every backend ran every command: the releases answer at a quorum.
	seconds := int(time.Since(start)/time.Second) + 1
	for i := range c.direct {
		waitFor(t, func() bool { return commandCalls(t, c.servers[i])["del"] >= cycles })
		calls := commandCalls(t, c.servers[i])
		want := map[string]int{"evalsha": 2 * cycles, "mget": 2 * cycles, "set": cycles, "pexpiretime": cycles, "del": cycles}
		for cmd, n := range want {
			got := calls[cmd]
			if cmd == "set" {
				// The horizon's record: at most once per second it moved,
				// once more for the second it started in.
				if got < n || got > n+seconds+1 {
					t.Errorf("backend %d: %d SETs in %d cycles over %d s, want %d and one a second at most for the horizon", i, got, cycles, seconds, n)
				}
				continue
			}
			if got != n {
				t.Errorf("backend %d: %d %s in %d cycles, want %d (all: %v)", i, got, cmd, cycles, n, calls)
			}
		}
		for cmd, n := range calls {
			if _, ok := want[cmd]; !ok && !testsOwn[cmd] && n > 0 {
				t.Errorf("backend %d: %d %s in %d cycles, want none (all: %v)", i, n, cmd, cycles, calls)
			}
		}
	}
}

// testsOwn are the commands of the test's own clients, and the clock
// samples.
var testsOwn = map[string]bool{"info": true, "config|resetstat": true, "hello": true, "client|setinfo": true, "time": true}

// TestNoticeOnlyWhereMarked: every way a lock ends publishes its notice
// where the key is marked waited for, or every key is (lua/notice.lua),
// and nowhere else.
func TestNoticeOnlyWhereMarked(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	ctx := t.Context()
	ends := []struct {
		name string
		take func(key string) error
		end  func(key string) error
	}{
		{"release", func(key string) error {
			_, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "t", TTL: time.Minute})
			return err
		}, func(key string) error {
			_, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "t"})
			return err
		}},
		{"release all", func(key string) error {
			_, err := c.engine.Lock(ctx, Lock{Op: OpAcquireAll, Keys: []string{key}, Token: "t", TTL: time.Minute})
			return err
		}, func(key string) error {
			_, err := c.engine.Unlock(ctx, Unlock{Op: OpReleaseAll, Keys: []string{key}, Token: "t"})
			return err
		}},
		{"delete", func(key string) error {
			_, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "t", TTL: time.Minute})
			return err
		}, func(key string) error {
			_, err := c.engine.Write(ctx, Write{Op: OpDelete, Key: key})
			return err
		}},
		{"hash release", func(key string) error {
			_, err := hashAcquire(c.engine, t, key, "uuid:1", time.Minute)
			return err
		}, func(key string) error {
			_, err := hashRelease(c.engine, t, key, "uuid:1", "")
			return err
		}},
		{"write release", func(key string) error {
			_, err := writeAcquire(c.engine, t, key, "uuid:1", time.Minute)
			return err
		}, func(key string) error {
			_, err := writeRelease(c.engine, t, key, "uuid:1")
			return err
		}},
	}
	for _, end := range ends {
		for _, marked := range []string{"", "waiting", "listening"} {
			t.Run(fmt.Sprintf("%s/%s", end.name, cmpOr(marked, "unmarked")), func(t *testing.T) {
				key := uniqueKey(t)
				if err := end.take(key); err != nil {
					t.Fatal(err)
				}
				var mark string
				switch marked {
				case "waiting":
					mark = waitingPrefix + key
				case "listening":
					mark = listeningKey
				}
				for i, d := range c.direct {
					if mark != "" {
						if err := d.Set(ctx, mark, "1", time.Minute).Err(); err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { d.Del(context.Background(), mark) })
					}
					if err := d.ConfigResetStat(ctx).Err(); err != nil {
						t.Fatalf("backend %d: %v", i, err)
					}
				}
				if err := end.end(key); err != nil {
					t.Fatal(err)
				}
				want := 0
				if mark != "" {
					want = 1
				}
				for i := range c.direct {
					waitFor(t, func() bool { return commandCalls(t, c.servers[i])["del"] == 1 })
					if got := commandCalls(t, c.servers[i])["publish"]; got != want {
						t.Errorf("backend %d: %d notices published, want %d", i, got, want)
					}
				}
			})
		}
	}
}

func cmpOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// TestWaitMarks: a waiter marks its key on every backend before its first
// try, and a watch by pattern marks every key (or its one key); the marks
// carry markTTL, which keepMarks renews.
func TestWaitMarks(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	ctx := t.Context()
	key := uniqueKey(t)
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitCtx, leave := context.WithCancel(ctx)
	got := startWaiting(t, waitCtx, c.engine, key, "waiter", time.Minute, time.Minute)
	marked := func(mark string) {
		t.Helper()
		for i, d := range c.direct {
			waitFor(t, func() bool {
				ttl := d.PTTL(ctx, mark).Val()
				return ttl > markTTL-10*time.Second && ttl <= markTTL
			})
			if d.Get(ctx, mark).Val() != "1" {
				t.Fatalf("backend %d: mark %s is %q", i, mark, d.Get(ctx, mark).Val())
			}
		}
	}
	marked(waitingPrefix + key)
	leave()
	if o := <-got; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("waiter: %v, want its context's end", o.err)
	}
	if keys := c.engine.waits.marks(); len(keys) != 0 {
		t.Fatalf("marks %v kept with no waiter left", keys)
	}

	stop := c.engine.Releases("*", func(string, string) {})
	marked(listeningKey)
	one := c.engine.Releases(key+":other", func(string, string) {})
	marked(waitingPrefix + key + ":other")
	if keys := c.engine.waits.marks(); len(keys) != 2 {
		t.Fatalf("marks %v, want the listening mark and the one key's", keys)
	}
	stop()
	one()
}

// TestWaiterAppearsMidRelease: a waiter that joins while a release is
// under way (it has landed on one backend, and lands on the others after
// the waiter's first try found the key still held on them) is woken by the
// release's last copies, not by the holder's lease running out. Control:
// with the marks gone before those copies, the same waiter sleeps on.
func TestWaiterAppearsMidRelease(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(fmt.Sprintf("marks_removed=%v", control), func(t *testing.T) {
			c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
			waiting := newEngine(t, c.cfg)
			ctx := t.Context()
			key := uniqueKey(t)
			if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			// The release's fan-out, one backend at a time, as a proxy's
			// reaches them: the same script and the same release id.
			id := newReleaseID()
			releaseOn := func(i int) {
				t.Helper()
				n, err := c.direct[i].Eval(ctx, plainValues.release.Source(), []string{key}, "holder", id).Int()
				if err != nil || n != 1 {
					t.Fatalf("backend %d: release %d, %v", i, n, err)
				}
			}
			releaseOn(0)
			wait := 8 * time.Second
			if control {
				wait = 3 * time.Second // the other is woken in a backend timeout
			}
			got := startWaiting(t, ctx, waiting, key, "waiter", time.Minute, wait)
			// Its first try was refused by backends 1 and 2: it waits for
			// the holder's minute.
			waitFor(t, func() bool {
				waiting.waits.mu.Lock()
				defer waiting.waits.mu.Unlock()
				q := waiting.waits.queues[key]
				return q != nil && !q.freeAt.IsZero()
			})
			if control {
				for _, d := range c.direct {
					d.Del(ctx, waitingPrefix+key)
				}
			}
			released := time.Now()
			releaseOn(1)
			releaseOn(2)
			o := <-got
			switch {
			case control && !errors.Is(o.err, ErrNotAcquired):
				t.Fatalf("waiter without marks: %v, want no grant before its wait ends", o.err)
			case !control && o.err != nil:
				t.Fatalf("waiter: %v", o.err)
			case !control:
				t.Logf("granted %v after the release's last copies", o.at.Sub(released))
				if c.majority(t, key) != "waiter" {
					t.Fatalf("values %v, want the waiter's on a majority", c.values(t, key))
				}
			}
		})
	}
}
