package quorum

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// lockFence takes key for token and returns its fencing token.
func lockFence(t *testing.T, e *Engine, key, token string) int64 {
	t.Helper()
	r, err := e.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: token, TTL: min(10*time.Second, e.MaxTTL())})
	if err != nil {
		t.Fatalf("acquire %s for %s: %v", key, token, err)
	}
	if r.Fence <= 0 {
		t.Fatalf("acquire %s for %s: fencing token %d", key, token, r.Fence)
	}
	return r.Fence
}

func readFence(t *testing.T, e *Engine, key, token string) (int64, error) {
	t.Helper()
	r, err := e.Read(t.Context(), Read{Op: OpFence, Key: key, Token: token})
	return r.Fence, err
}

// TestFenceSteadyState: every acquisition's token is larger than the one
// before, through two engines over the same backends; FENCE answers it to
// its holder only; an extension keeps it and keeps it readable past the
// first TTL; no write-back was needed.
func TestFenceSteadyState(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
	other := newEngine(t, c.cfg)
	key := uniqueKey(t)
	var last int64
	for i := range 20 {
		e := []*Engine{c.engine, other}[i%2]
		tok := "holder" + strconv.Itoa(i)
		fence := lockFence(t, e, key, tok)
		if fence <= last {
			t.Fatalf("acquisition %d: token %d after %d", i, fence, last)
		}
		last = fence
		if got, err := readFence(t, []*Engine{other, c.engine}[i%2], key, tok); err != nil || got != fence {
			t.Fatalf("FENCE by the holder through the other engine: %d, %v; want %d", got, err, fence)
		}
		if _, err := readFence(t, e, key, "someone else"); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("FENCE by another token: %v, want ErrNotHeld", err)
		}
		if _, err := e.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := readFence(t, c.engine, key, "holder19"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("FENCE after release: %v, want ErrNotHeld", err)
	}
	if now := time.Now().UnixMicro(); last > now || last < now-int64(time.Minute/time.Microsecond) {
		t.Errorf("the last token %d is not the clock in µs (%d) in the steady state", last, now)
	}

	// An extension keeps the token, and its TTL. The last release went
	// through the other engine, on other connections: a backend it has not
	// reached yet would refuse this acquisition, and so the extension.
	for _, d := range c.direct {
		waitFor(t, func() bool { return d.Exists(t.Context(), key).Val() == 0 })
	}
	fence := lockFence(t, c.engine, key, "extender")
	if _, err := c.engine.Lock(t.Context(), Lock{Op: OpExtend, Keys: []string{key}, Token: "extender", TTL: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Every backend runs the extension, the last ones after the answer.
	for _, d := range c.direct {
		waitFor(t, func() bool { return d.PTTL(t.Context(), key).Val() > 10*time.Second })
		if got := storedFence(t, d, key); got != fenceText(fence) {
			t.Fatalf("the lock's value carries token %q after the extension, want %d", got, fence)
		}
	}
	if got, err := readFence(t, other, key, "extender"); err != nil || got != fence {
		t.Fatalf("FENCE after the extension: %d, %v; want %d", got, err, fence)
	}
	for _, e := range []*Engine{c.engine, other} {
		if wb := e.Fences().WriteBacks; wb != 0 {
			t.Errorf("%d write-backs in the steady state", wb)
		}
	}
}

// TestFenceWriteBack: backends whose counters ran ahead of the clock (a
// proxy whose clock was fast minted there) mint more than the others; the
// lock's token is the largest its voters minted, a quorum is brought to it
// before the grant, FENCE answers it, and the next acquisition's token is
// larger still.
func TestFenceWriteBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
	key := uniqueKey(t)
	ahead := time.Now().Add(time.Hour).UnixMicro()
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), fenceCounterKey, ahead, 0)
	}
	// 3 and 4 refuse (they hold another token): the lock is voted by 0, 1
	// and 2, and 2 minted less than the token.
	for _, i := range []int{3, 4} {
		c.direct[i].Set(t.Context(), key, "someone", time.Second)
	}
	fence := lockFence(t, c.engine, key, "first")
	if fence != ahead+1 {
		t.Fatalf("token %d, want the largest minted, %d", fence, ahead+1)
	}
	if wb := c.engine.Fences().WriteBacks; wb != 1 {
		t.Errorf("%d write-backs, want 1", wb)
	}
	carry := 0
	for _, d := range c.direct {
		if storedFence(t, d, key) == fenceText(fence) {
			carry++
		}
	}
	if carry < c.engine.Quorum() {
		t.Errorf("%d backends carry the token, want a quorum", carry)
	}
	if got, err := readFence(t, c.engine, key, "first"); err != nil || got != fence {
		t.Fatalf("FENCE: %d, %v; want %d", got, err, fence)
	}
	if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "first"}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{3, 4} {
		c.direct[i].Del(t.Context(), key)
	}
	if next := lockFence(t, c.engine, key, "second"); next <= fence {
		t.Fatalf("the next token %d is not above %d", next, fence)
	}
}

// TestFenceWithoutWriteBackRegresses is the control of the write-back: with
// the counters of backends 0 and 1 ahead and the lock held on 0, 1 and 2
// only, a token taken as the largest minted, and nothing written back,
// leaves 2 behind; the next holder, voted by 2, 3 and 4, then gets a
// smaller token. With the write-back it cannot.
func TestFenceWithoutWriteBackRegresses(t *testing.T) {
	for _, writeBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "control: no write-back", true: "write-back"}[writeBack], func(t *testing.T) {
			c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
			c.engine.hooks.skipFenceWriteBack = !writeBack
			key := uniqueKey(t)
			ahead := time.Now().Add(time.Hour).UnixMicro()
			for _, i := range []int{0, 1} {
				c.direct[i].Set(t.Context(), fenceCounterKey, ahead, 0)
			}
			// 3 and 4 refuse the first holder: they hold another token.
			for _, i := range []int{3, 4} {
				c.direct[i].Set(t.Context(), key, "someone", 2*time.Second)
			}
			r, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "first", TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// The first lock expires (here: is deleted where it is held,
			// once its top-up, refused by 3 and 4, is over), and 0 and 1
			// are stopped: the next holder is voted by 2, 3, 4.
			topUpStartedAndOver(t, c.engine)
			for _, i := range []int{0, 1, 2, 3, 4} {
				c.direct[i].Del(t.Context(), key)
			}
			c.servers[0].Kill()
			c.servers[1].Kill()
			next, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "second", TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case writeBack && next.Fence <= r.Fence:
				t.Fatalf("with the write-back, the next token %d is not above %d", next.Fence, r.Fence)
			case !writeBack && next.Fence > r.Fence:
				t.Fatalf("without the write-back the next token %d is still above %d: the control shows nothing", next.Fence, r.Fence)
			}
		})
	}
}

// TestFenceOff: without Fencing, an acquisition mints nothing and FENCE
// answers that its lock has none.
func TestFenceOff(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	r, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: "me", TTL: 10 * time.Second})
	if err != nil || r.Fence != 0 {
		t.Fatalf("acquire without fencing: %+v, %v", r, err)
	}
	if _, err := readFence(t, c.engine, key, "me"); !errors.Is(err, ErrNoFence) {
		t.Fatalf("FENCE without fencing: %v, want ErrNoFence", err)
	}
	for i, d := range c.direct {
		if n := d.Exists(t.Context(), fenceCounterKey).Val(); n != 0 {
			t.Errorf("backend %d holds a fencing counter", i)
		}
		if v := d.Get(t.Context(), key).Val(); v != "me" {
			t.Errorf("backend %d holds %q, want the holder's token alone", i, v)
		}
	}
}

// TestFenceNoQuorum: with a majority of backends down, FENCE cannot tell.
func TestFenceNoQuorum(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, Fencing: true})
	key := uniqueKey(t)
	lockFence(t, c.engine, key, "me")
	for _, s := range c.servers[:3] {
		s.Kill()
	}
	if _, err := readFence(t, c.engine, key, "me"); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("FENCE with a majority down: %v, want NOQUORUM", err)
	}
}

// TestFenceReseed: backends 0 and 1 carry a token far above the clock
// (their counters ran ahead); backend 0 restarts empty. Once it counts
// again, and with 1 down, the next holder is voted by 0 and 2, neither of
// which minted that token: only the re-seed of 0's counter from 1 and 2
// keeps the next token above it. The control lets 0 count without a
// re-seed, and the token goes back.
func TestFenceReseed(t *testing.T) {
	for _, reseed := range []bool{false, true} {
		t.Run(map[bool]string{false: "control: no re-seed", true: "re-seed"}[reseed], func(t *testing.T) {
			var logs syncBuffer
			cfg := Config{Fencing: true, skipReseed: !reseed,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			c := newSteppedCluster(t, []float64{1, 1, 1}, cfg)
			c.step(t, defaultMaxTTL)
			waitAllCount(t, c.engine)
			key := uniqueKey(t)
			ahead := time.Now().Add(time.Hour).UnixMicro()
			for _, i := range []int{0, 1} {
				c.direct[i].Set(t.Context(), fenceCounterKey, ahead, 0)
			}
			// 2 refuses (another token holds the key there), so that 0 and
			// 1 alone carry the token, and nothing is written back to 2.
			c.direct[2].Set(t.Context(), key, "someone", time.Minute)
			first := lockFence(t, c.engine, key, "first")
			if first != ahead+1 {
				t.Fatalf("first token %d, want %d", first, ahead+1)
			}
			if _, err := c.engine.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{key}, Token: "first"}); err != nil {
				t.Fatal(err)
			}
			c.direct[2].Del(t.Context(), key)
			seeds := c.engine.Fences().Reseeds
			c.servers[0].Restart()
			c.connected(t, 0) // its quarantine starts
			c.step(t, defaultMaxTTL)
			waitAllCount(t, c.engine)
			c.servers[1].Kill()
			next := lockFence(t, c.engine, key, "next")
			if !reseed {
				if next > first {
					t.Fatalf("without the re-seed the token %d is still above %d: the scenario no longer shows the hazard", next, first)
				}
				return
			}
			if next <= first {
				t.Fatalf("token %d after the restart is not above %d", next, first)
			}
			if got := c.engine.Fences().Reseeds - seeds; got != 1 {
				t.Errorf("%d re-seeds after the restart, want 1", got)
			}
			if !strings.Contains(logs.String(), "re-seeded from a quorum of the other backends") {
				t.Errorf("no log line of the re-seed:\n%s", logs.String())
			}
		})
	}
}

// TestFenceReseedOnce: on the first start with fencing on, no backend
// carries the mark of a re-seed and none counts yet: they are re-seeded from
// each other, or the start would wait for ever. An engine started later
// finds them re-seeded and counts them at once; a restarted backend is
// re-seeded again, once.
func TestFenceReseedOnce(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	waitAllCount(t, c.engine)
	if got := c.engine.Fences().Reseeds; got != 3 {
		t.Errorf("first start: %d re-seeds, want 3", got)
	}
	later := newEngine(t, c.cfg)
	waitAllCount(t, later)
	c.servers[2].Restart()
	waitAllCount(t, c.engine)
	waitAllCount(t, later)
	if got := c.engine.Fences().Reseeds + later.Fences().Reseeds; got < 4 || got > 5 {
		t.Errorf("%d re-seeds in all, want the first start's 3 and the restart's one by each engine at most", got)
	}
	lockFence(t, later, uniqueKey(t), "me")
}

// TestFenceReseedFromTooFew: a backend restarted with another finds only
// one other that counts, fewer than a quorum; it is re-seeded from that
// one (and whatever else answers) rather than wait for the other, which
// waits for its own re-seed, and says so.
func TestFenceReseedFromTooFew(t *testing.T) {
	var logs syncBuffer
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitAllCount(t, c.engine)
	c.servers[1].Restart()
	c.servers[0].Restart()
	redistest.Eventually(t, func() string {
		if err := c.engine.Probe(t.Context())[0].Err; err != nil {
			return "backend 0 does not count: " + err.Error()
		}
		return ""
	})
	if !strings.Contains(logs.String(), "re-seeded from fewer than a quorum of the other backends") {
		t.Errorf("no warning of the re-seed from too few:\n%s", logs.String())
	}
	lockFence(t, c.engine, uniqueKey(t), "me")
}

// TestFenceOtherOperations: every operation that takes a lock mints a token
// above the one before, readable with FENCE (for each key of a multi-key
// lock); every one that extends a lock keeps its token, and keeps it
// readable for as long as the lock lives.
func TestFenceOtherOperations(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	e := c.engine
	ctx := t.Context()
	key, other := uniqueKey(t), uniqueKey(t)
	var last int64
	take := func(name string, req Lock) int64 {
		t.Helper()
		r, err := e.Lock(ctx, req)
		if err != nil || r.Fence <= last {
			t.Fatalf("%s: token %d, %v; want one above %d", name, r.Fence, err, last)
		}
		for _, k := range req.Keys {
			if got, err := readFence(t, e, k, req.Token); err != nil || got != r.Fence {
				t.Fatalf("%s: FENCE %s: %d, %v; want %d", name, k, got, err, r.Fence)
			}
		}
		last = r.Fence
		return r.Fence
	}
	// keep extends with req and checks that the token stays, on every
	// backend, as long as the lock.
	keep := func(name string, req Lock, fence int64) {
		t.Helper()
		r, err := e.Lock(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Fence != 0 && r.Fence != fence {
			t.Fatalf("%s: token %d, want the lock's %d", name, r.Fence, fence)
		}
		for _, k := range req.Keys {
			for i, d := range c.direct {
				waitFor(t, func() bool { return d.PTTL(ctx, k).Val() > 5*time.Second })
				if got := storedFence(t, d, k); got != fenceText(fence) {
					t.Fatalf("%s: backend %d carries token %s for %s, want %d", name, i, got, k, fence)
				}
			}
			if got, err := readFence(t, e, k, req.Token); err != nil || got != fence {
				t.Fatalf("%s: FENCE %s: %d, %v; want %d", name, k, got, err, fence)
			}
		}
	}
	release := func(token string, keys ...string) {
		t.Helper()
		if _, err := e.Unlock(ctx, Unlock{Op: OpReleaseAll, Keys: keys, Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	short, long := time.Second, 20*time.Second

	plain := lockFence(t, e, key, "plain")
	last = plain
	keep("extend by (redis-py's extend)", Lock{Op: OpExtendBy, Keys: []string{key}, Token: "plain", TTL: long}, plain)
	release("plain", key)
	// PEXPIRE, whoever holds the key (an administrator's, or a client's
	// that extends so).
	expired := lockFence(t, e, key, "expired")
	last = expired
	if ok, err := e.Write(ctx, Write{Op: OpExpire, Key: key, TTL: long}); !ok || err != nil {
		t.Fatalf("PEXPIRE: %v, %v", ok, err)
	}
	for _, d := range c.direct {
		waitFor(t, func() bool { return d.PTTL(ctx, key).Val() > 5*time.Second })
	}
	keep("extend (SET XX, IFEQ)", Lock{Op: OpExtend, Keys: []string{key}, Token: "expired", TTL: long}, expired)
	release("expired", key)

	all := take("acquire all (node-redlock)", Lock{Op: OpAcquireAll, Keys: []string{key, other}, Token: "all", TTL: short})
	keep("extend all", Lock{Op: OpExtendAll, Keys: []string{key, other}, Token: "all", TTL: long}, all)
	release("all", key, other)

	taken := take("extend or acquire, taking", Lock{Op: OpExtendOrAcquire, Keys: []string{key}, Token: "redsync", TTL: short})
	keep("extend or acquire, renewing", Lock{Op: OpExtendOrAcquire, Keys: []string{key}, Token: "redsync", TTL: long}, taken)
	release("redsync", key)

	obtained := take("acquire or renew, taking", Lock{Op: OpAcquireOrRenew, Keys: []string{key}, Token: "bsm-token:meta1", TokenLen: 9, TTL: short})
	keep("acquire or renew, renewing", Lock{Op: OpAcquireOrRenew, Keys: []string{key}, Token: "bsm-token:meta2", TokenLen: 9, TTL: long}, obtained)
	release("bsm-token:meta2", key)

	// Renewed on one backend, taken afresh on the two that lost the key
	// (the lock lapsed there): a lock taken again, with a token above
	// every earlier one, carried by a quorum. (Renewed on a quorum, it
	// would keep its token: no other holder can have been granted it
	// since.)
	renewed := take("extend or acquire, taking again", Lock{Op: OpExtendOrAcquire, Keys: []string{key}, Token: "mixed", TTL: short})
	for _, i := range []int{1, 2} {
		c.direct[i].Del(ctx, key)
	}
	r, err := e.Lock(ctx, Lock{Op: OpExtendOrAcquire, Keys: []string{key}, Token: "mixed", TTL: long})
	if err != nil || r.Fence <= renewed {
		t.Fatalf("extend or acquire, renewed on 1 and taken on 2: token %d, %v; want one above %d", r.Fence, err, renewed)
	}
	if got, err := readFence(t, e, key, "mixed"); err != nil || got != r.Fence {
		t.Fatalf("FENCE after the mixed extension: %d, %v; want %d", got, err, r.Fence)
	}
}

// TestFencedRollbackSparesRetry: the rollback of one fenced acquisition
// deletes that acquisition's key, and not a later one made with the same
// token, which minted a larger fencing token.
func TestFencedRollbackSparesRetry(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true, Fencing: true})
	n, key := c.engine.nodes[0], uniqueKey(t)
	set := c.engine.set.Token()
	acquire := func(token string, clock int64) int64 {
		t.Helper()
		r, err := n.run(t.Context(), acquireFencedScript, []string{key, fenceCounterKey}, token, 10000, fenceText(clock), set)
		if err != nil {
			t.Fatal(err)
		}
		v, err := decodeFenced(n, r)
		if err != nil {
			t.Fatal(err)
		}
		return v.fence
	}
	release := func(fence int64) int64 {
		t.Helper()
		r, err := n.run(t.Context(), releaseFencedScript, []string{key}, "tok", fenceText(fence))
		if err != nil {
			t.Fatal(err)
		}
		deleted, _ := r.Integer()
		return deleted
	}
	clock := time.Now().UnixMicro()
	first := acquire("tok", clock)
	if first != clock {
		t.Fatalf("first token %d, want the clock %d", first, clock)
	}
	if got := acquire("other", clock+5); got != 0 {
		t.Fatalf("acquisition of a held key minted %d, want 0", got)
	}
	// The first attempt's key is gone (rolled back or expired) and the retry
	// takes it again with the same value, its clock behind the counter.
	c.direct[0].Del(t.Context(), key)
	retry := acquire("tok", clock-1000)
	if retry != first+1 {
		t.Fatalf("retry minted %d, want the counter's next, %d", retry, first+1)
	}
	if got := c.direct[0].Get(t.Context(), fenceCounterKey).Val(); got != fenceText(retry) {
		t.Fatalf("counter %q after the retry, want %d", got, retry)
	}
	// Its key was set with the clock's token first, then given the minted
	// one, keeping its TTL.
	if got := storedFence(t, c.direct[0], key); got != fenceText(retry) {
		t.Fatalf("the retry's key carries %q, want %d", got, retry)
	}
	if ttl := c.direct[0].PTTL(t.Context(), key).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("the retry's key has TTL %v, want its 10 s", ttl)
	}
	if deleted := release(first); deleted != 0 {
		t.Fatalf("the first attempt's rollback deleted the retry's key: %d", deleted)
	}
	if deleted := release(retry); deleted != 1 {
		t.Fatalf("the retry's own rollback: %d", deleted)
	}
	if n := c.direct[0].Exists(t.Context(), key).Val(); n != 0 {
		t.Fatal("the key is left after the rollback")
	}
}

// storedFence is the fencing token that the value of key on the backend d
// carries (lua/value_fenced.lua): its last 19 bytes, after a NUL; "" when
// it has none.
func storedFence(t *testing.T, d *redis.Client, key string) string {
	t.Helper()
	v := d.Get(t.Context(), key).Val()
	if len(v) < 20 || v[len(v)-20] != 0 {
		return ""
	}
	return v[len(v)-19:]
}

// TestFencedValueReads: with fencing the lock's value on the backends
// carries its token, and every read through the engine gives the holder's
// token alone, a token with NULs and digits of its own included; its
// holder releases it, and a token that is a prefix of it does not.
func TestFencedValueReads(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	ctx := t.Context()
	for _, token := range []string{"plain-token", "with\x00123\x00nul", "ends\x00in\x0042"} {
		key := uniqueKey(t)
		fence := lockFence(t, c.engine, key, token)
		// Polled: the acquisition answers once a quorum granted it, and
		// one backend may still be to.
		for i, d := range c.direct {
			redistest.Eventually(t, func() string {
				if want, got := token+"\x00"+fenceText(fence), d.Get(ctx, key).Val(); got != want {
					return fmt.Sprintf("backend %d holds %q, want %q", i, got, want)
				}
				return ""
			})
		}
		r, err := c.engine.Read(ctx, Read{Op: OpGet, Key: key})
		if err != nil || r.Value != token {
			t.Fatalf("GET of a fenced lock: %q, %v; want %q", r.Value, err, token)
		}
		if prefix := token[:strings.IndexByte(token+"\x00", 0)]; prefix != token {
			if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: prefix}); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("release by %q, a prefix of the holder's %q: %v, want ErrNotHeld", prefix, token, err)
			}
		}
		if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: token}); err != nil {
			t.Fatalf("release by the holder %q: %v", token, err)
		}
		// Polled: the release answers once a quorum did, and backend 0 may
		// be the one still to.
		waitFor(t, func() bool { return c.direct[0].Exists(ctx, key).Val() == 0 })
	}
}

// TestPutFence: the clock floor written into a command is fenceText's.
func TestPutFence(t *testing.T) {
	for _, token := range []int64{1, 9, 10, 1764150000000000, 999999999999999999, math.MaxInt64} {
		b := make([]byte, fenceWidth)
		putFence(b, token)
		if string(b) != fenceText(token) {
			t.Errorf("putFence(%d) = %q, fenceText %q", token, b, fenceText(token))
		}
	}
}
