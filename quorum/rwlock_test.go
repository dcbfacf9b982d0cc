package quorum

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// rwPrefix is the timeout-key prefix of the read-write lock key, as
// Redisson makes it for a name without braces.
func rwPrefix(key string) string { return "{" + key + "}" }

func readAcquire(e *Engine, t *testing.T, key, owner string, lease time.Duration) (Result, error) {
	return e.Lock(t.Context(), Lock{Op: OpReadAcquire, Keys: []string{key, rwPrefix(key)}, Token: owner, TTL: lease})
}

func writeAcquire(e *Engine, t *testing.T, key, owner string, lease time.Duration) (Result, error) {
	return e.Lock(t.Context(), Lock{Op: OpWriteAcquire, Keys: []string{key}, Token: owner, TTL: lease})
}

func readRelease(e *Engine, t *testing.T, key, owner, latch string) (Result, error) {
	return e.Unlock(t.Context(), Unlock{Op: OpReadRelease, Keys: []string{key, rwPrefix(key)}, Token: owner, Latch: latch, LatchTTL: 10 * time.Second})
}

func writeRelease(e *Engine, t *testing.T, key, owner string) (Result, error) {
	return e.Unlock(t.Context(), Unlock{Op: OpWriteRelease, Keys: []string{key}, Token: owner, TTL: 10 * time.Second})
}

// rwState is one backend's read-write lock key, as a text that a test
// compares: its fields in order (the engine's own, a NUL byte first, left
// out), then each owner's read holds' timeout keys that exist; "" for no
// key, "?" for a backend that does not answer.
func (c *cluster) rwState(t *testing.T, i int, key string) string {
	t.Helper()
	fields, err := c.direct[i].HGetAll(t.Context(), key).Result()
	if err != nil {
		return "?"
	}
	var parts []string
	for f, v := range fields {
		if !strings.HasPrefix(f, ownFieldPrefix) {
			parts = append(parts, f+"="+v)
		}
	}
	slices.Sort(parts)
	timeouts, _ := c.direct[i].Keys(t.Context(), rwPrefix(key)+":*").Result()
	slices.Sort(timeouts)
	for _, k := range timeouts {
		parts = append(parts, strings.TrimPrefix(k, rwPrefix(key)+":"))
	}
	return strings.Join(parts, " ")
}

// expectRW says what is wrong unless each backend's rwState is exp's.
func (c *cluster) expectRW(t *testing.T, key string, exp ...string) func() string {
	return func() string {
		for i := range c.direct {
			if got := c.rwState(t, i, key); got != exp[i] {
				return fmt.Sprintf("backend %d has %q of %s, expected %q", i, got, key, exp[i])
			}
		}
		return ""
	}
}

// rwHold writes a read-write lock's state on backend i: mode, then owner
// fields with counts, each read hold with its timeout key, for ttl.
func (c *cluster) rwHold(t *testing.T, i int, key, mode string, ttl time.Duration, counts map[string]int) {
	t.Helper()
	ctx := t.Context()
	d := c.direct[i]
	if err := d.HSet(ctx, key, "mode", mode).Err(); err != nil {
		t.Fatal(err)
	}
	for field, n := range counts {
		d.HSet(ctx, key, field, n)
		if !strings.HasSuffix(field, WriterSuffix) {
			for h := 1; h <= n; h++ {
				d.Set(ctx, fmt.Sprintf("%s:%s:rwlock_timeout:%d", rwPrefix(key), field, h), 1, ttl)
			}
		}
	}
	d.PExpire(ctx, key, ttl)
}

// TestRWLockGrants: readers share the lock and never a writer; a writer
// has it alone, its own thread's read beside it but no upgrade from a
// read; each refusal tells the holder's lease. The first reader's release
// leaves the other's hold (released, not emptied); the last one's deletes
// everything and is announced.
func TestRWLockGrants(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key, lease := uniqueKey(t), 10*time.Second
	for _, owner := range []string{"a:1", "b:1"} {
		if res, err := readAcquire(c.engine, t, key, owner, lease); err != nil || res.Validity <= 0 {
			t.Fatalf("read by %s: %+v, %v; want granted beside other readers", owner, res, err)
		}
	}
	all := "a:1=1 b:1=1 mode=read a:1:rwlock_timeout:1 b:1:rwlock_timeout:1"
	redistest.Eventually(t, c.expectRW(t, key, all, all, all))
	for _, owner := range []string{"w:1", "a:1"} {
		res, err := writeAcquire(c.engine, t, key, owner, lease)
		if !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 || res.HolderTTL > lease {
			t.Fatalf("write by %s under readers: %+v, %v; want ErrNotAcquired with the readers' lease", owner, res, err)
		}
	}
	if msg := c.expectRW(t, key, all, all, all)(); msg != "" {
		t.Errorf("the refused writers left something: %s", msg)
	}

	sub := c.listen(t, 0, key)
	if res, err := readRelease(c.engine, t, key, "a:1", ""); err != nil || !res.Released || res.Emptied {
		t.Fatalf("first reader's release: %+v, %v; want released, not emptied", res, err)
	}
	left := "b:1=1 mode=read b:1:rwlock_timeout:1"
	redistest.Eventually(t, c.expectRW(t, key, left, left, left))
	if res, err := readRelease(c.engine, t, key, "b:1", ""); err != nil || !res.Released || !res.Emptied {
		t.Fatalf("last reader's release: %+v, %v; want released and emptied", res, err)
	}
	redistest.Eventually(t, c.expectRW(t, key, "", "", ""))
	select {
	case m := <-sub.Channel():
		if !strings.HasSuffix(m.Payload, "b:1") {
			t.Errorf("release notice %q, want the last reader's", m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no release notice")
	}
	if _, err := readRelease(c.engine, t, key, "b:1", ""); !errors.Is(err, ErrAbsent) {
		t.Errorf("a release of no lock: %v, want ErrAbsent", err)
	}

	// A writer has it alone; its own thread may read beside it.
	if _, err := writeAcquire(c.engine, t, key, "w:1", lease); err != nil {
		t.Fatal(err)
	}
	if res, err := readAcquire(c.engine, t, key, "a:1", lease); !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 {
		t.Fatalf("another's read under a writer: %+v, %v; want ErrNotAcquired", res, err)
	}
	if _, err := readAcquire(c.engine, t, key, "w:1", lease); err != nil {
		t.Fatalf("the writer's own read: %v", err)
	}
	if _, err := readRelease(c.engine, t, key, "a:1", ""); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrAbsent) {
		t.Errorf("another's read release under a writer: %v, want ErrNotHeld (not absent)", err)
	}
	want := sortedState("mode=write w:1:write=1 w:1=1 w:1:rwlock_timeout:1")
	redistest.Eventually(t, c.expectRW(t, key, want, want, want))
	for _, op := range []Op{OpRWMode, OpReadLocked} {
		r, err := c.engine.Read(t.Context(), Read{Op: op, Key: key})
		if err != nil || op == OpRWMode && r.Value != WriteMode || op == OpReadLocked && !r.Exists {
			t.Errorf("%s of a writer that also reads: %+v, %v", op, r, err)
		}
	}
}

// sortedState orders a state's fields as rwState does.
func sortedState(s string) string {
	var fields, keys []string
	for _, p := range strings.Fields(s) {
		if strings.Contains(p, "=") {
			fields = append(fields, p)
		} else {
			keys = append(keys, p)
		}
	}
	slices.Sort(fields)
	slices.Sort(keys)
	return strings.Join(append(fields, keys...), " ")
}

// TestRWLockDowngrade: a writer that also reads and leaves its write lock
// keeps its read hold under "read" (released: 1 to Redisson), and nothing
// is announced; another's write is then refused and another's read
// granted. A re-entered write lock leaves one hold at a time.
func TestRWLockDowngrade(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key, lease := uniqueKey(t), 10*time.Second
	for range 2 {
		if _, err := writeAcquire(c.engine, t, key, "w:1", lease); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := readAcquire(c.engine, t, key, "w:1", lease); err != nil {
		t.Fatal(err)
	}
	if res, err := writeRelease(c.engine, t, key, "w:1"); err != nil || res.Released || res.HoldCount != 1 {
		t.Fatalf("first write release of two: %+v, %v; want still held once", res, err)
	}
	sub := c.listen(t, 0, key)
	if res, err := writeRelease(c.engine, t, key, "w:1"); err != nil || !res.Released || res.Emptied {
		t.Fatalf("last write release beside the own read: %+v, %v; want released, not emptied", res, err)
	}
	read := "mode=read w:1=1 w:1:rwlock_timeout:1"
	redistest.Eventually(t, c.expectRW(t, key, read, read, read))
	if _, err := writeAcquire(c.engine, t, key, "x:1", lease); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("another's write after the downgrade: %v, want ErrNotAcquired", err)
	}
	if _, err := readAcquire(c.engine, t, key, "x:1", lease); err != nil {
		t.Errorf("another's read after the downgrade: %v", err)
	}
	select {
	case m := <-sub.Channel():
		t.Errorf("the downgrade announced %q", m.Payload)
	default:
	}
	if _, err := writeRelease(c.engine, t, key, "w:1"); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrAbsent) {
		t.Errorf("a write release under readers: %v, want ErrNotHeld", err)
	}
}

// TestRWLockRollbackOneReader: a reader's acquisition refused by a quorum
// (another's writer there) is undone where it was granted, beside another
// reader whose count, timeout key and lease are untouched; a writer's
// refused first acquisition leaves nothing.
func TestRWLockRollbackOneReader(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	c.rwHold(t, 0, key, ReadMode, time.Minute, map[string]int{"a:1": 2})
	for i := 1; i < 3; i++ {
		c.rwHold(t, i, key, WriteMode, time.Minute, map[string]int{"w:1:write": 1})
	}
	res, err := readAcquire(c.engine, t, key, "b:1", 10*time.Second)
	if !errors.Is(err, ErrNotAcquired) || res.HolderTTL <= 0 || res.HolderTTL > time.Minute {
		t.Fatalf("read against a quorum's writer: %+v, %v; want ErrNotAcquired with its lease", res, err)
	}
	reader, writer := "a:1=2 mode=read a:1:rwlock_timeout:1 a:1:rwlock_timeout:2", "mode=write w:1:write=1"
	redistest.Eventually(t, c.expectRW(t, key, reader, writer, writer))
	if attempts := c.direct[0].HKeys(t.Context(), key).Val(); slices.ContainsFunc(attempts, func(f string) bool { return strings.Contains(f, "b:1") }) {
		t.Errorf("backend 0 keeps the undone attempt's fields: %q", attempts)
	}
	if ttl := c.direct[0].PTTL(t.Context(), key).Val(); ttl < 50*time.Second {
		t.Errorf("the undo left the other reader's lock %v, want its minute", ttl)
	}

	free := uniqueKey(t)
	for i := 1; i < 3; i++ {
		c.rwHold(t, i, free, ReadMode, time.Minute, map[string]int{"a:1": 1})
	}
	if _, err := writeAcquire(c.engine, t, free, "w:1", 10*time.Second); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("write against a quorum's reader: %v", err)
	}
	held := "a:1=1 mode=read a:1:rwlock_timeout:1"
	redistest.Eventually(t, c.expectRW(t, free, "", held, held))
}

// TestRWLockTopUps: a hold granted on a bare quorum is copied to the
// backend that refused it once that one is free, with its mode (and a
// reader's timeout keys); a writer renewed by RLock's watchdog (a hash
// renewal of its field) is copied with mode "write", so that no reader is
// let in beside it there.
func TestRWLockTopUps(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	lease := 20 * time.Second

	t.Run("reader", func(t *testing.T) {
		key := uniqueKey(t)
		c.rwHold(t, 2, key, WriteMode, time.Minute, map[string]int{"w:1:write": 1})
		before := c.engine.TopUps()
		if _, err := readAcquire(c.engine, t, key, "r:1", lease); err != nil {
			t.Fatal(err)
		}
		// Backend 2 refused (its vote started a top-up); then the stale
		// writer goes, and the renewal's top-up, if not the grant's,
		// copies the hold there.
		redistest.Eventually(t, func() string {
			if c.engine.TopUps().Started == before.Started {
				return "backend 2's refusal not heard"
			}
			return ""
		})
		c.direct[2].Del(t.Context(), key)
		if got := c.engine.Renew(t.Context(), Renewal{Read: true, TTL: lease, Locks: []Held{{Key: key, Token: "r:1", Prefix: rwPrefix(key)}}}); got[0].Err != nil {
			t.Fatal(got[0].Err)
		}
		held := "mode=read r:1=1 r:1:rwlock_timeout:1"
		redistest.Eventually(t, c.expectRW(t, key, held, held, held))
		if ttl := c.direct[2].PTTL(t.Context(), rwPrefix(key)+":r:1:rwlock_timeout:1").Val(); ttl <= 0 || ttl > lease {
			t.Errorf("the copied hold's timeout key has %v, want within the lease", ttl)
		}
		redistest.Eventually(t, func() string {
			if c.engine.TopUps().Copies == before.Copies {
				return "no top-up copied the hold"
			}
			return ""
		})
	})

	t.Run("writer", func(t *testing.T) {
		key := uniqueKey(t)
		c.rwHold(t, 2, key, ReadMode, time.Minute, map[string]int{"r:1": 1})
		if _, err := writeAcquire(c.engine, t, key, "w:1", lease); err != nil {
			t.Fatal(err)
		}
		c.direct[2].Del(t.Context(), key, rwPrefix(key)+":r:1:rwlock_timeout:1")
		held := "mode=write w:1:write=1"
		redistest.Eventually(t, c.expectRW(t, key, held, held, held))
	})

	t.Run("writer renewed as a hash lock", func(t *testing.T) {
		key := uniqueKey(t)
		if _, err := writeAcquire(c.engine, t, key, "w:1", lease); err != nil {
			t.Fatal(err)
		}
		held := "mode=write w:1:write=1"
		redistest.Eventually(t, c.expectRW(t, key, held, held, held))
		c.direct[2].Del(t.Context(), key)
		got := c.engine.Renew(t.Context(), Renewal{Hash: true, TTL: lease, Locks: []Held{{Key: key, Token: "w:1" + WriterSuffix}}})
		if got[0].Err != nil {
			t.Fatal(got[0].Err)
		}
		redistest.Eventually(t, c.expectRW(t, key, held, held, held))
		if _, err := readAcquire(c.engine, t, key, "r:1", lease); !errors.Is(err, ErrNotAcquired) {
			t.Errorf("a reader after the copy: %v, want ErrNotAcquired", err)
		}
	})
}

// TestRWLockDivergedCounts: a reader counted once more on one backend (it
// missed a release) is released by the quorum, and its field and timeout
// keys are dropped there too, the other reader's left; one released on
// one backend, still held on another, the third silent, is undecided.
func TestRWLockDivergedCounts(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})

	t.Run("one more", func(t *testing.T) {
		key := uniqueKey(t)
		c.rwHold(t, 0, key, ReadMode, time.Minute, map[string]int{"a:1": 2, "b:1": 1})
		for i := 1; i < 3; i++ {
			c.rwHold(t, i, key, ReadMode, time.Minute, map[string]int{"a:1": 1, "b:1": 1})
		}
		res, err := readRelease(c.engine, t, key, "a:1", "")
		if err != nil || !res.Released || res.Emptied {
			t.Fatalf("release: %+v, %v; want released, not emptied", res, err)
		}
		left := "b:1=1 mode=read b:1:rwlock_timeout:1"
		redistest.Eventually(t, c.expectRW(t, key, left, left, left))
	})

	t.Run("undecided", func(t *testing.T) {
		key := uniqueKey(t)
		c.rwHold(t, 0, key, ReadMode, time.Minute, map[string]int{"a:1": 1})
		c.rwHold(t, 1, key, ReadMode, time.Minute, map[string]int{"a:1": 2})
		c.servers[2].Kill()
		if _, err := readRelease(c.engine, t, key, "a:1", ""); !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("released on one, held on one, one silent: %v, want ErrNoQuorum", err)
		}
	})
}

// TestRWLockLatch: a retried read release with the same latch answers as
// the first did, and takes no second hold off.
func TestRWLockLatch(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key, latch := uniqueKey(t), "redisson_unlock_latch:"+uniqueKey(t)
	for _, owner := range []string{"a:1", "a:1", "b:1"} {
		if _, err := readAcquire(c.engine, t, key, owner, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for try := range 2 {
		if res, err := readRelease(c.engine, t, key, "a:1", latch); err != nil || res.Released || res.HoldCount != 1 {
			t.Fatalf("try %d: %+v, %v; want still held once", try, res, err)
		}
	}
	latch2 := latch + ":2"
	for try := range 2 {
		if res, err := readRelease(c.engine, t, key, "a:1", latch2); err != nil || !res.Released || res.Emptied {
			t.Fatalf("last hold, try %d: %+v, %v; want released, not emptied", try, res, err)
		}
	}
	left := "b:1=1 mode=read b:1:rwlock_timeout:1"
	redistest.Eventually(t, c.expectRW(t, key, left, left, left))
}

// TestRWLockRenewReads: the read watchdog renews the owner's hold and its
// timeout keys, never shortens a lock that another reader holds longer,
// and copies the hold to a backend that lost it; a hold not held is
// refused.
func TestRWLockRenewReads(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := readAcquire(c.engine, t, key, "long:1", 50*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := readAcquire(c.engine, t, key, "a:1", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	c.direct[2].Del(t.Context(), key, rwPrefix(key)+":a:1:rwlock_timeout:1", rwPrefix(key)+":long:1:rwlock_timeout:1")
	renewal := Renewal{Read: true, TTL: 10 * time.Second, Locks: []Held{
		{Key: key, Token: "a:1", Prefix: rwPrefix(key)},
		{Key: key, Token: "none:1", Prefix: rwPrefix(key)},
	}}
	got := c.engine.Renew(t.Context(), renewal)
	if got[0].Err != nil || got[0].Validity <= 0 || !errors.Is(got[1].Err, ErrNotHeld) {
		t.Fatalf("renewal: %+v; want the owner's renewed, the other not held", got)
	}
	for i := range 2 {
		if ttl := c.direct[i].PTTL(t.Context(), key).Val(); ttl < 40*time.Second {
			t.Errorf("backend %d: the renewal cut the lock to %v under the other reader's 50 s", i, ttl)
		}
		if ttl := c.direct[i].PTTL(t.Context(), rwPrefix(key)+":a:1:rwlock_timeout:1").Val(); ttl < 5*time.Second {
			t.Errorf("backend %d: the owner's timeout key has %v after the renewal", i, ttl)
		}
	}
	// Backend 2 lost the lock: it gets the owner's hold back, not the
	// other reader's, which its own watchdog would renew.
	redistest.Eventually(t, func() string {
		if got := c.rwState(t, 2, key); got != "a:1=1 mode=read a:1:rwlock_timeout:1" {
			return fmt.Sprintf("backend 2 has %q after the renewal's top-up", got)
		}
		return ""
	})
}

// TestRWLockForceAndReads: forceUnlock deletes the lock only in its own
// mode, and announces it; the reads answer no mode of a free lock, and
// "read" of a read-held one; a write re-entry adds its lease, up to
// max_ttl and no further.
func TestRWLockForceAndReads(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, MaxTTL: 25 * time.Second})
	key := uniqueKey(t)
	if _, err := c.engine.Read(t.Context(), Read{Op: OpRWMode, Key: key}); !errors.Is(err, ErrNotFound) {
		t.Errorf("the mode of a free lock: %v, want ErrNotFound", err)
	}
	if r, err := c.engine.Read(t.Context(), Read{Op: OpReadLocked, Key: key}); err != nil || r.Exists {
		t.Errorf("a free lock read-locked: %+v, %v", r, err)
	}
	if _, err := readAcquire(c.engine, t, key, "a:1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if r, err := c.engine.Read(t.Context(), Read{Op: OpRWMode, Key: key}); err != nil || r.Value != ReadMode {
		t.Errorf("the mode of a read lock: %+v, %v", r, err)
	}
	if ok, err := c.engine.Write(t.Context(), Write{Op: OpRWDelete, Key: key, Mode: WriteMode}); err != nil || ok {
		t.Errorf("the write lock's forceUnlock of a read lock: %v, %v; want false", ok, err)
	}
	if _, err := c.engine.Write(t.Context(), Write{Op: OpRWDelete, Key: key, Mode: "fair"}); err == nil {
		t.Error("a forceUnlock of no mode was run")
	}
	if ok, err := c.engine.Write(t.Context(), Write{Op: OpRWDelete, Key: key, Mode: ReadMode}); err != nil || !ok {
		t.Errorf("the read lock's forceUnlock: %v, %v; want true", ok, err)
	}
	redistest.Eventually(t, func() string {
		for i, d := range c.direct {
			if d.Exists(t.Context(), key).Val() != 0 {
				return fmt.Sprintf("backend %d keeps the lock", i)
			}
		}
		return ""
	})

	for range 3 {
		if _, err := writeAcquire(c.engine, t, key, "w:1", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Each backend once it has run all three (a grant answers at a quorum).
	redistest.Eventually(t, func() string {
		for i, d := range c.direct {
			if d.HGet(t.Context(), key, "w:1"+WriterSuffix).Val() != "3" {
				return fmt.Sprintf("backend %d has not counted three holds", i)
			}
			if ttl := d.PTTL(t.Context(), key).Val(); ttl <= 20*time.Second || ttl > 25*time.Second {
				return fmt.Sprintf("backend %d: three write holds of 10 s give %v, want max_ttl's 25 s", i, ttl)
			}
		}
		return ""
	})
}
