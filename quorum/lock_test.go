package quorum

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestAcquireEverySubset checks, for every subset of backends that is
// killed, paused or already locked by someone else, the exact outcome of an
// acquisition, and what each backend holds afterwards.
//
// Each kind of fault has a cluster of its own and runs beside the others:
// the cases wait on node timeouts and restarts, not on the CPU.
func TestAcquireEverySubset(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			q := n/2 + 1
			var faults sync.WaitGroup
			for _, fault := range []string{"killed", "paused", "prelocked"} {
				// Each failing case with paused backends waits this long.
				c := newCluster(t, n, Config{DisableRestartQuarantine: true, NodeTimeout: 300 * time.Millisecond})
				faults.Go(func() {
					for mask := 0; mask < 1<<n; mask++ {
						hit := func(i int) bool { return mask&(1<<i) != 0 }
						k := bits.OnesCount(uint(mask))
						t.Run(fmt.Sprintf("%s=%0*b", fault, n, mask), func(t *testing.T) {
							key, token := uniqueKey(t), "me"
							// A fresh engine per case: go-redis stops dialling a backend
							// for up to a second after repeated refusals, which would
							// carry one case's faults into the next.
							e := newEngine(t, c.cfg)
							// Connect before the faults, so only they decide the outcome.
							redistest.Eventually(t, func() string {
								for _, s := range e.Probe(t.Context()) {
									if s.Err != nil {
										return fmt.Sprintf("backend %s before the faults: %v", s.Addr, s.Err)
									}
								}
								return ""
							})
							for i := range n {
								switch {
								case hit(i) && fault == "prelocked":
									c.direct[i].Set(t.Context(), key, "other", time.Minute)
								}
							}
							for i := range n {
								if !hit(i) || fault == "prelocked" {
									c.resetStats(t, i)
								}
							}
							for i := range n {
								switch {
								case hit(i) && fault == "killed":
									c.servers[i].Kill()
								case hit(i) && fault == "paused":
									c.servers[i].Pause()
								}
							}

							_, err := e.acquire(t.Context(), key, token, 10*time.Second)

							for i := range n {
								switch {
								case hit(i) && fault == "killed":
									c.servers[i].Restart()
								case hit(i) && fault == "paused":
									c.servers[i].Resume()
								}
							}
							want := "ok"
							switch {
							case n-k >= q:
							case fault == "prelocked":
								want = "refused"
							default:
								want = "noquorum"
							}
							if got := outcome(err); got != want {
								t.Fatalf("expected %s, got %s", want, got)
							}

							// The answer comes with the quorum; the other backends'
							// writes (or rollbacks) land within a node timeout.
							redistest.Eventually(t, func() string {
								values := c.values(t, key)
								for i := range n {
									exp := ""
									switch {
									case hit(i) && fault == "prelocked":
										exp = "other"
									case hit(i):
										continue // lost or late: nothing to assert
									case want == "ok":
										exp = token
									}
									if values[i] != exp {
										return fmt.Sprintf("backend %d holds %q, expected %q (all: %q)", i, values[i], exp, values)
									}
									// One SET: never retried. A backend that refused a
									// granted lock is asked again by its top-up
									// (topup.go), once a round at most.
									most := 1
									if hit(i) && want == "ok" {
										most += len(topUpDelays)
									}
									if got := c.setCalls(t, i); got < 1 || got > most {
										return fmt.Sprintf("backend %d ran SET %d times, expected 1 to %d", i, got, most)
									}
								}
								return ""
							})
						})
					}
				})
			}
			faults.Wait()
		})
	}
}

func TestAcquireContention(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	const workers, rounds = 16, 100
	var (
		inside   int32
		mu       sync.Mutex
		overlaps int
		acquired int
		failures []error
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				token := fmt.Sprintf("w%d-r%d", w, r)
				_, err := c.engine.acquire(context.Background(), key, token, 5*time.Second)
				if err != nil {
					continue
				}
				// A deliberately non-atomic critical section: two holders at
				// once would be seen.
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				acquired++
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				if _, err := c.engine.release(context.Background(), key, token); err != nil {
					mu.Lock()
					failures = append(failures, err) // a holder that cannot release is a bug here
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if overlaps != 0 {
		t.Fatalf("%d overlapping holdings", overlaps)
	}
	if len(failures) > 0 {
		t.Fatalf("%d releases by the holder failed, first: %v", len(failures), failures[0])
	}
	if acquired == 0 {
		t.Fatal("nobody ever acquired the lock")
	}
	t.Logf("%d of %d attempts acquired", acquired, workers*rounds)
}

func TestAcquireNoValidityLeft(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	// The drift floor alone (2ms) exceeds a 1ms TTL.
	_, err := c.engine.acquire(t.Context(), key, "me", time.Millisecond)
	if exp, got := "refused", outcome(err); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	// The backend whose reply came after the decision is rolled back when it
	// replies.
	redistest.Eventually(t, func() string {
		if got := c.values(t, key); slices.Contains(got, "me") {
			return fmt.Sprintf("lock left behind after a failed acquisition: %q", got)
		}
		return ""
	})
}

func TestAcquireRejectsTTL(t *testing.T) {
	e := newEngine(t, Config{Backends: []string{"redis://127.0.0.1:1"}, MaxTTL: time.Minute})
	for _, ttl := range []time.Duration{0, -time.Second, time.Minute + time.Millisecond} {
		_, err := e.acquire(t.Context(), "k", "v", ttl)
		var te *TTLError
		if !errors.As(err, &te) {
			t.Errorf("ttl %s: expected a *TTLError, got %v", ttl, err)
		}
	}
}

// TestAcquirePausedBackendDoesNotSlow shows that the answer comes with the
// quorum, not with the slowest backend.
func TestAcquirePausedBackendDoesNotSlow(t *testing.T) {
	const timeout = 500 * time.Millisecond
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: timeout})
	c.servers[4].Pause()
	defer c.servers[4].Resume()
	for range 5 {
		start := time.Now()
		if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", 10*time.Second); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if elapsed := time.Since(start); elapsed >= timeout {
			t.Fatalf("acquisition took %s with one paused backend; the per-backend timeout is %s", elapsed, timeout)
		}
	}
}

// TestAcquireMajorityDownIsAnError shows that an outage is reported as an
// error, quickly, and never as contention.
func TestAcquireMajorityDownIsAnError(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, fault := range []string{"killed", "paused"} {
		t.Run(fault, func(t *testing.T) {
			c := newCluster(t, 5, Config{DisableRestartQuarantine: true, NodeTimeout: timeout})
			for _, s := range c.servers[:3] {
				if fault == "killed" {
					s.Kill()
				} else {
					s.Pause()
					defer s.Resume()
				}
			}
			start := time.Now()
			_, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", 10*time.Second)
			elapsed := time.Since(start)
			var nq *NoQuorumError
			if !errors.As(err, &nq) {
				t.Fatalf("expected *NoQuorumError, got %v", err)
			}
			if exp, got := 2, nq.Counted; exp != got {
				t.Errorf("counted: expected %d, got %d", exp, got)
			}
			if exp, got := 3, len(nq.Nodes); exp != got {
				t.Errorf("failed backends named: expected %d, got %d (%v)", exp, got, nq)
			}
			if elapsed >= 2*timeout {
				t.Errorf("answer took %s, expected under 2 × %s", elapsed, timeout)
			}
		})
	}
}

// TestAcquireLateYesRolledBack: a backend whose OK arrives after the
// acquisition was decided as failed must not keep the key.
func TestAcquireLateYesRolledBack(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 2 * time.Second})
	key := uniqueKey(t)
	for _, i := range []int{0, 2} {
		c.direct[i].Set(t.Context(), key, "other", time.Minute)
	}
	c.resetStats(t, 1)
	// Backend 1 holds every command for a while, then runs them in order.
	if err := c.direct[1].Do(t.Context(), "client", "pause", 300, "all").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	_, err := c.engine.acquire(t.Context(), key, "me", 30*time.Second)
	if exp, got := "refused", outcome(err); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		if calls, held := c.setCalls(t, 1), c.values(t, key)[1]; calls != 1 || held != "" {
			return fmt.Sprintf("backend 1 holds %q (SET ran %d times)", held, calls)
		}
		return ""
	})
}

// TestContentionDoesNotSplit: with a backend down, two acquisitions that
// split the live backends between them would each be undecided (the down
// backend could have given either a quorum). Through one engine they reach
// every backend in the same order, so one wins everywhere and the others
// are refused: contention alone never answers NOQUORUM.
func TestContentionDoesNotSplit(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	c.servers[4].Kill()
	key := uniqueKey(t)
	const workers, rounds = 16, 100
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				token := fmt.Sprintf("w%d-r%d", w, r)
				_, err := c.engine.acquire(t.Context(), key, token, 5*time.Second)
				if err == nil {
					c.engine.release(t.Context(), key, token)
				}
				mu.Lock()
				outcomes[outcome(err)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if outcomes["noquorum"] != 0 || outcomes["ok"] == 0 {
		t.Fatalf("outcomes of %d contending acquisitions with one backend of five down: %v; want no NOQUORUM", workers*rounds, outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
}

func TestExtend(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 2*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	res, err := c.engine.extend(t.Context(), key, "owner", 30*time.Second)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if res.Validity <= 20*time.Second || res.Validity > 30*time.Second {
		t.Errorf("validity after extend: %s, expected a little under 30s", res.Validity)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 20*time.Second) })

	if exp, got := "refused", outcome(second(c.engine.extend(t.Context(), key, "intruder", 30*time.Second))); exp != got {
		t.Fatalf("extend by a non-owner: expected %s, got %s", exp, got)
	}
	// The owner's lock is untouched by a refused stranger.
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, "owner") })
}

// TestExtendBelowQuorumRollsBack: an extension that fails leaves nothing
// held, since its holder can no longer rely on the lock.
func TestExtendBelowQuorumRollsBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	for _, i := range []int{0, 1} {
		c.direct[i].Set(t.Context(), key, "owner", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.extend(t.Context(), key, "owner", 30*time.Second))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "", "", "") })
}

func TestAcquireAll(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	a, b := uniqueKey(t), uniqueKey(t)
	if _, err := c.engine.acquireAll(t.Context(), []string{a, b}, "owner", 10*time.Second); err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, a, "owner") + c.holdsOnQuorum(t, b, "owner") })

	// One of the keys held elsewhere on a majority: nothing is taken.
	d, held := uniqueKey(t), uniqueKey(t)
	for _, i := range []int{0, 1, 2} {
		c.direct[i].Set(t.Context(), held, "other", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.acquireAll(t.Context(), []string{d, held}, "me", 10*time.Second))); exp != got {
		t.Fatalf("with one key held elsewhere: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		return expectValues(c.values(t, d), "", "", "", "", "") + expectValues(c.values(t, held), "other", "other", "other", "", "")
	})

	if exp, got := "refused", outcome(second(c.engine.extendAll(t.Context(), []string{a, b}, "intruder", 20*time.Second))); exp != got {
		t.Fatalf("ExtendAll by a non-owner: expected %s, got %s", exp, got)
	}
	if _, err := c.engine.extendAll(t.Context(), []string{a, b}, "owner", 40*time.Second); err != nil {
		t.Fatalf("ExtendAll: %v", err)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, a, 30*time.Second) + c.ttlOnQuorum(t, b, 30*time.Second) })
	if exp, got := "refused", outcome(second(c.engine.releaseAll(t.Context(), []string{a, b}, "intruder"))); exp != got {
		t.Fatalf("ReleaseAll by a non-owner: expected %s, got %s", exp, got)
	}
	if _, err := c.engine.releaseAll(t.Context(), []string{a, b}, "owner"); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	redistest.Eventually(t, func() string {
		return expectValues(c.values(t, a), "", "", "", "", "") + expectValues(c.values(t, b), "", "", "", "", "")
	})
}

func TestExtendBy(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, MaxTTL: 30 * time.Second})
	key := uniqueKey(t)
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	res, err := c.engine.extendBy(t.Context(), key, "owner", 5*time.Second)
	if err != nil {
		t.Fatalf("ExtendBy: %v", err)
	}
	if res.Validity < 14*time.Second || res.Validity > 15*time.Second {
		t.Errorf("validity after adding 5s to 10s: %s", res.Validity)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 14*time.Second) })
	if exp, got := "refused", outcome(second(c.engine.extendBy(t.Context(), key, "intruder", time.Second))); exp != got {
		t.Fatalf("ExtendBy by a non-owner: expected %s, got %s", exp, got)
	}
	var te *TTLError
	if _, err := c.engine.extendBy(t.Context(), key, "owner", 20*time.Second); !errors.As(err, &te) || te.TTL <= 30*time.Second {
		t.Fatalf("ExtendBy past max_ttl: expected a *TTLError over 30s, got %v", err)
	}
}

func TestExtendOrAcquire(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	// Free: taken.
	if _, err := c.engine.extendOrAcquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("on a free key: %v", err)
	}
	// Held by the token: extended.
	if _, err := c.engine.extendOrAcquire(t.Context(), key, "owner", 40*time.Second); err != nil {
		t.Fatalf("by the holder: %v", err)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 30*time.Second) })
	// Held by another: refused, and the holder keeps it.
	if exp, got := "refused", outcome(second(c.engine.extendOrAcquire(t.Context(), key, "intruder", 10*time.Second))); exp != got {
		t.Fatalf("by another token: expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, "owner") })
}

func TestAcquireOrRenew(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	const token = "tok123"
	if _, err := c.engine.acquireOrRenew(t.Context(), key, token+"meta1", len(token), 10*time.Second); err != nil {
		t.Fatalf("first obtain: %v", err)
	}
	// Same token, new metadata: renewed, with the new value.
	if _, err := c.engine.acquireOrRenew(t.Context(), key, token+"meta2", len(token), 20*time.Second); err != nil {
		t.Fatalf("re-obtain with the same token: %v", err)
	}
	redistest.Eventually(t, func() string { return c.holdsOnQuorum(t, key, token+"meta2") })
	if exp, got := "refused", outcome(second(c.engine.acquireOrRenew(t.Context(), key, "other1meta", len(token), 10*time.Second))); exp != got {
		t.Fatalf("another token: expected %s, got %s", exp, got)
	}
}

// TestLibraryOpsRollBack: a failed multi-key or reacquiring operation
// leaves nothing of its token behind.
func TestLibraryOpsRollBack(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	a, b := uniqueKey(t), uniqueKey(t)
	// b is held elsewhere on 3 backends, so AcquireAll gets only 2 votes.
	for _, i := range []int{2, 3, 4} {
		c.direct[i].Set(t.Context(), b, "other", time.Minute)
	}
	if exp, got := "refused", outcome(second(c.engine.acquireAll(t.Context(), []string{a, b}, "me", 10*time.Second))); exp != got {
		t.Fatalf("expected %s, got %s", exp, got)
	}
	redistest.Eventually(t, func() string {
		for _, key := range []string{a, b} {
			for i, v := range c.values(t, key) {
				if v == "me" {
					return fmt.Sprintf("backend %d still holds %s for the failed acquisition", i, key)
				}
			}
		}
		return ""
	})
}
