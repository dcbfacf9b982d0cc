package quorum

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestOpNames(t *testing.T) {
	seen := map[string]bool{}
	for op := range Op(NumOps) {
		name := op.String()
		if name == "" || seen[name] {
			t.Errorf("op %d: name %q is empty or taken", op, name)
		}
		seen[name] = true
		if op.Takes() && op.ForToken() {
			t.Errorf("%s both takes free keys and is about the token's own", op)
		}
	}
	if exp, got := fmt.Sprintf("op(%d)", NumOps), Op(NumOps).String(); exp != got {
		t.Errorf("an op out of range is named %q, want %q", got, exp)
	}
}

// TestRequestsCarryTheirOps checks that each request takes exactly its
// operations, with the number of keys they need: a request the engine
// cannot carry is the caller's mistake, told before any backend is asked.
func TestRequestsCarryTheirOps(t *testing.T) {
	e := newEngine(t, Config{Backends: []string{"redis://127.0.0.1:1"}})
	ctx := t.Context()
	one, two := []string{"k"}, []string{"a", "b"}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"read as lock", func() error { _, err := e.Lock(ctx, Lock{Op: OpGet, Keys: one, TTL: time.Second}); return err }},
		{"acquire of two keys", func() error {
			_, err := e.Lock(ctx, Lock{Op: OpAcquire, Keys: two, Token: "t", TTL: time.Second})
			return err
		}},
		{"acquire all of none", func() error { _, err := e.Lock(ctx, Lock{Op: OpAcquireAll, Token: "t", TTL: time.Second}); return err }},
		{"lock as unlock", func() error { _, err := e.Unlock(ctx, Unlock{Op: OpAcquire, Keys: one, Token: "t"}); return err }},
		{"release of two keys", func() error { _, err := e.Unlock(ctx, Unlock{Op: OpRelease, Keys: two, Token: "t"}); return err }},
		{"write as read", func() error { _, err := e.Read(ctx, Read{Op: OpDelete, Key: "k"}); return err }},
		{"read as write", func() error { _, err := e.Write(ctx, Write{Op: OpGet, Key: "k"}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opErr *OpError
			if err := tc.call(); !errors.As(err, &opErr) {
				t.Fatalf("want an *OpError, got %v", err)
			}
		})
	}
}

// TestContextBoundsTheWait checks what ctx promises: the wait for votes
// ends with it, as an undecided outcome that says why, and what must be
// done anyway is: the acquisition is rolled back where it landed.
func TestContextBoundsTheWait(t *testing.T) {
	c := newCluster(t, 3, Config{NodeTimeout: 5 * time.Second})
	c.servers[1].Pause()
	c.servers[2].Pause()
	t.Cleanup(func() {
		c.servers[1].Resume()
		c.servers[2].Resume()
	})
	key := uniqueKey(t)
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		sent func() bool // the request reached the backend that answers
	}{
		{"lock", func(ctx context.Context) error {
			_, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "tok", TTL: 30 * time.Second})
			return err
		}, func() bool { return c.value(t, 0, key) == "tok" }},
		{"unlock", func(ctx context.Context) error {
			_, err := c.engine.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "tok"})
			return err
		}, nil},
		{"read", func(ctx context.Context) error { _, err := c.engine.Read(ctx, Read{Op: OpGet, Key: key}); return err }, nil},
		{"write", func(ctx context.Context) error {
			_, err := c.engine.Write(ctx, Write{Op: OpDelete, Key: key})
			return err
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx) }()
			if tc.sent != nil {
				waitFor(t, tc.sent)
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, context.Canceled) {
					t.Fatalf("want no quorum and context.Canceled, got %v", err)
				}
			case <-time.After(2 * time.Second): // well within the 5 s backend timeout
				t.Fatal("the call outlived its context")
			}
			if tc.sent != nil {
				// It landed on the backend that answers; the rollback runs
				// anyway: the caller's leaving does not end what must be undone.
				waitFor(t, func() bool { return c.value(t, 0, key) == "" })
			}
		})
	}
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
