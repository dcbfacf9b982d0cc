package quorum

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// lockFence takes key for token and returns its fencing token.
func lockFence(t *testing.T, e *Engine, key, token string) int64 {
	t.Helper()
	r, err := e.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{key}, Token: token, TTL: 10 * time.Second})
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

	// An extension keeps the token, and its TTL.
	fence := lockFence(t, c.engine, key, "extender")
	if _, err := c.engine.Lock(t.Context(), Lock{Op: OpExtend, Keys: []string{key}, Token: "extender", TTL: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Every backend runs the extension, the last ones after the answer.
	for _, d := range c.direct {
		waitFor(t, func() bool { return d.PTTL(t.Context(), fenceKey(key)).Val() > 10*time.Second })
	}
	if got, err := readFence(t, other, key, "extender"); err != nil || got != fence {
		t.Fatalf("FENCE after the extension: %d, %v; want %d", got, err, fence)
	}
	for _, e := range []*Engine{c.engine, other} {
		if _, wb := e.Fences(); wb != 0 {
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
	if _, wb := c.engine.Fences(); wb != 1 {
		t.Errorf("%d write-backs, want 1", wb)
	}
	carry := 0
	for _, d := range c.direct {
		if d.Get(t.Context(), fenceKey(key)).Val() == strconv.FormatInt(fence, 10) {
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
			c.engine.skipFenceWriteBack = !writeBack
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
			// The first lock expires (here: is deleted where it is held),
			// and 0 and 1 are stopped: the next holder is voted by 2, 3, 4.
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
		if n := d.Exists(t.Context(), fenceCounterKey, fenceKey(key)).Val(); n != 0 {
			t.Errorf("backend %d holds %d fencing keys", i, n)
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

// TestFencedRollbackSparesRetry: the rollback of one fenced acquisition
// deletes that acquisition's key, and not a later one made with the same
// token, which minted a larger fencing token.
func TestFencedRollbackSparesRetry(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true, Fencing: true})
	n, key := c.engine.nodes[0], uniqueKey(t)
	set := c.engine.members.set.token
	acquire := func(token string, clock int64) int64 {
		t.Helper()
		r, err := n.run(t.Context(), acquireFencedScript, []string{key, fenceCounterKey, fenceKey(key)}, token, 10000, clock, set)
		if err != nil {
			t.Fatal(err)
		}
		fence, err := r.Integer()
		if err != nil {
			t.Fatal(err)
		}
		return fence
	}
	release := func(fence int64) int64 {
		t.Helper()
		r, err := n.run(t.Context(), releaseFencedScript, []string{key, fenceKey(key)}, "tok", strconv.FormatInt(fence, 10))
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
	if got := c.direct[0].Get(t.Context(), fenceCounterKey).Val(); got != strconv.FormatInt(retry, 10) {
		t.Fatalf("counter %q after the retry, want %d", got, retry)
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
