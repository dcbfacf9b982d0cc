package quorum

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// counts returns each backend's count of field in the hash key: "" when
// absent, "?" when the backend does not answer or the key is not a hash.
func (c *cluster) counts(t *testing.T, key, field string) []string {
	t.Helper()
	out := make([]string, len(c.direct))
	for i, d := range c.direct {
		v, err := d.HGet(t.Context(), key, field).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

// expectCounts says what is wrong unless the backends count field as exp.
func (c *cluster) expectCounts(t *testing.T, key, field string, exp ...string) func() string {
	return func() string {
		if got := c.counts(t, key, field); !slices.Equal(got, exp) {
			return fmt.Sprintf("%s counts %q for %s, expected %q", key, got, field, exp)
		}
		return ""
	}
}

// gone says what is wrong unless no backend has key.
func (c *cluster) gone(t *testing.T, key string) func() string {
	return func() string {
		for i, d := range c.direct {
			if n := d.Exists(t.Context(), key).Val(); n != 0 {
				fields, _ := d.HGetAll(t.Context(), key).Result()
				return fmt.Sprintf("backend %d still has %s: %q", i, key, fields)
			}
		}
		return ""
	}
}

// hashHold sets the hash lock key on backend i as held by field with count,
// for ttl.
func (c *cluster) hashHold(t *testing.T, i int, key, field string, count int, ttl time.Duration) {
	t.Helper()
	if err := c.direct[i].HSet(t.Context(), key, field, count).Err(); err != nil {
		t.Fatal(err)
	}
	c.direct[i].PExpire(t.Context(), key, ttl)
}

func hashAcquire(e *Engine, t *testing.T, key, field string, lease time.Duration) (Result, error) {
	return e.Lock(t.Context(), Lock{Op: OpHashAcquire, Keys: []string{key}, Token: field, TTL: lease})
}

func hashRelease(e *Engine, t *testing.T, key, field, latch string) (Result, error) {
	return e.Unlock(t.Context(), Unlock{Op: OpHashRelease, Keys: []string{key}, Token: field, TTL: 10 * time.Second, Latch: latch, LatchTTL: 10 * time.Second})
}

// TestHashLockReentry: an owner takes the lock, re-enters it (a count of 2
// on every backend), leaves it once (still held, one hold left) and once
// more (released: the hash is gone everywhere, and the release is
// published on every backend). An engine with fencing serves it as well,
// the re-entry answering the token the first hold minted.
func TestHashLockReentry(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	fencedCfg := c.cfg
	fencedCfg.Fencing = true
	for name, e := range map[string]*Engine{"plain": c.engine, "fencing": newEngine(t, fencedCfg)} {
		t.Run(name, func(t *testing.T) {
			key, field := uniqueKey(t), "uuid:1"
			sub := c.listen(t, 0, key)

			var fences []int64
			for range 2 {
				res, err := hashAcquire(e, t, key, field, 10*time.Second)
				if err != nil || res.Validity <= 0 || res.Validity > 10*time.Second {
					t.Fatalf("acquire: %+v, %v; want validity in (0, 10s]", res, err)
				}
				fences = append(fences, res.Fence)
			}
			if name == "plain" && (fences[0] != 0 || fences[1] != 0) {
				t.Errorf("tokens %d without fencing, want none", fences)
			}
			if name == "fencing" && (fences[0] <= 0 || fences[1] != fences[0]) {
				t.Errorf("tokens %d of the first hold and the re-entry, want one token", fences)
			}
			redistest.Eventually(t, c.expectCounts(t, key, field, "2", "2", "2"))

			res, err := hashRelease(e, t, key, field, "")
			if err != nil || res.Released || res.HoldCount != 1 {
				t.Fatalf("first release: %+v, %v; want still held once", res, err)
			}
			redistest.Eventually(t, c.expectCounts(t, key, field, "1", "1", "1"))

			res, err = hashRelease(e, t, key, field, "")
			if err != nil || !res.Released {
				t.Fatalf("second release: %+v, %v; want released", res, err)
			}
			redistest.Eventually(t, c.gone(t, key))
			select {
			case m := <-sub.Channel():
				if !strings.HasSuffix(m.Payload, field) || len(m.Payload) != releaseIDLen+len(field) {
					t.Errorf("release notice %q, want a release id and %q", m.Payload, field)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no release notice")
			}

			if _, err := hashRelease(e, t, key, field, ""); !errors.Is(err, ErrNotHeld) {
				t.Errorf("a third release: %v, want ErrNotHeld", err)
			}
		})
	}
}

// TestHashLockOtherOwner: another owner's acquisition is refused, told how
// long the holder has left (within the lease), and takes nothing; its
// release is refused (ErrNotHeld) and leaves the holder's count.
func TestHashLockOtherOwner(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key, lease := uniqueKey(t), 5*time.Second
	if _, err := hashAcquire(c.engine, t, key, "a:1", lease); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, c.expectCounts(t, key, "a:1", "1", "1", "1"))

	res, err := hashAcquire(c.engine, t, key, "b:1", lease)
	if !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 || res.HolderTTL > lease {
		t.Fatalf("another owner's acquire: %+v, %v; want ErrNotAcquired, HolderTTL in (0, %s]", res, err, lease)
	}
	if _, err := hashRelease(c.engine, t, key, "b:1", ""); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("another owner's release: %v, want ErrNotHeld", err)
	}
	if msg := c.expectCounts(t, key, "a:1", "1", "1", "1")(); msg != "" {
		t.Error(msg)
	}
	if msg := c.expectCounts(t, key, "b:1", "", "", "")(); msg != "" {
		t.Error(msg)
	}
}

// TestHashLockDivergedCounts: where one backend counts one hold less (it
// missed a re-entry), a quorum still holding the field keeps the lock
// held, and the last release is decided by the quorum; where one counts one
// more, the release that leaves the others at 0 releases the lock, and the
// field goes from that backend too.
func TestHashLockDivergedCounts(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	field := "uuid:7"
	take := func(key string) {
		t.Helper()
		for range 2 {
			if _, err := hashAcquire(c.engine, t, key, field, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		redistest.Eventually(t, c.expectCounts(t, key, field, "2", "2", "2"))
	}

	t.Run("one less", func(t *testing.T) {
		key := uniqueKey(t)
		take(key)
		c.direct[0].HSet(t.Context(), key, field, 1)
		res, err := hashRelease(c.engine, t, key, field, "")
		if err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("first release: %+v, %v; want still held once", res, err)
		}
		redistest.Eventually(t, c.expectCounts(t, key, field, "", "1", "1"))
		res, err = hashRelease(c.engine, t, key, field, "")
		if err != nil || !res.Released {
			t.Fatalf("second release: %+v, %v; want released", res, err)
		}
		redistest.Eventually(t, c.gone(t, key))
	})

	t.Run("one more", func(t *testing.T) {
		key := uniqueKey(t)
		take(key)
		c.direct[0].HSet(t.Context(), key, field, 3)
		res, err := hashRelease(c.engine, t, key, field, "")
		if err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("first release: %+v, %v; want still held, the quorum's count 1", res, err)
		}
		sub := c.listen(t, 0, key)
		res, err = hashRelease(c.engine, t, key, field, "")
		if err != nil || !res.Released {
			t.Fatalf("second release: %+v, %v; want released", res, err)
		}
		// Backend 0 still counted 1: the field goes there too, told.
		redistest.Eventually(t, c.gone(t, key))
		select {
		case <-sub.Channel():
		case <-time.After(10 * time.Second):
			t.Fatal("no release notice on the backend that still held the field")
		}
	})
}

// TestHashLockRollback: an acquisition refused by a quorum is undone where
// it was granted, leaving nothing of it (the attempt's record included);
// a re-entry refused, or undecided with two backends down, is undone where
// it was counted and leaves the owner's earlier hold there.
func TestHashLockRollback(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})

	t.Run("first acquisition", func(t *testing.T) {
		key := uniqueKey(t)
		c.hashHold(t, 0, key, "other:1", 1, time.Minute)
		c.hashHold(t, 1, key, "other:1", 1, time.Minute)
		res, err := hashAcquire(c.engine, t, key, "me:1", 10*time.Second)
		if !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 || res.HolderTTL > time.Minute {
			t.Fatalf("acquire against a quorum of another owner: %+v, %v; want ErrNotAcquired, HolderTTL in (0, 1m]", res, err)
		}
		// Backend 2 granted it; the rollback leaves no hash there at all.
		redistest.Eventually(t, func() string {
			if n := c.direct[2].Exists(t.Context(), key).Val(); n != 0 {
				return fmt.Sprintf("backend 2 keeps %q", c.direct[2].HGetAll(t.Context(), key).Val())
			}
			return ""
		})
		if msg := c.expectCounts(t, key, "other:1", "1", "1", "")(); msg != "" {
			t.Error(msg)
		}
	})

	t.Run("re-entry refused", func(t *testing.T) {
		key := uniqueKey(t)
		c.hashHold(t, 0, key, "me:1", 1, time.Minute)
		c.hashHold(t, 1, key, "other:1", 1, time.Minute)
		c.hashHold(t, 2, key, "other:1", 1, time.Minute)
		undos := commandCalls(t, c.servers[0])["hdel"]
		if _, err := hashAcquire(c.engine, t, key, "me:1", 10*time.Second); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("re-entry against a quorum of another owner: %v, want ErrNotAcquired", err)
		}
		// The refusals decide before backend 0 has answered: wait for its
		// re-entry, and for the rollback's HDEL of the attempt's record.
		redistest.Eventually(t, func() string {
			if n := commandCalls(t, c.servers[0])["hdel"]; n <= undos {
				return "backend 0 has not rolled the re-entry back"
			}
			return c.expectCounts(t, key, "me:1", "1", "", "")()
		})
		if fields := c.direct[0].HKeys(t.Context(), key).Val(); !slices.Equal(fields, []string{"me:1"}) {
			t.Errorf("backend 0 keeps the fields %q, want only the owner's", fields)
		}
	})

	t.Run("re-entry undecided", func(t *testing.T) {
		key := uniqueKey(t)
		if _, err := hashAcquire(c.engine, t, key, "me:1", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, c.expectCounts(t, key, "me:1", "1", "1", "1"))
		c.servers[1].Kill()
		c.servers[2].Kill()
		if _, err := hashAcquire(c.engine, t, key, "me:1", 30*time.Second); !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("re-entry with two backends down: %v, want ErrNoQuorum", err)
		}
		redistest.Eventually(t, func() string {
			if got := c.direct[0].HGet(t.Context(), key, "me:1").Val(); got != "1" {
				return fmt.Sprintf("backend 0 counts %q after the undecided re-entry, want 1", got)
			}
			return ""
		})
	})
}

// TestHashLockRollbackLate: an acquisition left undecided by two hung
// backends is rolled back on them too once they answer, late: nothing of
// it stays anywhere.
func TestHashLockRollbackLate(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
	key := uniqueKey(t)
	c.servers[1].Pause()
	c.servers[2].Pause()
	_, err := hashAcquire(c.engine, t, key, "me:1", 30*time.Second)
	c.servers[1].Resume()
	c.servers[2].Resume()
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("acquire with two backends hung: %v, want ErrNoQuorum", err)
	}
	redistest.Eventually(t, c.gone(t, key))
	// Each hung backend counted the attempt once it ran, and took it back:
	// its undo's HDEL of the attempt's record ran.
	redistest.Eventually(t, func() string {
		for _, i := range []int{1, 2} {
			if calls := commandCalls(t, c.servers[i]); calls["hincrby"] != 2 || calls["hdel"] < 1 {
				return fmt.Sprintf("backend %d ran HINCRBY %d times and HDEL %d, want 2 and at least 1", i, calls["hincrby"], calls["hdel"])
			}
		}
		return ""
	})
}

// TestHashLockLatch: the same release sent twice with the same latch takes
// one hold off on each backend; the second answers as the first did. A
// release with its own latch then releases the lock, and a retry of it
// answers "released" again.
func TestHashLockLatch(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key, field := uniqueKey(t), "uuid:3"
	for range 2 {
		if _, err := hashAcquire(c.engine, t, key, field, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, c.expectCounts(t, key, field, "2", "2", "2"))
	for try := range 2 {
		res, err := hashRelease(c.engine, t, key, field, "latch:"+key+":1")
		if err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("release, try %d: %+v, %v; want still held once", try, res, err)
		}
		redistest.Eventually(t, c.expectCounts(t, key, field, "1", "1", "1"))
	}
	for try := range 2 {
		res, err := hashRelease(c.engine, t, key, field, "latch:"+key+":2")
		if err != nil || !res.Released {
			t.Fatalf("last release, try %d: %+v, %v; want released", try, res, err)
		}
		redistest.Eventually(t, c.gone(t, key))
	}
	if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpHashRelease, Keys: []string{key}, Token: field, TTL: time.Second,
		Latch: ReservedPrefix + "x", LatchTTL: time.Second}); err != ErrReservedKey {
		t.Errorf("a reserved latch: %v, want ErrReservedKey", err)
	}
}

// TestHashLockRenewFields: a hash lock the owner holds is renewed; one
// another owner holds, a key of another type, and one the owner holds on a
// single backend are not, and a refusal deletes nothing.
func TestHashLockRenewFields(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	ctx := t.Context()
	mine, other, str, minority := uniqueKey(t), uniqueKey(t), uniqueKey(t), uniqueKey(t)
	if _, err := hashAcquire(c.engine, t, mine, "me:1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := hashAcquire(c.engine, t, other, "other:1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, c.expectCounts(t, mine, "me:1", "1", "1", "1"))
	redistest.Eventually(t, c.expectCounts(t, other, "other:1", "1", "1", "1"))
	for _, d := range c.direct {
		d.Set(ctx, str, "me:1", time.Minute)
	}
	c.hashHold(t, 0, minority, "me:1", 1, time.Minute)

	got := c.engine.Renew(ctx, Renewal{Hash: true, TTL: 30 * time.Second, Locks: []Held{{Key: mine, Token: "me:1"}, {Key: other, Token: "me:1"}, {Key: str, Token: "me:1"}, {Key: minority, Token: "me:1"}}})
	want := []error{nil, ErrNotHeld, ErrNotHeld, ErrNotHeld}
	for i, r := range got {
		if r.Err != want[i] {
			t.Errorf("lock %d: %v, want %v", i, r.Err, want[i])
		}
	}
	if got[0].Validity <= 0 || got[0].Validity >= 30*time.Second {
		t.Errorf("validity %s, want in (0, 30s)", got[0].Validity)
	}
	for i, d := range c.direct {
		if pttl := d.PTTL(ctx, mine).Val(); pttl <= 20*time.Second {
			t.Errorf("backend %d: the renewed lock has %s left", i, pttl)
		}
		if pttl := d.PTTL(ctx, other).Val(); pttl > 5*time.Second {
			t.Errorf("backend %d: another owner's lock has %s left, was renewed", i, pttl)
		}
	}
	if msg := c.expectCounts(t, other, "other:1", "1", "1", "1")(); msg != "" {
		t.Error(msg)
	}
	if msg := c.expectCounts(t, minority, "me:1", "1", "", "")(); msg != "" {
		t.Errorf("a refused renewal: %s", msg)
	}
	if v := c.values(t, str); !slices.Equal(v, []string{"me:1", "me:1", "me:1"}) {
		t.Errorf("a string key after a refused renewal: %q", v)
	}
}

// TestHashLockReads: the count a quorum has at least (the quorum-th
// largest), whether a quorum has the field, and how long a quorum has the
// key (the quorum-th longest PTTL, less drift).
func TestHashLockReads(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	ctx := t.Context()
	read := func(op Op, key, field string) (Reading, error) {
		return c.engine.Read(ctx, Read{Op: op, Key: key, Token: field})
	}
	key := uniqueKey(t)
	for i, ttl := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		c.hashHold(t, i, key, "me:1", 3-i, ttl)
	}
	c.direct[0].HSet(ctx, key, "two:1", 1)

	if r, err := read(OpHashCount, key, "me:1"); err != nil || r.Count != 2 {
		t.Errorf("count: %+v, %v; want 2", r, err)
	}
	if r, err := read(OpHashExists, key, "me:1"); err != nil || !r.Exists {
		t.Errorf("exists: %+v, %v; want true", r, err)
	}
	if r, err := read(OpHashExists, key, "two:1"); err != nil || r.Exists {
		t.Errorf("a field on one backend exists: %+v, %v; want false", r, err)
	}
	if _, err := read(OpHashCount, key, "two:1"); err != ErrNotFound {
		t.Errorf("count of a field on one backend: %v, want ErrNotFound", err)
	}
	if r, err := read(OpHashPTTL, key, ""); err != nil || r.TTL <= 19*time.Second || r.TTL > 20*time.Second {
		t.Errorf("pttl: %+v, %v; want in (19s, 20s]", r, err)
	}
	if _, err := read(OpHashPTTL, uniqueKey(t), ""); err != ErrNotFound {
		t.Errorf("pttl of an absent key: %v, want ErrNotFound", err)
	}
	// PTTL's own operation answers the same for a key without a value.
	if r, err := read(OpPTTL, key, ""); err != nil || r.TTL <= 19*time.Second || r.TTL > 20*time.Second {
		t.Errorf("OpPTTL of a hash lock: %+v, %v; want in (19s, 20s]", r, err)
	}

	str, forever := uniqueKey(t), uniqueKey(t)
	for _, d := range c.direct {
		d.Set(ctx, str, "me:1", time.Minute)
		d.HSet(ctx, forever, "me:1", 1)
	}
	if r, err := read(OpHashExists, str, "me:1"); err != nil || r.Exists {
		t.Errorf("a string key's field exists: %+v, %v; want false", r, err)
	}
	if _, err := read(OpHashPTTL, forever, ""); err != ErrNoExpiry {
		t.Errorf("pttl without expiry: %v, want ErrNoExpiry", err)
	}
	// The attempt's record beside the owner's field is no owner.
	taken := uniqueKey(t)
	if _, err := hashAcquire(c.engine, t, taken, "me:1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, c.expectCounts(t, taken, "me:1", "1", "1", "1"))
	if r, err := read(OpHashCount, taken, "me:1"); err != nil || r.Count != 1 {
		t.Errorf("count after one acquisition: %+v, %v; want 1", r, err)
	}
	// No field that starts with a NUL byte, where the engine keeps its
	// own, is an owner: the attempt record, the fencing token's field, or
	// any other.
	for _, field := range []string{attemptPrefix + "me:1", "\x00fence", "\x00x"} {
		if _, err := hashAcquire(c.engine, t, taken, field, 10*time.Second); err != ErrReservedKey {
			t.Errorf("%q acquired as an owner: %v, want ErrReservedKey", field, err)
		}
		for _, op := range []Op{OpHashExists, OpHashCount, OpHashFence} {
			if _, err := read(op, taken, field); err != ErrReservedKey {
				t.Errorf("%q read as an owner (%s): %v, want ErrReservedKey", field, op, err)
			}
		}
		if r := c.engine.Renew(ctx, Renewal{Hash: true, TTL: 10 * time.Second, Locks: []Held{{Key: taken, Token: field}}}); r[0].Err != ErrReservedKey {
			t.Errorf("%q renewed as an owner: %v, want ErrReservedKey", field, r[0].Err)
		}
		if _, err := hashRelease(c.engine, t, taken, field, ""); err != ErrReservedKey {
			t.Errorf("%q released as an owner: %v, want ErrReservedKey", field, err)
		}
	}
	if msg := c.expectCounts(t, taken, "me:1", "1", "1", "1")(); msg != "" {
		t.Errorf("after the refused requests: %s", msg)
	}
}

// TestHashLockReleaseUndecided: a release that two hung backends leave
// undecided is retried with the same latch once they are back; each
// backend takes one hold off, whether it ran the first request late or
// only the retry, and the retry answers "still held".
func TestHashLockReleaseUndecided(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
	key, field, latch := uniqueKey(t), "uuid:9", "latch:"+t.Name()
	for range 2 {
		if _, err := hashAcquire(c.engine, t, key, field, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, c.expectCounts(t, key, field, "2", "2", "2"))
	c.servers[1].Pause()
	c.servers[2].Pause()
	_, err := hashRelease(c.engine, t, key, field, latch)
	c.servers[1].Resume()
	c.servers[2].Resume()
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("release with two backends hung: %v, want ErrNoQuorum", err)
	}
	redistest.Eventually(t, func() string {
		res, err := hashRelease(c.engine, t, key, field, latch)
		if err != nil || res.Released || res.HoldCount != 1 {
			return fmt.Sprintf("the retry: %+v, %v; want still held once", res, err)
		}
		return ""
	})
	// The retry answers once a quorum did; every backend runs all that was
	// sent to it, the slowest included, before the counts are read (a PING
	// answered by each on the same connection).
	waitAllCount(t, c.engine)
	if msg := c.expectCounts(t, key, field, "1", "1", "1")(); msg != "" {
		t.Error(msg)
	}
}

// TestHashLockReleaseNoQuorumHolds: the fenced Redisson unlock that
// answered NOQUORUM "4 of 5 backends answered but only 0 agreed" under
// contention, reproduced. "0 agreed" counted the backends still holding
// the lock after the release, not those that had it: none was missing a
// copy it had been given. Contenders' attempts (planted here, as if their
// rollbacks were still on the way) refuse the lock on two backends of
// five, so it is granted on a bare quorum, and its holder releases it at
// once: no top-up can copy it there, the contenders hold them. The release
// meets one of the three granting backends hung: two released it, two
// never had it, and the hung one cannot make a quorum that still holds
// it, whatever it did, so the answer is "not held".
func TestHashLockReleaseNoQuorumHolds(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true, NodeTimeout: 300 * time.Millisecond})
	key, field := uniqueKey(t), "uuid:1"
	for _, i := range []int{3, 4} {
		if err := c.direct[i].HSet(t.Context(), key, "contender:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.direct[i].PExpire(t.Context(), key, 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	copies := c.engine.TopUps().Copies
	if _, err := hashAcquire(c.engine, t, key, field, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c.servers[2].Pause()
	_, err := hashRelease(c.engine, t, key, field, "latch:"+t.Name())
	c.servers[2].Resume()
	if !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release: %v, want ErrNotHeld", err)
	}
	if got := c.engine.TopUps().Copies; got != copies {
		t.Errorf("%d copies made on the contenders' backends", got-copies)
	}
}

// TestHashLockReleaseSplitSays: a release left undecided says what the
// backends answered, not how many "agreed": here two released the lock,
// one still holds it (it had counted one more hold), and the two hung
// ones could make a quorum with it.
func TestHashLockReleaseSplitSays(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
	key, field := uniqueKey(t), "uuid:1"
	if _, err := hashAcquire(c.engine, t, key, field, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, c.expectCounts(t, key, field, "1", "1", "1", "1", "1"))
	if err := c.direct[2].HSet(t.Context(), key, field, 2).Err(); err != nil {
		t.Fatal(err)
	}
	c.servers[3].Pause()
	c.servers[4].Pause()
	_, err := hashRelease(c.engine, t, key, field, "latch:"+t.Name())
	c.servers[3].Resume()
	c.servers[4].Resume()
	var nq *NoQuorumError
	if !errors.As(err, &nq) {
		t.Fatalf("release: %v, want a *NoQuorumError", err)
	}
	if want := "3 of 5 backends answered but no 3 agreed: released by 2, still held by 1 (2 timeout)"; nq.Reason() != want {
		t.Errorf("NOQUORUM %q, want %q", nq.Reason(), want)
	}
}

// TestReleaseTally: the rule of a hash lock release, for 3 and 5 backends:
// still held while a quorum still holds the field; released once a quorum
// had it and no quorum can still hold it; not the owner's when no quorum
// can have had it; undecided between. Once no more answers will come
// (final), "not held" where no quorum can still hold it.
func TestReleaseTally(t *testing.T) {
	names := map[int]string{undecidedRelease: "undecided", stillHeld: "held", lockReleased: "released", notOwned: "not owner"}
	for _, tc := range []struct {
		total, released, held, notOwner int
		want, final                     int
	}{
		{3, 0, 2, 0, stillHeld, stillHeld},
		{3, 1, 2, 0, stillHeld, stillHeld},
		{3, 2, 0, 0, lockReleased, lockReleased},
		{3, 2, 1, 0, lockReleased, lockReleased},         // the one still holding missed a re-entry
		{3, 1, 1, 1, lockReleased, lockReleased},         // the field was on a quorum, and is on one backend now
		{3, 1, 1, 0, undecidedRelease, undecidedRelease}, // the silent one may still hold it
		{3, 1, 0, 0, undecidedRelease, undecidedRelease},
		{3, 0, 0, 2, notOwned, notOwned},
		{3, 1, 0, 2, notOwned, notOwned},                 // one backend's stale field
		{3, 0, 1, 1, undecidedRelease, undecidedRelease}, // the silent one decides
		{3, 0, 0, 0, undecidedRelease, undecidedRelease}, // nobody answered
		{5, 2, 1, 0, undecidedRelease, undecidedRelease}, // two silent could still hold it with the one
		{5, 3, 0, 0, lockReleased, lockReleased},         // the two silent cannot make a quorum that holds it
		{5, 2, 3, 0, stillHeld, stillHeld},
		{5, 2, 2, 1, lockReleased, lockReleased},
		{5, 1, 1, 3, notOwned, notOwned},
		{5, 1, 1, 1, undecidedRelease, undecidedRelease},
		// No quorum can still hold it: whether the silent ones made this
		// release the last, or it was gone before, nobody holds it.
		{5, 2, 0, 2, undecidedRelease, notOwned}, // Redisson's RFencedLock unlock that answered NOQUORUM
		{3, 1, 0, 1, undecidedRelease, notOwned},
		{5, 1, 0, 2, undecidedRelease, notOwned},
	} {
		tally := releaseTally{total: tc.total, quorum: tc.total/2 + 1, released: tc.released, held: tc.held, notOwner: tc.notOwner}
		if got := tally.outcome(); got != tc.want {
			t.Errorf("N=%d, released %d, held %d, not owner %d: %s, want %s", tc.total, tc.released, tc.held, tc.notOwner, names[got], names[tc.want])
		}
		if got := tally.final(); got != tc.final {
			t.Errorf("N=%d, released %d, held %d, not owner %d, final: %s, want %s", tc.total, tc.released, tc.held, tc.notOwner, names[got], names[tc.final])
		}
	}
}

// TestHashUndoOwnFields: the rollback of a first hold deletes the hash
// when only the engine's own fields (a NUL byte first) would be left, so
// that they never keep it, refusing every owner, for its lease; the
// rollback of a re-entry keeps the owner's earlier hold and those fields;
// a hash with another owner's field left is kept.
func TestHashUndoOwnFields(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true})
	n, d, ctx := c.engine.nodes[0], c.direct[0], t.Context()
	set := c.engine.set.Token()
	acquire := func(key, attempt string) {
		t.Helper()
		if _, err := n.run(ctx, hashAcquireScript, []string{key}, "me:1", 10000, attempt, set); err != nil {
			t.Fatal(err)
		}
	}
	undo := func(key, attempt string) {
		t.Helper()
		r, err := n.run(ctx, hashUndoScript, []string{key}, "me:1", attempt)
		if done, _ := r.Integer(); err != nil || done != 1 {
			t.Fatalf("undo of %s: %d, %v; want 1", attempt, done, err)
		}
	}

	first := uniqueKey(t)
	acquire(first, "a1")
	d.HSet(ctx, first, "\x00fence", fenceText(42), attemptPrefix+"gone:1", "a0")
	undo(first, "a1")
	if fields := d.HGetAll(ctx, first).Val(); len(fields) != 0 {
		t.Errorf("the first hold undone leaves %q", fields)
	}

	reentry := uniqueKey(t)
	acquire(reentry, "a1")
	d.HSet(ctx, reentry, "\x00fence", fenceText(42))
	acquire(reentry, "a2")
	undo(reentry, "a2")
	if got := d.HGet(ctx, reentry, "me:1").Val(); got != "1" {
		t.Errorf("the re-entry undone leaves the count %q, want 1", got)
	}
	if got := d.HGet(ctx, reentry, "\x00fence").Val(); got != fenceText(42) {
		t.Errorf("the re-entry undone leaves the token %q, want the lock's", got)
	}
	if ttl := d.PTTL(ctx, reentry).Val(); ttl <= 0 {
		t.Errorf("the re-entry undone leaves the lease %s", ttl)
	}

	shared := uniqueKey(t)
	acquire(shared, "a1")
	d.HSet(ctx, shared, "\x00fence", fenceText(42), "other:1", 1)
	undo(shared, "a1")
	if fields := d.HKeys(ctx, shared).Val(); !slices.Equal(fields, []string{"\x00fence", "other:1"}) {
		t.Errorf("with another owner's field the undo leaves %q, want it and the token", fields)
	}
}

// A holder whose key answers PTTL 0 still holds it, for less than a
// millisecond: the contender is told to wait that long, not failed. A
// key without a TTL gives no lease to wait for.
func TestHeldForExpiringLease(t *testing.T) {
	for _, c := range []struct {
		pttl int64
		want time.Duration
	}{{0, time.Millisecond}, {1, time.Millisecond}, {250, 250 * time.Millisecond}, {-1, -time.Millisecond}} {
		if got := heldFor(c.pttl); got != c.want {
			t.Errorf("heldFor(%d) = %v, want %v", c.pttl, got, c.want)
		}
	}
	var least leastTTL
	least.note(heldFor(-1))
	if got := least.get(); got != 0 {
		t.Fatalf("a key without a TTL gave a lease of %v", got)
	}
	least.note(heldFor(0))
	if got := least.get(); got != time.Millisecond {
		t.Fatalf("a lease ending within the millisecond gave %v, want 1ms", got)
	}
}

// TestHashLockSplitContenders: with one of five backends down, two
// contenders can split the four left two and two, and both fail. Each is
// told so (Result.Split): nobody holds the lock, and no release will say
// it is free. A refusal by a holder on a quorum is not a split.
func TestHashLockSplitContenders(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
	c.servers[0].Kill()

	split := uniqueKey(t)
	c.hashHold(t, 1, split, "other:1", 1, time.Minute)
	c.hashHold(t, 2, split, "other:1", 1, time.Minute)
	res, err := hashAcquire(c.engine, t, split, "me:1", 10*time.Second)
	// Undecided, as the backend down might have granted it.
	if !errors.Is(err, ErrNoQuorum) || !res.Split || res.HolderTTL <= 0 {
		t.Fatalf("acquire split two and two: %+v, %v; want ErrNoQuorum, Split, the other's HolderTTL", res, err)
	}
	redistest.Eventually(t, c.expectCounts(t, split, "me:1", "?", "", "", "", ""))

	held := uniqueKey(t)
	for i := 1; i <= 3; i++ {
		c.hashHold(t, i, held, "other:1", 1, time.Minute)
	}
	res, err = hashAcquire(c.engine, t, held, "me:1", 10*time.Second)
	if !errors.Is(err, ErrNotAcquired) || res.Split || res.HolderTTL <= 0 {
		t.Fatalf("acquire against a quorum of another owner: %+v, %v; want ErrNotAcquired, not Split, HolderTTL", res, err)
	}

	// The same for a plain lock: two refusals and two grants of four.
	plain := uniqueKey(t)
	for i := 1; i <= 2; i++ {
		if err := c.direct[i].Set(t.Context(), plain, "other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := c.engine.acquire(t.Context(), plain, "me", 10*time.Second); !errors.Is(err, ErrNoQuorum) || !res.Split {
		t.Fatalf("plain acquire split two and two: %+v, %v; want ErrNoQuorum, Split", res, err)
	}
}
