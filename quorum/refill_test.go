package quorum

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// refillTTL is the lease of the locks that TestRenewalsRefillRestarts
// holds through restarts; its max_ttl, for which a restarted backend is
// quarantined, has a fifth more: redis-py's extend adds a fifth of the
// lease every fifth of it, and on a backend where the last grant or
// extension landed after its reply (a straggler) the sum would otherwise
// pass max_ttl, and that backend refuse.
const refillTTL = 2 * time.Second

const refillMaxTTL = refillTTL + refillTTL/5

// TestRenewalsRefillRestarts: a lock held for long, renewed all along,
// keeps every backend while they restart empty one at a time, as the
// docs/backends.md tells operators to restart them (each back in, its quarantine
// over, before the next). A renewal gives the lock back to the backend
// that lost it, even while it is quarantined. Without that, the third
// restart of five would leave the lock on two backends, and its renewals
// would fail: the holder would lose a lock nobody else took.
// For each way a lock is renewed: an extension (redsync's Extend and most
// libraries'), one that adds to the TTL left (redis-py's), a batch
// renewal (session-bound locks), and a batch renewal of Redisson's hash
// locks, whose hold count comes back as the quorum has it; and, with
// fencing, the copies carry the lock's fencing token.
func TestRenewalsRefillRestarts(t *testing.T) {
	// acquire takes the lock, and answers the value every backend should
	// have: with fencing, the lock's token comes back with it.
	acquire := func(c *cluster, key string) (string, int64, error) {
		res, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: refillTTL})
		if res.Fence > 0 {
			return "me\x00" + fenceText(res.Fence), res.Fence, err
		}
		return "me", 0, err
	}
	// holdTwice takes a Redisson lock with a nested hold: the count must
	// come back as 2.
	holdTwice := func(c *cluster, key string) (string, int64, error) {
		var res Result
		for range 2 {
			var err error
			if res, err = hashAcquire(c.engine, t, key, "me:1", refillTTL); err != nil {
				return "", 0, err
			}
		}
		return "2", res.Fence, nil
	}
	renewFields := func(c *cluster, key string) error {
		return c.engine.Renew(t.Context(), Renewal{Hash: true, TTL: refillTTL, Locks: []Held{{Key: key, Token: "me:1"}}})[0].Err
	}
	counts := func(c *cluster, key string) []string { return c.counts(t, key, "me:1") }
	extend := func(c *cluster, key string) error {
		_, err := c.engine.Lock(t.Context(), Lock{Op: OpExtend, Keys: []string{key}, Token: "me", TTL: refillTTL})
		return err
	}
	// extendBy adds a fifth of the lease, renewed every fifth: redis-py's
	// extend, which keeps the TTL within max_ttl.
	extendBy := func(c *cluster, key string) error {
		_, err := c.engine.Lock(t.Context(), Lock{Op: OpExtendBy, Keys: []string{key}, Token: "me", TTL: refillTTL / 5})
		return err
	}
	renew := func(c *cluster, key string) error {
		return c.engine.Renew(t.Context(), Renewal{TTL: refillTTL, Locks: []Held{{Key: key, Token: "me"}}})[0].Err
	}
	values := func(c *cluster, key string) []string { return c.values(t, key) }
	for _, tc := range []struct {
		name    string
		fencing bool
		// take answers what has should find on every backend, and the
		// lock's fencing token.
		take  func(c *cluster, key string) (want string, fence int64, err error)
		renew func(c *cluster, key string) error
		has   func(c *cluster, key string) []string // each backend's value, "" where absent
	}{
		{name: "extend", take: acquire, renew: extend, has: values},
		{name: "extend by", take: acquire, renew: extendBy, has: values},
		{name: "renew", take: acquire, renew: renew, has: values},
		{name: "renew fields", take: holdTwice, renew: renewFields, has: counts},
		{name: "fenced extend", fencing: true, take: acquire, renew: extend, has: values},
		{name: "fenced extend by", fencing: true, take: acquire, renew: extendBy, has: values},
		{name: "fenced renew", fencing: true, take: acquire, renew: renew, has: values},
		{name: "fenced renew fields", fencing: true, take: holdTwice, renew: renewFields, has: counts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newSteppedCluster(t, []float64{1, 1, 1, 1, 1}, Config{MaxTTL: refillMaxTTL, Fencing: tc.fencing})
			c.step(t, refillMaxTTL)
			waitAllCount(t, c.engine)
			key := uniqueKey(t)
			want, fence, err := tc.take(c, key)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fencing != (fence > 0) {
				t.Fatalf("the lock's fencing token is %d, with fencing %v", fence, tc.fencing)
			}
			everywhere := slices.Repeat([]string{want}, 5)
			// holdUntil steps time a fifth of the lease at a time and
			// renews the lock after each step, as a watchdog does, until
			// cond says nothing is wrong.
			holdUntil := func(what string, cond func() string) {
				t.Helper()
				for steps := 0; ; steps++ {
					wrong := cond()
					if wrong == "" {
						return
					}
					if steps == 50 {
						t.Fatalf("%s: %s", what, wrong)
					}
					// The last renewal's refill rounds are due by now; on the
					// real clock they pass long before the next renewal.
					c.topUpsRun(t, refillTTL/5)
					if err := tc.renew(c, key); err != nil {
						t.Fatalf("%s: the renewal failed: %v; backends have %q", what, err, tc.has(c, key))
					}
				}
			}
			startCopies := c.engine.topUps.copies.Load()
			for i := range 3 {
				c.servers[i].Restart()
				c.connected(t, i)
				quarantined := false
				holdUntil(fmt.Sprintf("backend %d restarted", i), func() string {
					quarantined = quarantined || c.engine.Backends()[i].State == StateQuarantined
					if got := tc.has(c, key); got[i] != want {
						return fmt.Sprintf("not given the lock back: backends have %q", got)
					}
					return ""
				})
				holdUntil(fmt.Sprintf("backend %d's quarantine", i), func() string {
					st := c.engine.Backends()[i].State
					quarantined = quarantined || st == StateQuarantined
					if st != StateUp {
						return "still " + st.String()
					}
					return ""
				})
				if !quarantined {
					t.Fatalf("backend %d was never seen quarantined: the test restarted nothing", i)
				}
			}
			holdUntil("after the restarts", func() string {
				if got := tc.has(c, key); !slices.Equal(got, everywhere) {
					return fmt.Sprintf("backends have %q, want %q", got, everywhere)
				}
				return ""
			})
			if got := c.engine.topUps.copies.Load() - startCopies; got < 3 {
				t.Errorf("%d copies counted, want at least 3", got)
			}
			for i, d := range c.direct {
				if left := d.PTTL(t.Context(), key).Val(); left <= 0 || left > refillMaxTTL {
					t.Errorf("backend %d: %v left, want within max_ttl %v", i, left, refillMaxTTL)
				}
			}
			if tc.fencing {
				// The copies carry the lock's token, and a later lock on a
				// refilled backend must mint more: each counter is at
				// least the token.
				for i, d := range c.direct {
					if counter := d.Get(t.Context(), fenceCounterKey).Val(); counter < fenceText(fence) {
						t.Errorf("backend %d's fencing counter %q, below the lock's token %d", i, counter, fence)
					}
					if d.Type(t.Context(), key).Val() == "hash" {
						if got := d.HGet(t.Context(), key, "\x00fence").Val(); got != fenceText(fence) {
							t.Errorf("backend %d's hash carries the token %q, want %d", i, got, fence)
						}
					}
				}
			}
		})
	}
}

// TestRenewalRefillStopsAtRelease: a renewal that finds a backend without
// the lock tops it up there, unless the owner's release is sent first: no
// copy may outlive the lock. Backend 4 holds the key for another token, as
// a lock lost there and taken by a contender would; it frees the key only
// after the owner's release, so a top-up that went on past the release
// would leave the owner's copy there.
func TestRenewalRefillStopsAtRelease(t *testing.T) {
	for _, fields := range []bool{false, true} {
		t.Run("fields="+strconv.FormatBool(fields), func(t *testing.T) {
			c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
			key := uniqueKey(t)
			for i, d := range c.direct {
				owner := "me"
				if i == 4 {
					owner = "other"
				}
				if fields {
					c.hashHold(t, i, key, owner, 1, time.Minute)
				} else if err := d.Set(t.Context(), key, owner, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if fields {
				err = c.engine.Renew(t.Context(), Renewal{Hash: true, TTL: 30 * time.Second, Locks: []Held{{Key: key, Token: "me"}}})[0].Err
			} else {
				err = c.engine.Renew(t.Context(), Renewal{TTL: 30 * time.Second, Locks: []Held{{Key: key, Token: "me"}}})[0].Err
			}
			if err != nil {
				t.Fatalf("renewal: %v", err)
			}
			if fields {
				_, err = hashRelease(c.engine, t, key, "me", "")
			} else {
				_, err = c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "me"})
			}
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			if err := c.direct[4].Del(t.Context(), key).Err(); err != nil {
				t.Fatal(err)
			}
			topUpsOver(t, c.engine)
			redistest.Eventually(t, c.gone(t, key))
			if c.engine.topUps.started.Load() != 1 || c.engine.topUps.copies.Load() != 0 {
				t.Fatalf("started %d, copies %d: want one top-up, stopped before any copy", c.engine.topUps.started.Load(), c.engine.topUps.copies.Load())
			}
		})
	}
}
