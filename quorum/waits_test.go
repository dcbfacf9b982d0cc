package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// waitOutcome is what one acquireWaiting returned, and when.
type waitOutcome struct {
	err error
	at  time.Time
}

// startWaiting starts a waiting acquisition on e and returns its outcome's
// channel once e counts it among its waiters.
func startWaiting(t *testing.T, ctx context.Context, e *Engine, key, token string, ttl, wait time.Duration) <-chan waitOutcome {
	t.Helper()
	before := e.Waits().Waiting
	out := make(chan waitOutcome, 1)
	go func() {
		_, err := e.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: token, TTL: ttl, Wait: wait})
		out <- waitOutcome{err, time.Now()}
	}()
	waitFor(t, func() bool { return e.Waits().Waiting > before })
	return out
}

// subscribedQuorum waits until e's queue for key has a quorum of backends
// carrying its channel, so that a release from now on is heard.
func subscribedQuorum(t *testing.T, e *Engine, key string) {
	t.Helper()
	waitFor(t, func() bool {
		e.waits.mu.Lock()
		defer e.waits.mu.Unlock()
		q := e.waits.queues[key]
		return q != nil && len(q.confirmed) >= e.quorum
	})
}

func TestWaitWokenByAnotherEngine(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	other := newEngine(t, c.cfg)
	key := uniqueKey(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got := startWaiting(t, ctx, other, key, "waiter", time.Minute, 50*time.Second)
	// A second waiter behind it keeps the key's queue, and so its
	// subscriptions, after the first is granted: the last backends'
	// copies of the release notice, which may come after the grant, are
	// then heard rather than unsubscribed from.
	behindCtx, leave := context.WithCancel(ctx)
	behind := startWaiting(t, behindCtx, other, key, "behind", time.Minute, 50*time.Second)
	subscribedQuorum(t, other, key)
	released := time.Now()
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "holder"}); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil {
		t.Fatalf("waiter: %v", o.err)
	}
	// Woken by the notice, not by the holder's minute running out nor the
	// wait's end: anything under the wait shows that; the figure is logged.
	t.Logf("granted %v after the release through the other engine", o.at.Sub(released))
	if c.majority(t, key) != "waiter" {
		t.Fatalf("values %v, want the waiter's on a majority", c.values(t, key))
	}
	// Every backend that deleted the key told the waiting engine.
	waitFor(t, func() bool { return other.Waits().Notices == 3 })
	leave()
	<-behind
	// The waiter is woken once every backend told the release, so its one
	// try found the key free everywhere, and took it everywhere: a try at
	// the first copy could be refused where the release had not landed
	// yet, or hold it on a bare quorum. The copies were one release.
	s := other.Waits()
	if s.Grants != 1 || s.Releases != 1 || s.WakeUps != 1 || s.Waiting != 0 {
		t.Fatalf("stats %+v, want one release heard, one wake-up, one grant", s)
	}
	waitFor(t, func() bool { return slices.Equal(c.values(t, key), []string{"waiter", "waiter", "waiter"}) })
}

func TestWaitHolderGoneWithoutRelease(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	ctx := t.Context()
	const ttl = 400 * time.Millisecond
	// The holder may rely on its lock until the validity Lock returned,
	// counted from before the call (the backends' TTLs start within it).
	start := time.Now()
	res, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "dead", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	o := <-startWaiting(t, ctx, c.engine, key, "next", time.Minute, 30*time.Second)
	if o.err != nil {
		t.Fatalf("waiter: %v", o.err)
	}
	if held := o.at.Sub(start); held < res.Validity {
		t.Fatalf("granted %v after a %v lock was asked for, within the holder's validity %v", held, ttl, res.Validity)
	}
	t.Logf("granted %v after the holder's %v lock was asked for (validity %v), with no release", o.at.Sub(start), ttl, res.Validity)
}

func TestWaitFirstComeFirstServed(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "first", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	for i := range n {
		token := fmt.Sprintf("w%d", i)
		got := startWaiting(t, ctx, c.engine, key, token, time.Minute, 50*time.Second)
		wg.Go(func() {
			if o := <-got; o.err != nil {
				t.Errorf("%s: %v", token, o.err)
				return
			}
			mu.Lock()
			order = append(order, token)
			mu.Unlock()
			if _, err := c.engine.Unlock(context.Background(), Unlock{Op: OpRelease, Keys: []string{key}, Token: token}); err != nil {
				t.Errorf("%s release: %v", token, err)
			}
		})
	}
	subscribedQuorum(t, c.engine, key)
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "first"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"w0", "w1", "w2", "w3", "w4", "w5"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("granted in order %v, want %v", order, want)
	}
	// One wake-up per release: each waiter after the first was woken once.
	if s := c.engine.Waits(); s.WakeUps != n || s.Grants != n {
		t.Fatalf("stats %+v, want %d wake-ups and grants", s, n)
	}
}

func TestWaitDeadline(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	o := <-startWaiting(t, ctx, c.engine, key, "late", time.Minute, 300*time.Millisecond)
	if !errors.Is(o.err, ErrNotAcquired) {
		t.Fatalf("waiter: %v, want ErrNotAcquired at its deadline", o.err)
	}
	if s := c.engine.Waits(); s.Timeouts != 1 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
	if c.majority(t, key) != "holder" {
		t.Fatalf("values %v", c.values(t, key))
	}
}

func TestWaitCallerGone(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	goneCtx, leave := context.WithCancel(ctx)
	gone := startWaiting(t, goneCtx, c.engine, key, "gone", time.Minute, 50*time.Second)
	stays := startWaiting(t, ctx, c.engine, key, "stays", time.Minute, 50*time.Second)
	leave()
	if o := <-gone; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("gone waiter: %v, want context.Canceled", o.err)
	}
	waitFor(t, func() bool { return c.engine.Waits().Waiting == 1 })
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "holder"}); err != nil {
		t.Fatal(err)
	}
	if o := <-stays; o.err != nil {
		t.Fatalf("the waiter behind the gone one: %v", o.err)
	}
	if c.majority(t, key) != "stays" {
		t.Fatalf("values %v: the lock went to the gone waiter", c.values(t, key))
	}
	if s := c.engine.Waits(); s.Gone != 1 || s.Grants != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// majority is the value a majority of the backends hold for key, or "".
func (c *cluster) majority(t *testing.T, key string) string {
	t.Helper()
	count := map[string]int{}
	for _, v := range c.values(t, key) {
		count[v]++
	}
	for v, n := range count {
		if n > len(c.direct)/2 && v != "?" {
			return v
		}
	}
	return ""
}

func TestAwaitRelease(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	other := newEngine(t, c.cfg)
	key := uniqueKey(t)
	ctx := t.Context()
	// Free: at once.
	if _, err := other.Read(ctx, Read{Op: OpAwaitRelease, Key: key, Wait: 10 * time.Second}); err != nil {
		t.Fatalf("await a free key: %v", err)
	}
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Held: the wait ends first.
	if _, err := other.Read(ctx, Read{Op: OpAwaitRelease, Key: key, Wait: 200 * time.Millisecond}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("await a held key, 200ms: %v, want ErrTimeout", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := other.Read(ctx, Read{Op: OpAwaitRelease, Key: key, Wait: 50 * time.Second})
		done <- err
	}()
	waitFor(t, func() bool { return other.Waits().Waiting == 1 })
	subscribedQuorum(t, other, key)
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "holder"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("await across the release: %v", err)
	}
	// It took nothing.
	if v := c.values(t, key); v[0] != "" || v[1] != "" || v[2] != "" {
		t.Fatalf("values %v after an await", v)
	}
}

func TestReleasesWatched(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	watcher := newEngine(t, c.cfg)
	ctx := t.Context()
	type heard struct{ key, token string }
	got := make(chan heard, 16)
	stop := watcher.Releases("jobs:*", func(key, token string) { got <- heard{key, token} })
	// Releases returned with a quorum of backends carrying the pattern:
	// the first release is heard.
	for _, k := range []string{"jobs:1", "other:1"} {
		if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{k}, Token: "t-" + k, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{k}, Token: "t-" + k}); err != nil {
			t.Fatal(err)
		}
	}
	if h := <-got; h != (heard{"jobs:1", "t-jobs:1"}) {
		t.Fatalf("heard %+v", h)
	}
	// Its other copies, and the release of a key outside the pattern, are
	// not heard: a delete after them is the next thing.
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{"jobs:2"}, Token: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engine.Write(ctx, Write{Op: OpDelete, Key: "jobs:2"}); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != (heard{"jobs:2", ""}) {
		t.Fatalf("heard %+v, want the delete of jobs:2 next", h)
	}
	stop()
}

// TestReleasesHeardAtQuorum: a release is told to the watchers once a
// quorum of backends told it, not at the first copy, which can come
// before the release has landed on a quorum: a waiter woken then would be
// refused and sleep out the holder's lease. Past the quorum, it waits for
// the other backends that count: a waiter woken at the quorum's copy would
// take the lock where the release had landed and be refused where it had
// not, holding it on a bare quorum that one restart leaves undecidable.
func TestReleasesHeardAtQuorum(t *testing.T) {
	// Stepped time that the test never steps: the copies of the release
	// stay within noticeDedupe of each other however slowly the deletes
	// between them run, and the straggle (one backend timeout past the
	// quorum's copy) does not end here.
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	watcher := newEngine(t, c.cfg)
	ctx := t.Context()
	got := make(chan string, 16)
	stop := watcher.Releases("early:*", func(key, token string) { got <- token })
	defer stop()
	awaitWatchedEverywhere(t, watcher, "early:*")
	// The copies of one release, as release.lua publishes them, from the
	// backends one by one.
	notice := releasedPrefix + "early:k"
	payload := newReleaseID() + "holder"
	for i := range 2 {
		if err := c.direct[i].Publish(ctx, notice, payload).Err(); err != nil {
			t.Fatal(err)
		}
		// A delete through the engine, told by every backend, is heard at
		// once; the release, with i+1 copies of 3 so far, is not, before
		// it or after.
		deleteMarker(t, c, "early:marker")
		if token := <-got; token != "" {
			t.Fatalf("heard %q before the delete: a release told by %d backends of 3", token, i+1)
		}
	}
	if err := c.direct[2].Publish(ctx, notice, payload).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case token := <-got:
		if token != "holder" {
			t.Fatalf("heard %q, want the release told by every backend", token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a release told by every backend was not heard")
	}
}

// TestReleasesStragglers: a release that a quorum but not every backend
// told is heard a backend timeout after the quorum's copy (the others
// never applied it: their key had gone, or their request failed); and at
// the quorum's copy when the others do not count.
func TestReleasesStragglers(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	watcher := newEngine(t, c.cfg)
	ctx := t.Context()
	got := make(chan string, 16)
	stop := watcher.Releases("late:*", func(key, token string) { got <- token })
	defer stop()
	// Releases returns once a quorum carries the pattern; the notices
	// below come from chosen backends, which must all carry it.
	awaitWatchedEverywhere(t, watcher, "late:*")
	publish := func(token string, from ...int) {
		t.Helper()
		payload := newReleaseID() + token
		for _, i := range from {
			if err := c.direct[i].Publish(ctx, releasedPrefix+"late:k", payload).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("first", 0, 1)
	select {
	case token := <-got:
		if token != "first" {
			t.Fatalf("heard %q, want the release told by a quorum", token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a release told by a quorum of backends was never heard")
	}
	c.servers[2].Kill()
	redistest.Eventually(t, func() string {
		if st := watcher.Backends()[2].State; st == StateUp {
			return "the killed backend is still up for the watcher"
		}
		return ""
	})
	// The delete after it is told by the two left, which are all that
	// count: the release, told by them before, is heard first.
	publish("second", 0, 1)
	deleteMarker(t, c, "late:marker")
	if token := <-got; token != "second" {
		t.Fatalf("heard %q first, want the release told by every backend that counts", token)
	}
	if token := <-got; token != "" {
		t.Fatalf("heard %q, want the delete", token)
	}
}

// deleteMarker takes key and deletes it through the cluster's engine: a
// notice that every backend up tells.
func deleteMarker(t *testing.T, c *cluster, key string) {
	t.Helper()
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "m", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engine.Write(ctx, Write{Op: OpDelete, Key: key}); err != nil {
		t.Fatal(err)
	}
}

// TestReleasesSameTokenTwice: a client that releases with the same token
// every time (Spring's registry does) is heard at each release, however
// soon after the last one.
func TestReleasesSameTokenTwice(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	watcher := newEngine(t, c.cfg)
	ctx := t.Context()
	got := make(chan string, 16)
	stop := watcher.Releases("same:*", func(key, token string) { got <- token })
	defer stop()
	for range 3 {
		if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{"same:k"}, Token: "registry", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{"same:k"}, Token: "registry"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a release with the token of the last one was not heard")
		}
	}
}

// TestAwaitHolderRenews: an await whose holder renewed its lock before
// the old expiry does not answer at that expiry, but at the release.
func TestAwaitHolderRenews(t *testing.T) {
	c := newCluster(t, 3, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	key := uniqueKey(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.engine.Read(ctx, Read{Op: OpAwaitRelease, Key: key, Wait: 50 * time.Second})
		done <- err
	}()
	// Its first look has set its timer at the 400 ms expiry.
	waitFor(t, func() bool {
		c.engine.waits.mu.Lock()
		defer c.engine.waits.mu.Unlock()
		q := c.engine.waits.queues[key]
		return q != nil && !q.freeAt.IsZero()
	})
	if _, err := c.engine.Lock(ctx, Lock{Op: OpExtend, Keys: []string{key}, Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the await answered (%v) while the renewed lock was held", err)
	case <-time.After(time.Second): // well past the old expiry
	}
	if _, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "holder"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("await after the release: %v", err)
	}
}

// awaitWatchedEverywhere waits until every backend of e has confirmed its
// subscription to the release pattern.
func awaitWatchedEverywhere(t *testing.T, e *Engine, pattern string) {
	t.Helper()
	redistest.Eventually(t, func() string {
		e.waits.mu.Lock()
		defer e.waits.mu.Unlock()
		if wt := e.waits.watches[releasedPrefix+pattern]; wt == nil || len(wt.confirmed) < len(e.nodes) {
			return "not every backend carries the watch yet"
		}
		return ""
	})
}
