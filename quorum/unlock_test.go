package quorum

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestRelease(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if exp, got := "refused", outcome(second(c.engine.release(t.Context(), key, "intruder"))); exp != got {
		t.Fatalf("release by a non-owner: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, "owner") })

	if _, err := c.engine.release(t.Context(), key, "owner"); err != nil {
		t.Fatalf("release by the owner: %v", err)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })

	if exp, got := "refused", outcome(second(c.engine.release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("second release: expected %s, got %s", exp, got)
	}
}

// TestReleaseBelowQuorum: a token that holds the key on fewer than a quorum
// (the rest expired or were lost) is told it did not hold the lock.
func TestReleaseBelowQuorum(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), key, "owner", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })
}

func TestReleaseMajorityDown(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	c.servers[0].Kill()
	c.servers[1].Kill()
	if exp, got := "noquorum", outcome(second(c.engine.release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
}

// TestReleaseUndecidable: when the backends that did not answer could have
// made a quorum of deletions, the release cannot say the lock was not held.
func TestReleaseUndecidable(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: 200 * time.Millisecond})
	key := uniqueKey(t)
	// Held on 0, 1 (and on 2, which is about to hang); 3 and 4 are empty.
	for _, i := range []int{0, 1, 2} {
		c.direct[i].Set(t.Context(), key, "owner", time.Minute)
	}
	c.servers[2].Pause()
	defer c.servers[2].Resume()
	err := second(c.engine.release(t.Context(), key, "owner"))
	if exp, got := "noquorum", outcome(err); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	// A quorum answered: the text must say what kept it from deciding.
	if exp := "4 of 5 backends answered but only 2 agreed, 3 needed"; !strings.Contains(err.Error(), exp) {
		t.Errorf("error %q does not say %q", err, exp)
	}
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
