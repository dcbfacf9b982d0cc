package quorum

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestAcquireAll(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	a, b := uniqueKey(t), uniqueKey(t)
	if _, err := c.engine.acquireAll(t.Context(), []string{a, b}, "owner", 10*time.Second); err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, a, "owner") + c.holdsOnQuorum(t, b, "owner") })

	// One of the keys held elsewhere on a majority: nothing is taken.
	d, held := uniqueKey(t), uniqueKey(t)
	for _, i := range []int{0, 1, 2} {
		c.direct[i].Set(t.Context(), held, "other", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.acquireAll(t.Context(), []string{d, held}, "me", 10*time.Second))); exp != got {
		t.Fatalf("with one key held elsewhere: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		return expectValues(c.values(t, d), "", "", "", "", "") + expectValues(c.values(t, held), "other", "other", "other", "", "")
	})

	if exp, got := "refused", outcome(second(c.engine.extendAll(t.Context(), []string{a, b}, "intruder", 20*time.Second))); exp != got {
		t.Fatalf("ExtendAll by a non-owner: expected %s, got %s", exp, got)
	}
	if _, err := c.engine.extendAll(t.Context(), []string{a, b}, "owner", 40*time.Second); err != nil {
		t.Fatalf("ExtendAll: %v", err)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, a, 30*time.Second) + c.ttlOnQuorum(t, b, 30*time.Second) })
	if exp, got := "refused", outcome(second(c.engine.releaseAll(t.Context(), []string{a, b}, "intruder"))); exp != got {
		t.Fatalf("ReleaseAll by a non-owner: expected %s, got %s", exp, got)
	}
	if _, err := c.engine.releaseAll(t.Context(), []string{a, b}, "owner"); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	redistest.Eventually(t, func() string {
		return expectValues(c.values(t, a), "", "", "", "", "") + expectValues(c.values(t, b), "", "", "", "", "")
	})
}

func TestReleaseAbsent(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.release(t.Context(), key, "owner"); !errors.Is(err, ErrAbsent) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of an absent key: expected ErrAbsent (and ErrNotHeld), got %v", err)
	}
	c.direct[0].Set(t.Context(), key, "other", time.Minute)
	c.direct[1].Set(t.Context(), key, "other", time.Minute)
	if _, err := c.engine.release(t.Context(), key, "owner"); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrAbsent) {
		t.Fatalf("release of a key held by another: expected ErrNotHeld only, got %v", err)
	}
}

func TestExtendBy(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, MaxTTL: 30 * time.Second})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	res, err := c.engine.extendBy(t.Context(), key, "owner", 5*time.Second)
	if err != nil {
		t.Fatalf("ExtendBy: %v", err)
	}
	if res.Validity < 14*time.Second || res.Validity > 15*time.Second {
		t.Errorf("validity after adding 5s to 10s: %s", res.Validity)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 14*time.Second) })
	if exp, got := "refused", outcome(second(c.engine.extendBy(t.Context(), key, "intruder", time.Second))); exp != got {
		t.Fatalf("ExtendBy by a non-owner: expected %s, got %s", exp, got)
	}
	var te *TTLError
	if _, err := c.engine.extendBy(t.Context(), key, "owner", 20*time.Second); !errors.As(err, &te) || te.TTL <= 30*time.Second {
		t.Fatalf("ExtendBy past max_ttl: expected a *TTLError over 30s, got %v", err)
	}
}

func TestExtendOrAcquire(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	// Free: taken.
	if _, err := c.engine.extendOrAcquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("on a free key: %v", err)
	}
	// Held by the token: extended.
	if _, err := c.engine.extendOrAcquire(t.Context(), key, "owner", 40*time.Second); err != nil {
		t.Fatalf("by the holder: %v", err)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 30*time.Second) })
	// Held by another: refused, and the holder keeps it.
	if exp, got := "refused", outcome(second(c.engine.extendOrAcquire(t.Context(), key, "intruder", 10*time.Second))); exp != got {
		t.Fatalf("by another token: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, "owner") })
}

func TestAcquireOrRenew(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	const token = "tok123"
	if _, err := c.engine.acquireOrRenew(t.Context(), key, token+"meta1", len(token), 10*time.Second); err != nil {
		t.Fatalf("first obtain: %v", err)
	}
	// Same token, new metadata: renewed, with the new value.
	if _, err := c.engine.acquireOrRenew(t.Context(), key, token+"meta2", len(token), 20*time.Second); err != nil {
		t.Fatalf("re-obtain with the same token: %v", err)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, token+"meta2") })
	if exp, got := "refused", outcome(second(c.engine.acquireOrRenew(t.Context(), key, "other1meta", len(token), 10*time.Second))); exp != got {
		t.Fatalf("another token: expected %s, got %s", exp, got)
	}
}

func TestOwnerPTTL(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.ownerPTTL(t.Context(), key, "owner"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("absent key: expected ErrNotHeld, got %v", err)
	}
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	left, err := c.engine.ownerPTTL(t.Context(), key, "owner")
	if err != nil || left > 10*time.Second-c.engine.drift(10*time.Second) || left < 8*time.Second {
		t.Fatalf("owner: expected a little under 10s, got %s, %v", left, err)
	}
	if _, err := c.engine.ownerPTTL(t.Context(), key, "intruder"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("another token: expected ErrNotHeld, got %v", err)
	}
}

// TestLibraryOpsRollBack: a failed multi-key or reacquiring operation
// leaves nothing of its token behind.
func TestLibraryOpsRollBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	a, b := uniqueKey(t), uniqueKey(t)
	// b is held elsewhere on 3 backends, so AcquireAll gets only 2 votes.
	for _, i := range []int{2, 3, 4} {
		c.direct[i].Set(t.Context(), b, "other", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.acquireAll(t.Context(), []string{a, b}, "me", 10*time.Second))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		for _, key := range []string{a, b} {
			for i, v := range c.values(t, key) {
				if v == "me" {
					return fmt.Sprintf("backend %d still holds %s for the failed acquisition", i, key)
				}
			}
		}
		return ""
	})
}
