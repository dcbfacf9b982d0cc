package quorum

import (
	"context"
	"sync"
)

// rollbacks tracks the rollbacks still running, by key and token.
//
// Clients retry a failed acquisition with the same token (redsync,
// bsm/redislock and most recipes do). A rollback of the first attempt that
// ran after the retry succeeded would compare-and-delete the retry's
// holding on some backends, and could leave it on fewer than a quorum while
// its holder relies on it. So an operation that takes or extends a lock
// first waits for the rollbacks of the same key and token to end.
type rollbacks struct {
	mu      sync.Mutex
	running map[rollbackID]*rollbackRun
}

type rollbackID struct{ key, token string }

type rollbackRun struct {
	n    int
	done chan struct{}
}

// start registers a rollback of keys for token; the returned func ends it.
func (r *rollbacks) start(keys []string, token string) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running = map[rollbackID]*rollbackRun{}
	}
	for _, k := range keys {
		id := rollbackID{k, token}
		run := r.running[id]
		if run == nil {
			run = &rollbackRun{done: make(chan struct{})}
			r.running[id] = run
		}
		run.n++
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, k := range keys {
			id := rollbackID{k, token}
			if run := r.running[id]; run != nil {
				if run.n--; run.n == 0 {
					close(run.done)
					delete(r.running, id)
				}
			}
		}
	}
}

// wait returns once no rollback of keys for token is running, or with
// ctx's error.
func (r *rollbacks) wait(ctx context.Context, keys []string, token string) error {
	for _, k := range keys {
		r.mu.Lock()
		run := r.running[rollbackID{k, token}]
		r.mu.Unlock()
		if run == nil {
			continue
		}
		select {
		case <-run.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// idle reports whether no rollback of keys for token is running.
func (r *rollbacks) idle(keys []string, token string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if r.running[rollbackID{k, token}] != nil {
			return false
		}
	}
	return true
}
