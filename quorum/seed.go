package quorum

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Re-seeding the fencing counter of a backend that may have lost it.
//
// fence.go's argument needs every granted token t to stay on a quorum of
// backends' counters: a later grant's voters meet them on some backend,
// which mints more than t. A backend whose data set another process wrote
// (a restart, a failover) or that was never marked may have lost its
// counter; were it to count at once, a later grant voted by it and by
// backends that never carried t could mint less. So before its replies
// count (after its quarantine, when there is one), the counters of a
// quorum of the other backends that count are read and its counter raised
// to their largest. Those meet the carriers of every token granted before
// it lost its data, and none of them lost theirs (they count), so its
// counter is then at least every such token. Tokens granted after the loss
// are carried by backends that counted then, which this one was not.
//
// Where fewer than a quorum of the other backends count (every backend
// restarted at once, or the first start with fencing on), waiting for them
// could wait for ever: they may be waiting for this one. The counter is
// then raised to the largest of whatever answered, and the clock floor
// keeps its tokens above those granted before its quarantine, as long as
// the proxies' clocks are within max_ttl of each other. That is the same
// bound mutual exclusion needs from a quarantine, and it is logged.
//
// Each process is re-seeded once: lua/fence_seed.lua records its run_id in
// fenceSeedKey, which lua/identity.lua reads at every greeting, so that a
// proxy started afterwards, or reconnecting, does not wait again.

// fenceSeedKey names the redis-server process whose counter was re-seeded.
const fenceSeedKey = ReservedPrefix + "fenceseed"

// seedRetry is how long a re-seed that found too few backends waits before
// it tries again.
const seedRetry = time.Second

// seed re-seeds n's fencing counter, trying again while too few backends
// answer, until it is done, n has reached another process (whose greeting
// starts its own), or the engine is closed.
func (e *Engine) seed(n *node) {
	defer func() {
		select {
		case e.seedNews <- struct{}{}:
		default:
		}
	}()
	waitLogged := false
	for {
		n.mu.Lock()
		runID, pending := n.runID, n.unseeded
		if !pending {
			n.seeding = false
		}
		n.mu.Unlock()
		if !pending {
			return
		}
		err := e.seedOnce(n, runID)
		if err == nil {
			continue // pending is false now, or another process needs its own
		}
		if !waitLogged {
			n.log.Warn("backend waits for its fencing counter to be re-seeded before it counts toward quorum", "err", err)
			waitLogged = true
		}
		select {
		case <-e.closed:
			n.mu.Lock()
			n.seeding = false
			n.mu.Unlock()
			return
		case <-e.clock.After(seedRetry):
		}
	}
}

// awaitSeeds waits, at most for d, for the re-seeds under way to end, so
// that a new engine whose backends lack only the mark of a re-seed (the
// first start with fencing on) counts them once New returns.
func (e *Engine) awaitSeeds(d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		seeding := false
		for _, n := range e.nodes {
			n.mu.Lock()
			seeding = seeding || n.seeding
			n.mu.Unlock()
		}
		if !seeding {
			return
		}
		select {
		case <-e.seedNews:
		case <-deadline.C:
			return
		}
	}
}

// errSeedSources is seedOnce's error when a quorum of the other backends
// counts but too few of them answered.
var errSeedSources = errors.New("fewer than a quorum of the other backends answered")

// seedOnce reads the other backends' counters and raises n's, for the
// process runID, to their largest.
func (e *Engine) seedOnce(n *node, runID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.NodeTimeout)
	defer cancel()
	counting := 0
	for i, o := range e.nodes {
		if i != n.index && e.counts(i, o) {
			counting++
		}
	}
	f := fanout(e, backend.KeyCommand("GET", fenceCounterKey), func(_ *node, r backend.Reply) (int64, error) {
		if r.IsNil() {
			return 0, nil
		}
		s, err := r.Bulk()
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(s, 10, 64)
	})
	var high int64
	counted, answered := 0, 0
	for _, v := range collectAll(ctx, f, len(e.nodes)) {
		if v.node == n.index {
			continue
		}
		var q *QuarantineError
		var c *ClockError
		switch {
		case v.err == nil:
			counted++
		case errors.As(v.err, &q), errors.As(v.err, &c):
			// It answered, but may have lost data itself: its counter can
			// only raise the seed, which never hurts.
		default:
			continue
		}
		answered++
		high = max(high, v.val)
	}
	strict := counted >= e.quorum
	if !strict && counting >= e.quorum {
		return fmt.Errorf("%w (%d of %d)", errSeedSources, counted, counting)
	}
	r, err := n.run(ctx, fenceSeedScript, []string{fenceCounterKey, fenceSeedKey}, fenceText(high), runID)
	if err != nil {
		return fmt.Errorf("re-seeding: %w", err)
	}
	done, err := r.Integer()
	if err != nil {
		return fmt.Errorf("re-seeding: %w", err)
	}
	if done != 1 {
		// The server is another process now, whose greeting marks it
		// unseeded again, or not yet.
		return errors.New("re-seeding: the backend restarted")
	}
	n.mu.Lock()
	same := n.runID == runID
	if same {
		n.unseeded = false
	}
	n.mu.Unlock()
	if !same {
		return nil
	}
	e.fences.reseeds.Add(1)
	attrs := []any{"counter", high, "from", answered}
	if strict {
		n.log.Info("backend's fencing counter re-seeded from a quorum of the other backends; it counts toward quorum", attrs...)
	} else {
		n.log.Warn("backend's fencing counter re-seeded from fewer than a quorum of the other backends, because fewer count: until they do, its tokens are above earlier grants' only while the proxies' clocks are within max_ttl of each other; it counts toward quorum", attrs...)
	}
	n.changed()
	return nil
}

// counts reports whether backend i counts toward quorum now.
func (e *Engine) counts(i int, n *node) bool {
	st, _ := n.pipe.Status()
	return stateOf(st) == StateUp && e.verdict(i, n) == nil
}
