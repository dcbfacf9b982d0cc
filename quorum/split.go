package quorum

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// A split: contenders for a free lock each took it on some backends, none
// on a quorum (two of them over four backends while a fifth is down, or
// three over five). Every one fails and rolls back, and the lock is free
// again, but nobody's release will say so: a client that waits for an
// unlock message (Redisson, Spring's PUB_SUB_LOCK) sleeps out the other
// contender's lease or its whole wait, and one that tries once is told
// "held" of a lock nobody holds. Redlock's answer is to try again after a
// random pause, which the engine does once for the client.

// splitPause is the shortest pause before a split acquisition is tried
// again; the pause is random in [splitPause, 4×splitPause), so that
// contenders that split do not meet again.
const splitPause = 10 * time.Millisecond

// retrySplit runs try, and once more after a random pause when it failed
// on a split (Result.Split). The second try is skipped when ctx ends
// first, or while this engine is still rolling the first back (a backend
// hung): it would wait for that rollback, and the caller would rather
// hear now.
func (e *Engine) retrySplit(ctx context.Context, keys []string, token string, try func() (Result, error)) (Result, error) {
	res, err := try()
	if err == nil || !res.Split {
		return res, err
	}
	wait := splitPause + rand.N(3*splitPause)
	if e.hooks.splitPaused != nil {
		wait = e.hooks.splitPaused()
	}
	pause := time.NewTimer(wait)
	defer pause.Stop()
	select {
	case <-ctx.Done():
		return res, err
	case <-pause.C:
	}
	if !e.rollbacks.idle(keys, token) {
		return res, err
	}
	e.splits.retried.Add(1)
	res, err = try()
	if err == nil {
		e.splits.granted.Add(1)
	}
	return res, err
}

// splitCounts counts the split acquisitions tried again.
type splitCounts struct {
	retried atomic.Uint64
	granted atomic.Uint64
}

// SplitStats is what trying split acquisitions again did since the engine
// started.
type SplitStats struct {
	Retried uint64 // acquisitions that split, tried again
	Granted uint64 // of those, granted on the second try
}

// Splits reports what trying split acquisitions again did.
func (e *Engine) Splits() SplitStats {
	return SplitStats{Retried: e.splits.retried.Load(), Granted: e.splits.granted.Load()}
}
