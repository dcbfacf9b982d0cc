package quorum

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestTopUpEffect measures what top-ups change for users, with and without
// them in the same run (withoutTopUpCopies: the same engines, whose top-ups
// start and count but send no copy). Read the figures with -v:
//
//	go test -race -count=1 ./quorum -run TestTopUpEffect -v
//
// "handoffs": a lock is released while two proxies' waiters (Releases, as
// Redisson's and Spring's waiters hear an unlock) race for it, one per
// proxy, as the two-proxy deployments of docs/deploying.md do on every handoff; the
// winner holds it, and 200 ms later (past the top-up's last round, as a
// lock held for a while is) one backend of five is lost (paused: silent),
// each in turn, and the winner releases. Counted per setting: grants on a
// bare quorum (a backend refused them), releases that end NOQUORUM (the
// client is told it could not release; the lock lingers until its TTL),
// and the loser's waiters not woken by the release, who sleep out the
// lock's whole lease.
//
// "rolling restart": a lock renewed all along while the five backends are
// restarted empty one at a time, as docs/backends.md tells operators to: where
// its renewal first fails, the holder loses a lock nobody else took.
//
// Each figure is asserted against the state it follows from (a release is
// undecided exactly when the lost backend was one of a bare quorum that
// held the lock), so that the instrument, not only the figure, is tested.
func TestTopUpEffect(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("handoffs on %d", n), func(t *testing.T) { testTopUpHandoffs(t, n) })
	}
	t.Run("rolling restart", testTopUpRollingRestart)
}

var topUpRounds = flag.Int("topup.rounds", 6, "handoffs per setting and deployment in TestTopUpEffect")

// handoffs are one setting's figures in the handoffs measurement.
type handoffs struct {
	name    string
	holder  *Engine
	racers  [2]*Engine
	rounds  int
	grants  int
	splits  int // grants that some backend refused (a top-up started)
	atLoss  map[int]int
	noQuo   int // releases that ended NOQUORUM
	asleep  int // waiters not woken by the release
	splitNQ int // of noQuo, after a split grant
}

// handoff is one round's race, decided.
type handoff struct {
	key, token string
	winner     *Engine
	loser      *Engine
	split      bool
}

func testTopUpHandoffs(t *testing.T, backends int) {
	c := newCluster(t, backends, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true, NodeTimeout: 250 * time.Millisecond})
	settings := []*handoffs{{name: "with top-ups"}, {name: "without"}}
	for k, s := range settings {
		s.atLoss = map[int]int{}
		s.holder = newEngine(t, c.cfg)
		for j := range s.racers {
			s.racers[j] = newEngine(t, c.cfg)
		}
		if k == 1 {
			for _, e := range append([]*Engine{s.holder}, s.racers[:]...) {
				withoutTopUpCopies(e)
			}
		}
	}
	for r := range *topUpRounds {
		// Both settings race at once, on keys of their own.
		races := make([]*handoff, len(settings))
		var wg sync.WaitGroup
		errs := make([]error, len(settings))
		for k, s := range settings {
			wg.Go(func() { races[k], errs[k] = s.race(t, c) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		lost := r % len(c.servers)
		held := make([][]string, len(settings))
		for k, h := range races {
			if h != nil {
				held[k] = c.values(t, h.key)
			}
		}
		// The loser's engine keeps a waiter for the winner's release.
		heard := make([]chan struct{}, len(settings))
		var stops []func()
		for k, h := range races {
			if h == nil {
				continue
			}
			heard[k] = make(chan struct{})
			var once sync.Once
			stop := h.loser.Releases(h.key, func(_, token string) {
				if token == h.token {
					once.Do(func() { close(heard[k]) })
				}
			})
			stops = append(stops, stop)
		}
		c.servers[lost].Pause()
		released := make([]error, len(settings))
		for k, h := range races {
			if h != nil {
				wg.Go(func() {
					_, released[k] = h.winner.Unlock(t.Context(), Unlock{Op: OpRelease, Keys: []string{h.key}, Token: h.token})
				})
			}
		}
		wg.Wait()
		for k, h := range races {
			if h == nil {
				continue
			}
			s := settings[k]
			holders := 0
			for _, v := range held[k] {
				if v == h.token {
					holders++
				}
			}
			s.atLoss[holders]++
			undecided := errors.Is(released[k], ErrNoQuorum)
			if released[k] != nil && !undecided {
				t.Fatalf("round %d, %s: release: %v", r, s.name, released[k])
			}
			if exp := held[k][lost] == h.token && holders == c.engine.quorum; exp != undecided {
				t.Errorf("round %d, %s: backends held %q, backend %d lost: release %v, want undecided %v", r, s.name, held[k], lost, released[k], exp)
			}
			woken := false
			select {
			case <-heard[k]:
				woken = true
			case <-time.After(2 * time.Second):
			}
			if woken == undecided {
				t.Errorf("round %d, %s: release %v, waiter woken %v", r, s.name, released[k], woken)
			}
			if undecided {
				s.noQuo++
				if h.split {
					s.splitNQ++
				}
			}
			if !woken {
				s.asleep++
			}
		}
		for _, stop := range stops {
			stop()
		}
		c.servers[lost].Resume()
		for _, s := range settings {
			for _, e := range append([]*Engine{s.holder}, s.racers[:]...) {
				c.connectedOf(t, e, lost)
			}
		}
	}
	for _, s := range settings {
		var shape string
		for n := backends; n >= c.engine.quorum; n-- {
			shape += fmt.Sprintf(" %d: %d", n, s.atLoss[n])
		}
		t.Logf("%-13s %d handoffs, %d granted, %d split (refused by some backend); backends holding at the loss:%s; one backend lost: %d releases NOQUORUM (%d after a split grant), %d waiters slept out the lease",
			s.name, s.rounds, s.grants, s.splits, shape, s.noQuo, s.splitNQ, s.asleep)
	}
}

// race takes a fresh key with s's holder, releases it while both racers
// wait for it, and returns the winner's lock once the loser rolled back
// and 200 ms passed since the grant; nil when neither won.
func (s *handoffs) race(t *testing.T, c *cluster) (*handoff, error) {
	ctx := t.Context()
	key := uniqueKey(t)
	if _, err := s.holder.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "holder", TTL: 10 * time.Second}); err != nil {
		return nil, fmt.Errorf("the first holder: %w", err)
	}
	var started uint64
	for _, e := range s.racers {
		started += e.TopUps().Started
	}
	type outcome struct {
		at  time.Time
		err error
	}
	outcomes := [2]chan outcome{make(chan outcome, 1), make(chan outcome, 1)}
	tokens := [2]string{"racer-0", "racer-1"}
	for j, e := range s.racers {
		var once sync.Once
		stop := e.Releases(key, func(_, token string) {
			if token != "holder" {
				return
			}
			once.Do(func() {
				go func() {
					_, err := e.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: tokens[j], TTL: 10 * time.Second})
					outcomes[j] <- outcome{time.Now(), err}
				}()
			})
		})
		defer stop()
	}
	if _, err := s.holder.Unlock(ctx, Unlock{Op: OpRelease, Keys: []string{key}, Token: "holder"}); err != nil {
		return nil, fmt.Errorf("the first holder's release: %w", err)
	}
	s.rounds++
	var got [2]outcome
	for j := range got {
		select {
		case got[j] = <-outcomes[j]:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("racer %d was not woken", j)
		}
	}
	w := -1
	for j, o := range got {
		switch {
		case o.err == nil:
			w = j
		case !errors.Is(o.err, ErrNotAcquired):
			return nil, fmt.Errorf("racer %d: %w", j, o.err)
		}
	}
	if w < 0 {
		return nil, nil // a split that both lost: nobody holds it
	}
	s.grants++
	h := &handoff{key: key, token: tokens[w], winner: s.racers[w], loser: s.racers[1-w]}
	loserToken := tokens[1-w]
	deadline := time.Now().Add(10 * time.Second)
	for {
		settled := time.Since(got[w].at) >= 200*time.Millisecond && h.winner.TopUps().Running == 0
		for _, d := range c.direct {
			settled = settled && d.Get(ctx, key).Val() != loserToken
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the race did not settle within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var after uint64
	for _, e := range s.racers {
		after += e.TopUps().Started
	}
	h.split = after > started
	if h.split {
		s.splits++
	}
	return h, nil
}

// testTopUpRollingRestart renews one lock per setting while every backend
// restarts empty in turn, and reports after which restart, if any, its
// renewal failed.
func testTopUpRollingRestart(t *testing.T) {
	const ttl = 10 * time.Second
	c := newCluster(t, 5, Config{MaxTTL: time.Minute, DisableRestartQuarantine: true})
	without := newEngine(t, c.cfg)
	withoutTopUpCopies(without)
	engines := []*Engine{c.engine, without}
	names := []string{"with top-ups", "without"}
	keys := make([]string, len(engines))
	lostAt := make([]int, len(engines)) // the restart after which the renewal failed, 1-based; 0: never
	for k, e := range engines {
		keys[k] = uniqueKey(t)
		if _, err := e.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{keys[k]}, Token: "me", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range c.servers {
		s.Restart()
		for k, e := range engines {
			c.connectedOf(t, e, i)
			// An emptied backend counts again once the set is recorded on
			// it again (members.go): a renewal before then is undecided
			// there, where the test asks what the backends' keys decide.
			waitFor(t, func() bool { return e.Backends()[i].State == StateUp })
			if lostAt[k] > 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			_, err := e.Lock(ctx, Lock{Op: OpExtend, Keys: []string{keys[k]}, Token: "me", TTL: ttl})
			cancel()
			if err != nil {
				lostAt[k] = i + 1
				if !errors.Is(err, ErrNotHeld) {
					t.Errorf("%s: renewal after restart %d: %v, want ErrNotHeld", names[k], i+1, err)
				}
			}
			waitFor(t, func() bool { return e.TopUps().Running == 0 })
		}
	}
	for k, name := range names {
		if lostAt[k] == 0 {
			t.Logf("%-13s the lock renewed through all %d restarts", name, len(c.servers))
		} else {
			t.Logf("%-13s the lock lost at restart %d of %d: its renewal refused", name, lostAt[k], len(c.servers))
		}
	}
	// A lock on every backend survives N-Q restarts without copies: the
	// next one leaves it on fewer than a quorum.
	if exp := len(c.servers) - c.engine.quorum + 1; lostAt[1] != exp {
		t.Errorf("without top-ups the lock was lost at restart %d, want %d", lostAt[1], exp)
	}
	if lostAt[0] != 0 {
		t.Errorf("with top-ups the lock was lost at restart %d", lostAt[0])
	}
}
