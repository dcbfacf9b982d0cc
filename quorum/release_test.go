package quorum

import (
	"fmt"
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

func TestExtend(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 2*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	res, err := c.engine.extend(t.Context(), key, "owner", 30*time.Second)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if res.Validity <= 20*time.Second || res.Validity > 30*time.Second {
		t.Errorf("validity after extend: %s, expected a little under 30s", res.Validity)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 20*time.Second) })

	if exp, got := "refused", outcome(second(c.engine.extend(t.Context(), key, "intruder", 30*time.Second))); exp != got {
		t.Fatalf("extend by a non-owner: expected %s, got %s", exp, got)
	}
	// The owner's lock is untouched by a refused stranger.
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, "owner") })
}

// TestExtendBelowQuorumRollsBack: an extension that fails leaves nothing
// held, since its holder can no longer rely on the lock.
func TestExtendBelowQuorumRollsBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), key, "owner", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.extend(t.Context(), key, "owner", 30*time.Second))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })
}

func second[T any](_ T, err error) error { return err }

// holdsOnQuorum says what is wrong unless a quorum of backends holds value
// for key: a minority may lag or miss a write and still be correct.
func (c *cluster) holdsOnQuorum(t *testing.T, key, value string) string {
	held := 0
	for _, v := range c.values(t, key) {
		if v == value {
			held++
		}
	}
	if held < c.engine.Quorum() {
		return fmt.Sprintf("%d backends hold %q for %s, fewer than a quorum (%q)", held, value, key, c.values(t, key))
	}
	return ""
}

// ttlOnQuorum says what is wrong unless a quorum of backends gives key a
// TTL above min.
func (c *cluster) ttlOnQuorum(t *testing.T, key string, min time.Duration) string {
	n := 0
	for _, d := range c.direct {
		if d.PTTL(t.Context(), key).Val() > min {
			n++
		}
	}
	if n < c.engine.Quorum() {
		return fmt.Sprintf("%d backends give %s a TTL above %s, fewer than a quorum", n, key, min)
	}
	return ""
}

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
	err := second(c.engine.release(t.Context(), key, "owner"))
	if exp, got := "noquorum", outcome(err); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	// A quorum answered: the text must say what kept it from deciding.
	if exp := "4 of 5 backends answered but only 2 agreed, 3 needed"; !strings.Contains(err.Error(), exp) {
		t.Errorf("error %q does not say %q", err, exp)
	}
}
