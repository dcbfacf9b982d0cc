package quorum

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// splitFor leaves key held by "other" on the last two of five backends, as
// a contender that lost the race for it holds it until its rollback.
func splitFor(t *testing.T, c *cluster, key string) {
	t.Helper()
	for _, i := range []int{3, 4} {
		if err := c.direct[i].Set(t.Context(), key, "other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// rollBackOther deletes what splitFor set, as the loser's rollback does.
func rollBackOther(t *testing.T, c *cluster, key string) {
	t.Helper()
	for _, i := range []int{3, 4} {
		if err := c.direct[i].Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// eventuallyEverywhere waits until every backend holds key with value.
func (c *cluster) eventuallyEverywhere(t *testing.T, key, value string) {
	t.Helper()
	want := slices.Repeat([]string{value}, len(c.direct))
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), want...) })
}

// topUpsOver waits until no top-up of e is running.
func topUpsOver(t *testing.T, e *Engine) {
	t.Helper()
	waitFor(t, func() bool { return e.topUps.running.Load() == 0 })
}

// topUpStartedAndOver waits until a top-up of e has started, as one does
// once a refusal is heard, which may be after the grant is answered, and
// none is running.
func topUpStartedAndOver(t *testing.T, e *Engine) {
	t.Helper()
	waitFor(t, func() bool { return e.topUps.started.Load() > 0 && e.topUps.running.Load() == 0 })
}

// TestTopUpAfterSplit: a lock granted by three backends of five, refused by
// two that a contender held, is taken on those two as well once the
// contender rolled back: one backend's loss then leaves it decidable. The
// copies expire within the lock's validity.
func TestTopUpAfterSplit(t *testing.T) {
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	splitFor(t, c, key)
	res, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rollBackOther(t, c, key)
	c.eventuallyEverywhere(t, key, "me")
	for _, i := range []int{3, 4} {
		if left := c.direct[i].PTTL(t.Context(), key).Val(); left <= 0 || left > res.Validity {
			t.Errorf("backend %d's copy has %v left, want at most the lock's validity %v", i, left, res.Validity)
		}
	}
	if got := c.engine.topUps.copies.Load(); got != 2 {
		t.Errorf("%d copies counted, want 2", got)
	}
	// Its release is heard everywhere.
	if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "me"}); err != nil {
		t.Fatal(err)
	}
	if v := c.values(t, key); !slices.Equal(v, []string{"", "", "", "", ""}) {
		t.Fatalf("values %q after the release", v)
	}
}

// TestTopUpFencedAfterSplit: with fencing, the copies carry the lock's
// fencing token, and the two backends' counters, on which nothing was
// minted, are raised to it: a later lock there mints more. The next
// lock's token is larger.
func TestTopUpFencedAfterSplit(t *testing.T) {
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true, Fencing: true})
	key := uniqueKey(t)
	splitFor(t, c, key)
	res, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rollBackOther(t, c, key)
	c.eventuallyEverywhere(t, key, "me\x00"+fenceText(res.Fence))
	for _, i := range []int{3, 4} {
		if counter := c.direct[i].Get(t.Context(), fenceCounterKey).Val(); counter != fenceText(res.Fence) {
			t.Errorf("backend %d's fencing counter %q, want the lock's token %s", i, counter, fenceText(res.Fence))
		}
		if left := c.direct[i].PTTL(t.Context(), key).Val(); left <= 0 || left > res.Validity {
			t.Errorf("backend %d's copy has %v left, want at most the lock's validity %v", i, left, res.Validity)
		}
	}
	if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "me"}); err != nil {
		t.Fatal(err)
	}
	next, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "next", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence <= res.Fence {
		t.Fatalf("the next lock's token %d, not above %d", next.Fence, res.Fence)
	}
}

// TestTopUpStopsAtTheNextCommand: a lock released before its top-up could
// take the backends that refused it leaves no copy there after the
// release: the release stops the top-up.
func TestTopUpStopsAtTheNextCommand(t *testing.T) {
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	splitFor(t, c, key)
	if _, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "me"}); err != nil {
		t.Fatal(err)
	}
	rollBackOther(t, c, key)
	topUpsOver(t, c.engine)
	if v := c.values(t, key); !slices.Equal(v, []string{"", "", "", "", ""}) {
		t.Fatalf("values %q after the release: a copy outlived it", v)
	}
	if c.engine.topUps.started.Load() != 1 || c.engine.topUps.copies.Load() != 0 {
		t.Fatalf("started %d, copies %d: want one top-up, stopped before any copy", c.engine.topUps.started.Load(), c.engine.topUps.copies.Load())
	}
}

// TestTopUpPastContenders: contenders that keep trying for a lock through
// the same engine, refused, and the owner's reads do not stop its top-up:
// neither ends a lock.
func TestTopUpPastContenders(t *testing.T) {
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	splitFor(t, c, key)
	if _, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "third", TTL: 30 * time.Second}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a contender's acquisition: %v, want ErrNotAcquired", err)
	}
	// The owner reads its lock, as Redisson's isHeldByThread does.
	if _, err := c.engine.Read(t.Context(), Read{Op: OpGet, Key: key}); err != nil {
		t.Fatalf("the owner's read: %v", err)
	}
	rollBackOther(t, c, key)
	c.eventuallyEverywhere(t, key, "me")
}

// TestTopUpHashLock: Redisson's lock too, with the hold count of the
// quorum: a re-entry refused by two backends is topped up there with both
// holds, and one that two backends took as a first hold (their key gone)
// raises their count to the quorum's, so that releases decrement one count
// everywhere.
func TestTopUpHashLock(t *testing.T) {
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	hashAcquireAfterSplit(t, c, key)
	redistest.Eventually(t, c.expectCounts(t, key, "me:1", "1", "1", "1", "1", "1"))
	if r, err := hashRelease(c.engine, t, key, "me:1", ""); err != nil || !r.Released {
		t.Fatalf("release: %+v, %v", r, err)
	}
	redistest.Eventually(t, c.gone(t, key))

	// A re-entry refused by two backends.
	refused := uniqueKey(t)
	for i := range 3 {
		c.hashHold(t, i, refused, "me:1", 1, time.Minute)
	}
	hashAcquireAfterSplit(t, c, refused)
	redistest.Eventually(t, c.expectCounts(t, refused, "me:1", "2", "2", "2", "2", "2"))

	// A re-entry that two backends took as a first hold.
	missed := uniqueKey(t)
	for i := range 3 {
		c.hashHold(t, i, missed, "me:1", 1, time.Minute)
	}
	if _, err := hashAcquire(c.engine, t, missed, "me:1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, c.expectCounts(t, missed, "me:1", "2", "2", "2", "2", "2"))
	// Two releases free it everywhere, the first leaving it held.
	if r, err := hashRelease(c.engine, t, missed, "me:1", ""); err != nil || r.Released || r.HoldCount != 1 {
		t.Fatalf("first release: %+v, %v", r, err)
	}
	if r, err := hashRelease(c.engine, t, missed, "me:1", ""); err != nil || !r.Released {
		t.Fatalf("second release: %+v, %v", r, err)
	}
	redistest.Eventually(t, c.gone(t, missed))
}

// hashAcquireAfterSplit takes the hash lock key for "me:1" while "other:1"
// holds it on the last two of five backends, then rolls the other back
// there, as the loser of a race does.
func hashAcquireAfterSplit(t *testing.T, c *cluster, key string) {
	t.Helper()
	for _, i := range []int{3, 4} {
		c.hashHold(t, i, key, "other:1", 1, time.Minute)
	}
	if _, err := hashAcquire(c.engine, t, key, "me:1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rollBackOther(t, c, key)
}
