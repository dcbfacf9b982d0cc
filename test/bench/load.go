//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// maxSamples bounds the latency samples one system keeps per round and
// operation; cycles are counted beyond it, latencies are not.
const maxSamples = 1 << 20

// setting is one row of the table for all systems: a worker count, and
// whether the workers share a few keys.
type setting struct {
	contended bool
	workers   int
}

func (s setting) mode() string {
	if s.contended {
		return "contended"
	}
	return "uncontended"
}

// cell accumulates one system's rounds in one setting.
type cell struct {
	cycles, failed, errors int64
	elapsed                time.Duration
	cpu                    cpuTimes // during the rounds, not between them
	acquire, release       []int64  // nanoseconds
	errSamples             []string
	// backend is what the rounds asked of the backends; backendErr the
	// first reading that failed, which makes it unknown.
	backend    backendWork
	backendErr error
	// Each round's own figures, in order, for ratios between two systems
	// taken round by round (each pair ran back to back).
	rounds []roundFigures
}

// roundFigures is what one round of one system measured.
type roundFigures struct {
	CyclesPerSec float64 `json:"cycles_per_sec"`
	AcquireP50   float64 `json:"acquire_p50_us"`
	AcquireP99   float64 `json:"acquire_p99_us"`
	// ProxyCPU is the proxy's CPU per cycle in this round (µs); 0 where
	// it was not measured.
	ProxyCPU float64 `json:"proxy_cpu_us"`
}

// tally is what one worker counted in one round.
type tally struct {
	cycles, failed, errors int64
	acquire, release       []int64
	firstErr               error
}

// measure runs every setting, in rounds, with the systems in turns.
func measure(ctx context.Context, o *options, ss *systems, clock cpuClock, rep *report, out io.Writer) error {
	var settings []setting
	for _, contended := range []bool{false, true} {
		if contended && !o.contended || !contended && !o.uncontended {
			continue
		}
		for _, n := range o.concurrency {
			settings = append(settings, setting{contended, n})
		}
	}
	cells := make(map[setting][]*cell)
	for _, st := range settings {
		for range ss.list {
			cells[st] = append(cells[st], &cell{})
		}
	}

	// Warm-up: open every pool's connections and load the script, so the
	// first measured round is not the one that dials.
	for i, sys := range ss.list {
		runRound(ctx, o, sys, setting{false, o.concurrency[len(o.concurrency)-1]}, 300*time.Millisecond, fmt.Sprintf("warm%d", i))
	}
	stats := newBackendReader(o.backends)
	defer stats.close()
	total := o.rounds * len(settings) * len(ss.list)
	fmt.Fprintf(out, "measuring %d rounds of %s (about %s)\n", total, o.duration, (time.Duration(total) * o.duration).Round(time.Second))
	// Rounds outermost: each setting's rounds spread over the whole run.
	// Odd rounds take the systems in reverse (ABBA), so that drift within
	// a round, and whatever one system leaves the next, hit each alike.
	for r := range o.rounds {
		order := turns(len(ss.list), r)
		for _, st := range settings {
			for _, i := range order {
				sys := ss.list[i]
				if err := ctx.Err(); err != nil {
					return err
				}
				var profiled func() (string, error)
				if at := o.pprofOf(sys.name); r == 0 && at != "" && o.profileDir != "" {
					profiled = pprofClient{at}.profileRound(ctx, o.profileDir, sys.name, st, o.duration)
				}
				c := cells[st][i]
				// Outside the CPU readings: INFO is the bench's work.
				statsBefore, statsErr := stats.read(ctx, sys.proxy)
				before := clock.of(sys.name).read()
				t, elapsed := runRound(ctx, o, sys, st, o.duration, fmt.Sprintf("r%d", r))
				used := clock.of(sys.name).read().sub(before)
				if statsErr == nil {
					var statsAfter backendReading
					if statsAfter, statsErr = stats.read(ctx, sys.proxy); statsErr == nil {
						c.backend.add(statsAfter.sub(statsBefore))
					}
				}
				if statsErr != nil && c.backendErr == nil {
					c.backendErr = statsErr
				}
				if profiled != nil {
					// Before the next turn, which the profile must not cover.
					path, err := profiled()
					if err != nil {
						return err
					}
					rep.Profiles = append(rep.Profiles, path)
				}
				c.elapsed += elapsed
				c.cpu.add(used)
				var cycles int64
				var acquire []int64
				for _, w := range t {
					cycles += w.cycles
					acquire = append(acquire, w.acquire...)
					c.cycles += w.cycles
					c.failed += w.failed
					c.errors += w.errors
					c.acquire = append(c.acquire, w.acquire...)
					c.release = append(c.release, w.release...)
					if w.firstErr != nil && len(c.errSamples) < 3 {
						c.errSamples = append(c.errSamples, w.firstErr.Error())
					}
				}
				lat := percentiles(acquire)
				rf := roundFigures{CyclesPerSec: float64(cycles) / elapsed.Seconds(), AcquireP50: lat.P50, AcquireP99: lat.P99}
				if !used.proxyMissing && cycles > 0 {
					rf.ProxyCPU = used.proxy.Seconds() * 1e6 / float64(cycles)
				}
				c.rounds = append(c.rounds, rf)
			}
		}
		fmt.Fprintf(out, "round %d/%d done, load average %s\n", r+1, o.rounds, loadAvg())
	}
	for _, st := range settings {
		for i, sys := range ss.list {
			rep.Results = append(rep.Results, cells[st][i].result(sys, st, rep.Machine.CPUs))
		}
	}
	return nil
}

// runRound runs st's workers on sys for d and returns what each counted
// and the time from start until the last worker stopped.
func runRound(ctx context.Context, o *options, sys system, st setting, d time.Duration, round string) ([]tally, time.Duration) {
	tallies := make([]tally, st.workers)
	perWorker := maxSamples / st.workers
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range st.workers {
		key := fmt.Sprintf("bench:%s:%s:%s:%d", sys.name, st.mode(), round, w)
		if st.contended {
			key = fmt.Sprintf("bench:%s:contended:%d", sys.name, w%o.contendKeys)
		}
		l := sys.newLocker(key)
		t := &tallies[w]
		wg.Go(func() { work(ctx, l, t, deadline, perWorker, o.retryDelay) })
	}
	wg.Wait()
	return tallies, time.Since(start)
}

// work runs lock cycles until deadline: one acquire attempt, and after a
// success the release. A failed attempt (held elsewhere) waits retryDelay;
// an error waits too so a broken system does not spin.
func work(ctx context.Context, l locker, t *tally, deadline time.Time, keep int, retryDelay time.Duration) {
	t.acquire = make([]int64, 0, min(keep, 4096))
	t.release = make([]int64, 0, min(keep, 4096))
	fail := func(err error) {
		t.errors++
		if t.firstErr == nil {
			t.firstErr = err
		}
		time.Sleep(retryDelay)
	}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		t0 := time.Now()
		ok, err := l.acquire(ctx)
		t1 := time.Now()
		switch {
		case err != nil:
			fail(fmt.Errorf("acquire: %w", err))
			// The lock may be held after all: free it, untimed, so the
			// contended keys do not stay blocked for the TTL.
			l.release(context.WithoutCancel(ctx))
			continue
		case !ok:
			t.failed++
			time.Sleep(retryDelay)
			continue
		}
		err = l.release(ctx)
		t2 := time.Now()
		if err != nil {
			fail(fmt.Errorf("release: %w", err))
			continue
		}
		t.cycles++
		if len(t.acquire) < keep {
			t.acquire = append(t.acquire, int64(t1.Sub(t0)))
			t.release = append(t.release, int64(t2.Sub(t1)))
		}
	}
}

// turns is the order of n systems in round r: as listed in even rounds,
// reversed in odd ones (ABBA).
func turns(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if r%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}
