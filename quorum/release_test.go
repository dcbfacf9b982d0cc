package quorum

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestRelease(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.Acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if exp, got := "refused", outcome(second(c.engine.Release(t.Context(), key, "intruder"))); exp != got {
		t.Fatalf("release by a non-owner: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "owner", "owner", "owner", "owner", "owner") })

	if _, err := c.engine.Release(t.Context(), key, "owner"); err != nil {
		t.Fatalf("release by the owner: %v", err)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })

	if exp, got := "refused", outcome(second(c.engine.Release(t.Context(), key, "owner"))); exp != got {
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
	if exp, got := "refused", outcome(second(c.engine.Release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })
}

func TestReleaseMajorityDown(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.Acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	c.servers[0].Kill()
	c.servers[1].Kill()
	if exp, got := "noquorum", outcome(second(c.engine.Release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
}

func TestExtend(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.Acquire(t.Context(), key, "owner", 2*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	res, err := c.engine.Extend(t.Context(), key, "owner", 30*time.Second)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if res.Validity <= 20*time.Second || res.Validity > 30*time.Second {
		t.Errorf("validity after extend: %s, expected a little under 30s", res.Validity)
	}
	extended := 0
	for _, d := range c.direct {
		if d.PTTL(t.Context(), key).Val() > 20*time.Second {
			extended++
		}
	}
	if extended < c.engine.Quorum() {
		t.Errorf("extended on %d backends, fewer than a quorum", extended)
	}

	if exp, got := "refused", outcome(second(c.engine.Extend(t.Context(), key, "intruder", 30*time.Second))); exp != got {
		t.Fatalf("extend by a non-owner: expected %s, got %s", exp, got)
	}
	// The owner's lock is untouched by a refused stranger.
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "owner", "owner", "owner", "owner", "owner") })
}

// TestExtendBelowQuorumRollsBack: an extension that fails leaves nothing
// held, since its holder can no longer rely on the lock.
func TestExtendBelowQuorumRollsBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), key, "owner", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.Extend(t.Context(), key, "owner", 30*time.Second))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })
}

func second[T any](_ T, err error) error { return err }

func expectValues(got []string, exp ...string) string {
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		return fmt.Sprintf("backends hold %q, expected %q", got, exp)
	}
	return ""
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
	if exp, got := "noquorum", outcome(second(c.engine.Release(t.Context(), key, "owner"))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
}
