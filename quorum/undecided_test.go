package quorum

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// A backend's part in a case of TestSilentHoldingFree.
const (
	silent  = 'S' // paused (SIGSTOP): it times out; it holds the key too
	holding = 'H' // holds the key: our token for release and extend, another's for acquire
	free    = 'F' // no key
)

// expectedOutcome is the rule every operation follows, worked out here on
// its own rather than by the code under test: a quorum of backends that
// agree (did what was asked, hold the value) is "ok"; "refused" (nil, not
// held, 0) only when even all the silent backends agreeing would not make a
// quorum; anything else could go either way, and is "noquorum".
func expectedOutcome(agree, silentN, quorum int) string {
	switch {
	case agree >= quorum:
		return "ok"
	case agree+silentN < quorum:
		return "refused"
	}
	return "noquorum"
}

// silentCase is one operation run in every case: the value the holding (and
// silent) backends hold, which of the backends that answer agree, and how
// to run it and name its outcome.
type silentCase struct {
	name  string
	held  string // "me": our token; "other": another token's; "v": a value
	keys  int
	agree func(holding, free int) int
	run   func(ctx context.Context, e *Engine, keys []string) string
}

func holders(h, _ int) int { return h }
func frees(_, f int) int   { return f }
func both(h, f int) int    { return h + f }

func lockOutcome(_ Result, err error) string { return outcome(err) }

var silentCases = []silentCase{
	{"Acquire", "other", 1, frees, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.acquire(ctx, k[0], "me", 30*time.Second))
	}},
	{"Extend", "me", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.extend(ctx, k[0], "me", 30*time.Second))
	}},
	{"Release", "me", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.release(ctx, k[0], "me"))
	}},
	{"Get", "v", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		v, err := e.get(ctx, k[0])
		switch {
		case err == nil && v == "v":
			return "ok"
		case err == nil:
			return fmt.Sprintf("got %q", v)
		case errors.Is(err, ErrNotFound):
			return "refused"
		}
		return outcome(err)
	}},
	{"PTTL", "v", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return ttlOutcome(e.pttl(ctx, k[0]))
	}},
	{"Exists", "v", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return boolOutcome(e.exists(ctx, k[0]))
	}},
	{"OwnerPTTL", "me", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return ttlOutcome(e.ownerPTTL(ctx, k[0], "me"))
	}},
	{"Delete", "v", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return boolOutcome(e.del(ctx, k[0]))
	}},
	{"Expire", "v", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return boolOutcome(e.expire(ctx, k[0], 40*time.Second))
	}},
	{"AcquireAll", "other", 2, frees, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.acquireAll(ctx, k, "me", 30*time.Second))
	}},
	{"ExtendAll", "me", 2, holders, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.extendAll(ctx, k, "me", 30*time.Second))
	}},
	{"ReleaseAll", "me", 2, holders, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.releaseAll(ctx, k, "me"))
	}},
	{"ExtendBy", "me", 1, holders, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.extendBy(ctx, k[0], "me", 5*time.Second))
	}},
	{"ExtendOrAcquire", "other", 1, frees, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.extendOrAcquire(ctx, k[0], "me", 30*time.Second))
	}},
	// Renews where it holds the key and takes it where it is free.
	{"ExtendOrAcquire/renew", "me", 1, both, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.extendOrAcquire(ctx, k[0], "me", 30*time.Second))
	}},
	{"AcquireOrRenew", "other", 1, frees, func(ctx context.Context, e *Engine, k []string) string {
		return lockOutcome(e.acquireOrRenew(ctx, k[0], "me", 2, 30*time.Second))
	}},
}

func ttlOutcome(d time.Duration, err error) string {
	switch {
	case err == nil && d > 0 && d <= 30*time.Second:
		return "ok"
	case err == nil:
		return fmt.Sprintf("got %s", d)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotHeld):
		return "refused"
	}
	return outcome(err)
}

func boolOutcome(ok bool, err error) string {
	switch {
	case err != nil:
		return outcome(err)
	case ok:
		return "ok"
	}
	return "refused"
}

// voteFailures counts, per backend, the votes that did not count.
type voteFailures struct {
	mu sync.Mutex
	by map[string]int
}

func (v *voteFailures) Waited(time.Duration, string) {}

func (v *voteFailures) Vote(backend string, _ time.Duration, kind string) {
	if kind == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by == nil {
		v.by = map[string]int{}
	}
	v.by[backend]++
}

func (v *voteFailures) snapshot() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.by))
	for k, n := range v.by {
		out[k] = n
	}
	return out
}

// TestSilentHoldingFree runs every lock operation and every read for each
// way of making every backend of 3 and of 5 silent, holding or free, and
// asserts the outcome the rule gives (expectedOutcome), and that an
// undecided extension leaves the holder's lock alone while an undecided
// acquisition leaves nothing of its own behind.
//
// The cases are dealt to silentShards clusters that run side by side: a
// case waits out a node timeout, not the CPU.
func TestSilentHoldingFree(t *testing.T) {
	const silentShards = 4
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			q := n/2 + 1
			roles := []byte{silent, holding, free}
			cases := 1
			for range n {
				cases *= len(roles)
			}
			var shards sync.WaitGroup
			for shard := range silentShards {
				c := newCluster(t, n, Config{DisableRestartQuarantine: true})
				failures := new(voteFailures)
				cfg := c.cfg
				// Short, since every case with a silent backend waits it out; a
				// backend that misses it without being paused makes its case
				// run again (below) rather than fail.
				cfg.NodeTimeout = 100 * time.Millisecond
				cfg.Observer = failures
				e := newEngine(t, cfg)
				shards.Go(func() {
					for i := shard; i < cases; i += silentShards {
						runSilentRoles(t, c, e, failures, n, q, i, roles)
					}
				})
			}
			shards.Wait()
		})
	}
}

// runSilentRoles runs case i of TestSilentHoldingFree, the i-th way of
// giving n backends roles, as a subtest named after them.
func runSilentRoles(t *testing.T, c *cluster, e *Engine, failures *voteFailures, n, q, i int, roles []byte) {
	parts := make([]byte, n)
	for j, x := 0, i; j < n; j, x = j+1, x/len(roles) {
		parts[j] = roles[x%len(roles)]
	}
	name := string(parts)
	t.Run(name, func(t *testing.T) {
		h, s := strings.Count(name, string(holding)), strings.Count(name, string(silent))
		f := n - h - s
		for attempt := 1; ; attempt++ {
			got, clean := runSilentCase(t, c, e, failures, name)
			if !clean && attempt < 3 {
				t.Logf("attempt %d: a backend that was not paused missed the timeout; again", attempt)
				continue
			}
			for _, sc := range silentCases {
				if exp := expectedOutcome(sc.agree(h, f), s, q); got[sc.name] != exp {
					t.Errorf("%s: expected %s, got %s", sc.name, exp, got[sc.name])
				}
			}
			return
		}
	})
}

// runSilentCase sets the case up, runs every operation at once while the
// silent backends are paused, checks what they left behind, and reports
// each operation's outcome and whether only the paused backends failed to
// answer.
func runSilentCase(t *testing.T, c *cluster, e *Engine, failures *voteFailures, roles string) (map[string]string, bool) {
	t.Helper()
	waitAllCount(t, e) // the last case's paused backends are back
	keys := make(map[string][]string, len(silentCases))
	for _, sc := range silentCases {
		for range sc.keys {
			keys[sc.name] = append(keys[sc.name], uniqueKey(t))
		}
		for i, role := range roles {
			if role == free {
				continue
			}
			for _, k := range keys[sc.name] {
				if err := c.direct[i].Set(t.Context(), k, sc.held, 30*time.Second).Err(); err != nil {
					t.Fatalf("backend %d: SET: %v", i, err)
				}
			}
		}
	}
	before := failures.snapshot()
	for i, role := range roles {
		if role == silent {
			c.servers[i].Pause()
		}
	}
	var (
		mu  sync.Mutex
		got = make(map[string]string, len(silentCases))
		wg  sync.WaitGroup
	)
	for _, sc := range silentCases {
		wg.Go(func() {
			out := sc.run(t.Context(), e, keys[sc.name])
			mu.Lock()
			got[sc.name] = out
			mu.Unlock()
		})
	}
	wg.Wait()
	after := failures.snapshot()
	clean := true
	for i, role := range roles {
		if role != silent && after[c.servers[i].Addr()] != before[c.servers[i].Addr()] {
			clean = false
		}
	}

	// What is left on the backends that answered. Read before resuming the
	// silent ones, so that nothing they do late is mistaken for the
	// operation's doing; the rollbacks of yes voters are done by now, and
	// those of late replies land within a node timeout.
	for i, role := range roles {
		if role == silent {
			continue
		}
		for _, op := range []string{"Extend", "ExtendAll", "ExtendBy", "ExtendOrAcquire/renew"} {
			if role != holding || got[op] == "refused" {
				continue
			}
			for _, k := range keys[op] {
				if v := c.value(t, i, k); v != "me" {
					t.Errorf("%s %s: backend %d holds %q for %s; an extension that was not refused must leave the holder's lock", op, got[op], i, v, k)
				}
			}
		}
		for _, op := range []string{"Acquire", "AcquireAll", "ExtendOrAcquire", "AcquireOrRenew", "ExtendOrAcquire/renew"} {
			if role != free || got[op] == "ok" {
				continue
			}
			redistest.Eventually(t, func() string {
				for _, k := range keys[op] {
					if v := c.value(t, i, k); v != "" {
						return fmt.Sprintf("%s %s: backend %d still holds %q for %s", op, got[op], i, v, k)
					}
				}
				return ""
			})
		}
	}
	for i, role := range roles {
		if role == silent {
			c.servers[i].Resume()
		}
	}
	return got, clean
}
