package quorum

import (
	"context"
	"errors"
	"testing"
	"time"
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
	start := time.Now()
	if err := c.direct[1].Do(t.Context(), "client", "pause", pause.Milliseconds(), "all").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	if exp, got := "refused", outcome(second(c.engine.Acquire(t.Context(), key, "tok", 10*time.Second))); exp != got {
		t.Fatalf("first attempt: expected %s, got %s", exp, got)
	}
	c.direct[2].Del(t.Context(), key)
	if _, err := c.engine.Acquire(t.Context(), key, "tok", 10*time.Second); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// A lower bound only: the retry cannot have run before the rollback on
	// the paused backend ended, which is after the pause.
	if elapsed := time.Since(start); elapsed < pause-50*time.Millisecond {
		t.Fatalf("the retry finished %s after the first attempt began, before the pause (%s) let its rollback end", elapsed, pause)
	}
}
