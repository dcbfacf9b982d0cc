package quorum

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// hashLockFence takes the hash lock key for the owner's field and returns
// its fencing token.
func hashLockFence(t *testing.T, e *Engine, key, field string) int64 {
	t.Helper()
	r, err := hashAcquire(e, t, key, field, 10*time.Second)
	if err != nil {
		t.Fatalf("hash acquire %s for %s: %v", key, field, err)
	}
	if r.Fence <= 0 {
		t.Fatalf("hash acquire %s for %s: fencing token %d", key, field, r.Fence)
	}
	return r.Fence
}

// storedHashFence is the fencing token the hash lock key carries on the
// backend d, "" when none.
func storedHashFence(t *testing.T, d *redis.Client, key string) string {
	t.Helper()
	return d.HGet(t.Context(), key, fenceField).Val()
}

func readHashFence(t *testing.T, e *Engine, key, field string) (int64, error) {
	t.Helper()
	r, err := e.Read(t.Context(), Read{Op: OpHashFence, Key: key, Token: field})
	return r.Fence, err
}

// leaveHashLock releases the hash lock key for the owner's field, holds
// times, the last of which must release it.
func leaveHashLock(t *testing.T, e *Engine, key, field string, holds int) {
	t.Helper()
	for i := range holds {
		r, err := hashRelease(e, t, key, field, "")
		if last := i == holds-1; err != nil || r.Released != last {
			t.Fatalf("release %d of %d of %s: %+v, %v", i+1, holds, key, r, err)
		}
	}
}

// TestHashFenceIncreases: through two engines taking turns, each holder
// of a hash lock gets a token above the one before, and so does each
// holder of a string lock between them, from the same counter; a
// re-entry answers the token of the hold it enters; the other engine
// reads it as the owner's and as whoever's holds the lock, and not as
// another owner's; no write-back was needed.
func TestHashFenceIncreases(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
	engines := []*Engine{c.engine, newEngine(t, c.cfg)}
	hashKey, strKey := uniqueKey(t), uniqueKey(t)
	var last int64
	for i := range 12 {
		e := engines[i%2]
		owner := fmt.Sprintf("uuid:%d", i)
		if i%3 == 2 {
			fence := lockFence(t, e, strKey, owner)
			if fence <= last {
				t.Fatalf("holder %d, of the string lock: token %d after %d", i, fence, last)
			}
			last = fence
			if _, err := e.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{strKey}, Token: owner}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		fence := hashLockFence(t, e, hashKey, owner)
		if fence <= last {
			t.Fatalf("holder %d, of the hash lock: token %d after %d", i, fence, last)
		}
		last = fence
		// Through the same engine: its pipes keep the re-entry behind the
		// first hold on every backend, the slowest included.
		if again := hashLockFence(t, e, hashKey, owner); again != fence {
			t.Fatalf("holder %d: the re-entry's token %d, want the lock's %d", i, again, fence)
		}
		reader := engines[(i+1)%2]
		for _, field := range []string{owner, ""} {
			if got, err := readHashFence(t, reader, hashKey, field); err != nil || got != fence {
				t.Fatalf("holder %d: the token read for %q through the other engine: %d, %v; want %d", i, field, got, err, fence)
			}
		}
		if _, err := readHashFence(t, reader, hashKey, "someone:1"); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("holder %d: the token read for another owner: %v, want ErrNotHeld", i, err)
		}
		leaveHashLock(t, e, hashKey, owner, 2)
		// The release answers once a quorum did it. A backend still to
		// would refuse the next holder, and take its re-entry as a first
		// hold, minting a larger token (TestHashFenceReentryLapsed).
		redistest.Eventually(t, c.gone(t, hashKey))
	}
	if _, err := readHashFence(t, c.engine, hashKey, ""); !errors.Is(err, ErrNotHeld) {
		t.Errorf("the token read after the last release: %v, want ErrNotHeld", err)
	}
	for i, e := range engines {
		if wb := e.Fences().WriteBacks; wb != 0 {
			t.Errorf("engine %d: %d write-backs in the steady state", i, wb)
		}
	}
}

// TestHashFenceReentryLapsed: a re-entry counted afresh on a backend
// where the lock had lapsed (or that refused the first hold) gets a token
// minted there, larger than the lock's: the lock's token is then the
// largest of its voters, written back to the one that re-entered, as an
// acquisition's is. The voters that re-entered alone cannot show that
// their token is above every earlier holder's.
func TestHashFenceReentryLapsed(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	ctx, key := t.Context(), uniqueKey(t)
	c.hashHold(t, 2, key, "other:1", 1, time.Minute) // 2 refuses both
	fence := hashLockFence(t, c.engine, key, "me:1")
	c.direct[0].Del(ctx, key)
	again := hashLockFence(t, c.engine, key, "me:1")
	if again <= fence {
		t.Fatalf("the re-entry's token %d, want one above the lock's %d, minted by backend 0", again, fence)
	}
	if exp, got := []string{fenceText(again), fenceText(again), ""}, []string{storedHashFence(t, c.direct[0], key), storedHashFence(t, c.direct[1], key), storedHashFence(t, c.direct[2], key)}; !slices.Equal(exp, got) {
		t.Errorf("the backends carry the tokens %q, want %q", got, exp)
	}
	if msg := c.expectCounts(t, key, "me:1", "1", "2", "")(); msg != "" {
		t.Error(msg)
	}
	if got, err := readHashFence(t, c.engine, key, "me:1"); err != nil || got != again {
		t.Errorf("the token read after the re-entry: %d, %v; want %d", got, err, again)
	}
}

// TestHashFenceWriteBack: backends 0 and 1, their counters ahead of the
// clock, mint more than backend 2, and 3 and 4 refuse (another owner's
// hash): the lock's token is the largest minted, written back to 2 (its
// counter and the lock's field) before the grant, and a re-entry answers
// it with no second write-back. Once 0 and 1 are lost, the next holder,
// voted by 2, 3 and 4, gets a larger token only because of the
// write-back: the control, which skips it, gets a smaller one.
func TestHashFenceWriteBack(t *testing.T) {
	for _, writeBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "control: no write-back", true: "write-back"}[writeBack], func(t *testing.T) {
			c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
			c.engine.hooks.skipFenceWriteBack = !writeBack
			ctx, key := t.Context(), uniqueKey(t)
			ahead := time.Now().Add(time.Hour).UnixMicro()
			for _, i := range []int{0, 1} {
				c.direct[i].Set(ctx, fenceCounterKey, ahead, 0)
			}
			for _, i := range []int{3, 4} {
				c.hashHold(t, i, key, "other:1", 1, time.Minute)
			}
			fence := hashLockFence(t, c.engine, key, "me:1")
			if fence != ahead+1 {
				t.Fatalf("token %d, want the largest minted, %d", fence, ahead+1)
			}
			// The grant waits for a quorum, so for backend 2's write-back;
			// its acquisition, which came first on its pipe, too.
			stored := make([]string, len(c.direct))
			for i, d := range c.direct {
				stored[i] = storedHashFence(t, d, key)
			}
			counter2 := c.direct[2].Get(ctx, fenceCounterKey).Val()
			if !writeBack {
				if stored[2] == fenceText(fence) || counter2 == fenceText(fence) {
					t.Fatalf("backend 2 carries the token %q, its counter %q, without a write-back", stored[2], counter2)
				}
			} else {
				if exp := []string{fenceText(fence), fenceText(fence), fenceText(fence), "", ""}; !slices.Equal(stored, exp) {
					t.Fatalf("the backends carry the tokens %q, want %q", stored, exp)
				}
				if counter2 != fenceText(fence) {
					t.Fatalf("backend 2's counter %q after the write-back, want %d", counter2, fence)
				}
				if wb := c.engine.Fences().WriteBacks; wb != 1 {
					t.Errorf("%d write-backs, want 1", wb)
				}
				if got, err := readHashFence(t, c.engine, key, "me:1"); err != nil || got != fence {
					t.Fatalf("the token read: %d, %v; want %d", got, err, fence)
				}
				if again := hashLockFence(t, c.engine, key, "me:1"); again != fence {
					t.Fatalf("the re-entry's token %d, want the lock's %d", again, fence)
				}
				if wb := c.engine.Fences().WriteBacks; wb != 1 {
					t.Errorf("%d write-backs after the re-entry, want still 1", wb)
				}
			}

			// The lock ends (here: is deleted where it is held), and 0 and
			// 1 are lost: the next holder is voted by 2, 3 and 4. First
			// every backend runs what the engine sent it, the slowest
			// included (a PING answered by each on the same connection), lest
			// a late acquisition of "me:1" take the lock after the delete;
			// and the lock's top-up is over.
			waitAllCount(t, c.engine)
			topUpStartedAndOver(t, c.engine)
			for _, d := range c.direct {
				d.Del(ctx, key)
			}
			c.servers[0].Kill()
			c.servers[1].Kill()
			next, err := hashAcquire(c.engine, t, key, "next:1", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case writeBack && next.Fence <= fence:
				t.Fatalf("with the write-back, the next token %d is not above %d", next.Fence, fence)
			case !writeBack && next.Fence > fence:
				t.Fatalf("without the write-back the next token %d is still above %d: the control shows nothing", next.Fence, fence)
			}
		})
	}
}

// TestHashFenceRollback: a fenced acquisition that failed, refused by a
// quorum or left undecided, minted on the backends that counted it, and
// their rollback leaves no hash there, the token's field gone with the
// owner's; the refusal still tells how long the holder has left.
func TestHashFenceRollback(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true, NodeTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	// undone waits until backend i has minted (its counter is past
	// before) and then taken the owner's field back, and fails unless
	// the hash went with it: the undo is one script, and the lease, which
	// would delete what it left, is far off.
	undone := func(i int, key, before string) {
		t.Helper()
		redistest.Eventually(t, func() string {
			if after := c.direct[i].Get(ctx, fenceCounterKey).Val(); after <= before {
				return fmt.Sprintf("backend %d's counter %q, %q before: it minted nothing", i, after, before)
			}
			if c.direct[i].HExists(ctx, key, "me:1").Val() {
				return fmt.Sprintf("backend %d still counts the attempt", i)
			}
			return ""
		})
		if fields := c.direct[i].HGetAll(ctx, key).Val(); len(fields) != 0 {
			t.Errorf("backend %d keeps %q", i, fields)
		}
	}

	t.Run("refused", func(t *testing.T) {
		key := uniqueKey(t)
		c.hashHold(t, 0, key, "other:1", 1, time.Minute)
		c.hashHold(t, 1, key, "other:1", 1, time.Minute)
		before := c.direct[2].Get(ctx, fenceCounterKey).Val()
		res, err := hashAcquire(c.engine, t, key, "me:1", time.Minute)
		if !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 || res.HolderTTL > time.Minute || res.Fence != 0 {
			t.Fatalf("acquire against a quorum of another owner: %+v, %v; want ErrNotAcquired, HolderTTL in (0, 1m], no token", res, err)
		}
		undone(2, key, before)
		if msg := c.expectCounts(t, key, "other:1", "1", "1", "")(); msg != "" {
			t.Error(msg)
		}
	})

	t.Run("undecided", func(t *testing.T) {
		key := uniqueKey(t)
		before := c.direct[0].Get(ctx, fenceCounterKey).Val()
		c.servers[1].Kill()
		c.servers[2].Kill()
		if _, err := hashAcquire(c.engine, t, key, "me:1", time.Minute); !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("acquire with two backends down: %v, want ErrNoQuorum", err)
		}
		undone(0, key, before)
	})
}

// TestHashFenceOff: without Fencing a hash lock mints nothing and keeps
// only the owner's field and its attempt record: no token's field, no
// counter; reading its token answers that it has none.
func TestHashFenceOff(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	r, err := hashAcquire(c.engine, t, key, "me:1", 10*time.Second)
	if err != nil || r.Fence != 0 {
		t.Fatalf("acquire without fencing: %+v, %v", r, err)
	}
	redistest.Eventually(t, c.expectCounts(t, key, "me:1", "1", "1", "1"))
	for i, d := range c.direct {
		if fields := d.HKeys(t.Context(), key).Val(); !slices.Equal(fields, []string{"me:1", attemptPrefix + "me:1"}) {
			t.Errorf("backend %d keeps the fields %q, want the owner's and its attempt's", i, fields)
		}
		if n := d.Exists(t.Context(), fenceCounterKey).Val(); n != 0 {
			t.Errorf("backend %d holds a fencing counter", i)
		}
	}
	for _, field := range []string{"me:1", ""} {
		if _, err := readHashFence(t, c.engine, key, field); !errors.Is(err, ErrNoFence) {
			t.Errorf("the token read for %q without fencing: %v, want ErrNoFence", field, err)
		}
	}
}

// TestHashFenceRead: the token a quorum of a hash lock's holders carry,
// read for its owner and for whoever holds it; not held for another
// owner, an absent key or a string lock; no token when the holders carry
// different ones, or when they are different owners, whatever their
// tokens; still answered with one backend down, undecided with two.
func TestHashFenceRead(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	ctx := t.Context()
	expect := func(name, key, field string, exp int64, expErr error) {
		t.Helper()
		got, err := readHashFence(t, c.engine, key, field)
		if !errors.Is(err, expErr) || got != exp {
			t.Errorf("%s, read for %q: %d, %v; want %d, %v", name, field, got, err, exp, expErr)
		}
	}

	held := uniqueKey(t)
	fence := hashLockFence(t, c.engine, held, "me:1")
	expect("held", held, "me:1", fence, nil)
	expect("held", held, "", fence, nil)
	expect("held", held, "other:1", 0, ErrNotHeld)
	absent := uniqueKey(t)
	expect("absent", absent, "me:1", 0, ErrNotHeld)
	expect("absent", absent, "", 0, ErrNotHeld)
	str := uniqueKey(t)
	lockFence(t, c.engine, str, "me:1")
	expect("a string lock", str, "me:1", 0, ErrNotHeld)
	expect("a string lock", str, "", 0, ErrNotHeld)

	split := uniqueKey(t)
	for i, d := range c.direct {
		c.hashHold(t, i, split, "me:1", 1, time.Minute)
		d.HSet(ctx, split, fenceField, fenceText(int64(100+i)))
	}
	expect("three tokens", split, "me:1", 0, ErrNoFence)
	expect("three tokens", split, "", 0, ErrNoFence)
	c.direct[0].HSet(ctx, split, fenceField, fenceText(101))
	expect("a quorum's token", split, "me:1", 101, nil)
	expect("a quorum's token", split, "", 101, nil)

	// Backends 0 and 1 each held by another owner, with the same token's
	// text: a quorum carries it, but not for one lock.
	owners := uniqueKey(t)
	for i, owner := range []string{"a:1", "b:1"} {
		c.hashHold(t, i, owners, owner, 1, time.Minute)
		c.direct[i].HSet(ctx, owners, fenceField, fenceText(100))
	}
	expect("two owners", owners, "", 0, ErrNoFence)
	expect("two owners", owners, "a:1", 0, ErrNotHeld)

	c.servers[2].Kill()
	expect("one backend down", held, "me:1", fence, nil)
	expect("one backend down", held, "", fence, nil)
	c.servers[1].Kill()
	expect("two backends down", held, "me:1", 0, ErrNoQuorum)
	expect("two backends down", held, "", 0, ErrNoQuorum)
}
