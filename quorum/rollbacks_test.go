package quorum

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

func TestRollbacksWait(t *testing.T) {
	var r rollbacks
	end1 := r.start([]string{"a", "b"}, "tok")
	end2 := r.start([]string{"a"}, "tok")
	if err := r.wait(t.Context(), []string{"a"}, "other"); err != nil {
		t.Fatalf("another token waited: %v", err)
	}
	if err := r.wait(t.Context(), []string{"c"}, "tok"); err != nil {
		t.Fatalf("another key waited: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- r.wait(context.Background(), []string{"a"}, "tok") }()
	end1()
	select {
	case err := <-waited:
		t.Fatalf("wait returned while a rollback of a/tok still ran: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	end2()
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if len(r.running) != 0 {
		t.Fatalf("rollbacks left registered: %v", r.running)
	}
	end3 := r.start([]string{"a"}, "tok")
	defer end3()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.wait(ctx, []string{"a"}, "tok"); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a cancelled context: %v", err)
	}
}

// TestRetryWaitsForRollback: a client retrying with the same token must not
// race the rollback of its previous attempt, which could otherwise delete
// the new holding on some backends. Here the rollback of the first attempt
// is held up on a paused backend, and the retry waits for it.
func TestRetryWaitsForRollback(t *testing.T) {
	const timeout = 200 * time.Millisecond
	const pause = 800 * time.Millisecond
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: timeout})
	key := uniqueKey(t)
	c.direct[2].Set(t.Context(), key, "other", time.Minute)
	// Connected beforehand, so that the first attempt reaches the paused
	// backend and its effect there is unknown.
	waitAllCount(t, c.engine)
	start := time.Now()
	if err := c.direct[1].Do(t.Context(), "client", "pause", pause.Milliseconds(), "all").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	// One yes, one held elsewhere, one silent that could have said yes:
	// undecided, and rolled back.
	if exp, got := "noquorum", outcome(second(c.engine.acquire(t.Context(), key, "tok", 10*time.Second))); exp != got {
		t.Fatalf("first attempt: expected %s, got %s", exp, got)
	}
	c.direct[2].Del(t.Context(), key)
	if _, err := c.engine.acquire(t.Context(), key, "tok", 10*time.Second); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// A lower bound only: the retry cannot have run before the rollback on
	// the paused backend ended, which is when the pause let it answer or
	// the engine gave up on the connection as stalled (two timeouts), both
	// well after the first attempt's answer (one timeout).
	if elapsed, ended := time.Since(start), 2*timeout; elapsed < ended-50*time.Millisecond {
		t.Fatalf("the retry finished %s after the first attempt began, before its rollback could have ended (%s)", elapsed, ended)
	}
}

// TestStampedRollbackSparesRetry: the rollback of one acquisition deletes
// that acquisition's key and not a later one made with the same token (a
// retry, possibly through another proxy instance).
func TestStampedRollbackSparesRetry(t *testing.T) {
	c := newCluster(t, 1, Config{DisableRestartQuarantine: true})
	n, key := c.engine.nodes[0], uniqueKey(t)
	set := c.engine.set.Token() // the last argument of the scripts that take locks
	run := func(s *backend.Script, args ...any) (int64, error) {
		r, err := n.run(t.Context(), s, []string{key}, args...)
		if err != nil {
			return 0, err
		}
		return r.Integer()
	}
	first, err := run(acquireScript, "tok", 10000, set)
	if err != nil || first <= 0 {
		t.Fatalf("first acquisition: %d, %v", first, err)
	}
	// The first attempt's key is gone (rolled back or expired) and the retry
	// takes it again with the same token.
	c.direct[0].Del(t.Context(), key)
	retry, err := run(acquireScript, "tok", 20000, set)
	if err != nil || retry <= first {
		t.Fatalf("retry: stamp %d after %d, %v", retry, first, err)
	}
	if deleted, err := run(releaseStampedScript, "tok", first); err != nil || deleted != 0 {
		t.Fatalf("the first attempt's rollback deleted the retry's key: %d, %v", deleted, err)
	}
	if deleted, err := run(releaseStampedScript, "tok", retry); err != nil || deleted != 1 {
		t.Fatalf("the retry's own rollback: %d, %v", deleted, err)
	}
	if got, err := run(acquireScript, "other", 10000, set); err != nil || got <= 0 {
		t.Fatalf("acquisition after the rollback: %d, %v", got, err)
	}
	if got, _ := run(acquireScript, "tok", 10000, set); got != 0 {
		t.Fatalf("acquisition of a held key answered %d, want 0", got)
	}
}
