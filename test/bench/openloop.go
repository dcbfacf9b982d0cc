//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// The open-loop bench (-open-loop): lock cycles offered at fixed rates, on
// a schedule, each on a key of its own, whatever the system's latency. A
// closed loop (the table) waits for each reply before the next request,
// so a slow reply delays the requests behind it and hides their wait
// (coordinated omission); here each acquisition's latency is counted from
// the instant it was due, so a system that falls behind shows it in its
// tail. Each rate's rounds take the systems in turns (ABBA), as the
// table's do.

// openLoopInFlight bounds the cycles under way at once: past it a system
// is far behind its schedule, and the cycles due are counted as missed
// rather than piled up without end. Each system's pool may hold as many
// connections, redsync's five times (one pool per backend), and they
// stay open across rounds: 2048 keeps the bench within a limit of 20,000
// descriptors with -baseline-bin's proxy measured too.
const openLoopInFlight = 2048

// openLoopResult is one system's figures at one offered rate, over its
// rounds.
type openLoopResult struct {
	System string `json:"system"`
	Rate   int    `json:"offered_per_sec"`
	Done   int64  `json:"cycles"`
	Missed int64  `json:"missed"` // due while openLoopInFlight were under way
	Errors int64  `json:"errors"`
	Held   int64  `json:"held_elsewhere"`
	// FirstError is the first error's text, if there was one.
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	// Acquire is from each cycle's due time to the acquisition's reply.
	Acquire latency      `json:"acquire_from_schedule_us"`
	CPU     *cpuPerCycle `json:"cpu_per_cycle_us"`
}

// openLoopReport is what the open-loop bench measured.
type openLoopReport struct {
	Started time.Time        `json:"started"`
	Machine machine          `json:"machine"`
	Rates   []int            `json:"rates"`
	Results []openLoopResult `json:"results"`
	// TargetMet says whether the proxy's p99 at 5,000/s was at most
	// redsync's (issue 20); nil when either was not measured.
	TargetMet *bool `json:"target_p99_at_5k_met,omitempty"`
}

// runOpenLoop offers lock cycles at each of o.openLoop's rates to every
// system, o.rounds rounds of o.duration each, and prints the table.
func runOpenLoop(ctx context.Context, o *options, ss *systems, clock cpuClock, out io.Writer) (*openLoopReport, error) {
	rep := &openLoopReport{Started: time.Now().UTC(), Machine: machineInfo(), Rates: o.openLoop}
	fmt.Fprintf(out, "lockproxy bench, open loop: %v cycles/s offered, %s × %d rounds per system; acquire latency from each cycle's due time; %s\n",
		o.openLoop, o.duration, o.rounds, rep.Machine)
	// Warm-up, as the table's: pools dialled, scripts loaded.
	for _, sys := range ss.list {
		offer(ctx, sys, 1000, 300*time.Millisecond, "warm")
	}
	type acc struct {
		done, missed, errors, held int64
		firstErr                   string
		elapsed                    time.Duration
		cpu                        cpuTimes
		acquire                    []int64
	}
	accs := make([][]acc, len(o.openLoop))
	for i := range accs {
		accs[i] = make([]acc, len(ss.list))
	}
	for r := range o.rounds {
		order := turns(len(ss.list), r)
		for ri, rate := range o.openLoop {
			for _, i := range order {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				sys := ss.list[i]
				before := clock.of(sys.name).read()
				f := offer(ctx, sys, rate, o.duration, fmt.Sprintf("r%d", r))
				a := &accs[ri][i]
				a.cpu.add(clock.of(sys.name).read().sub(before))
				a.done += f.done
				a.missed += f.missed
				a.errors += f.errors
				a.held += f.held
				if a.firstErr == "" {
					a.firstErr = f.firstErr
				}
				a.elapsed += f.elapsed
				a.acquire = append(a.acquire, f.acquire...)
			}
		}
	}
	cpus := rep.Machine.CPUs
	for ri, rate := range o.openLoop {
		for i, sys := range ss.list {
			a := accs[ri][i]
			cpu, _ := cpuFigures(a.cpu, a.done, a.elapsed, cpus)
			rep.Results = append(rep.Results, openLoopResult{
				System: sys.name, Rate: rate, Done: a.done, Missed: a.missed, Errors: a.errors, Held: a.held, FirstError: a.firstErr,
				Seconds: a.elapsed.Seconds(), Acquire: percentiles(a.acquire), CPU: cpu,
			})
		}
	}
	rep.check()
	rep.print(out)
	return rep, nil
}

// offered is what one round at one rate did.
type offered struct {
	done, missed, errors, held int64
	firstErr                   string
	elapsed                    time.Duration
	acquire                    []int64 // ns from due time to the acquisition's reply
}

// offer starts a lock cycle every 1/rate for d, each at its due time on a
// key of its own (an uncontended acquisition, then the release), and
// waits for them all. A cycle due while openLoopInFlight are under way is
// missed.
func offer(ctx context.Context, sys system, rate int, d time.Duration, round string) offered {
	var (
		mu  sync.Mutex
		f   offered
		wg  sync.WaitGroup
		sem = make(chan struct{}, openLoopInFlight)
	)
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	f.acquire = make([]int64, 0, min(n, maxSamples))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sleepUntil := preciseSleeper()
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		// Sleep to the due time of the next cycle; cycles that came due
		// during a late wake-up start at once, and their lateness counts
		// in their latency.
		sleepUntil(due)
		if ctx.Err() != nil {
			break
		}
		select {
		case sem <- struct{}{}:
		default:
			mu.Lock()
			f.missed++
			mu.Unlock()
			continue
		}
		key := fmt.Sprintf("bench:open:%s:%d:%s:%d", sys.name, rate, round, i)
		wg.Go(func() {
			defer func() { <-sem }()
			l := sys.newLocker(key)
			ok, err := l.acquire(ctx)
			took := time.Since(due)
			if err == nil && ok {
				err = l.release(ctx)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				f.errors++
				if f.firstErr == "" {
					f.firstErr = err.Error()
				}
			case !ok:
				f.held++
			default:
				f.done++
				if len(f.acquire) < maxSamples {
					f.acquire = append(f.acquire, int64(took))
				}
			}
		})
	}
	wg.Wait()
	f.elapsed = time.Since(start)
	return f
}

func (r *openLoopReport) find(system string, rate int) *openLoopResult {
	for i := range r.Results {
		if r.Results[i].System == system && r.Results[i].Rate == rate {
			return &r.Results[i]
		}
	}
	return nil
}

// check sets TargetMet: issue 20's open-loop target, the proxy's p99 at
// 5,000 cycles/s at most redsync's.
func (r *openLoopReport) check() {
	p, rs := r.find("proxy", 5000), r.find("redsync", 5000)
	if p == nil || rs == nil || p.Done == 0 || rs.Done == 0 {
		return
	}
	met := p.Acquire.P99 <= rs.Acquire.P99
	r.TargetMet = &met
}

func (r *openLoopReport) print(out io.Writer) {
	fmt.Fprintf(out, "\n%-12s %8s %9s %7s %7s %9s %9s %9s %13s %16s\n",
		"system", "offered", "done/s", "missed", "failed", "p50 µs", "p99 µs", "p99.9 µs", "proxy µs/cyc", "backends µs/cyc")
	for _, x := range r.Results {
		var proxy, backends *float64
		if x.CPU != nil {
			proxy, backends = x.CPU.Proxy, x.CPU.Backends
		}
		fmt.Fprintf(out, "%-12s %8d %9.0f %7d %7d %9.0f %9.0f %9.0f %13s %16s\n",
			x.System, x.Rate, float64(x.Done)/x.Seconds, x.Missed, x.Errors+x.Held,
			x.Acquire.P50, x.Acquire.P99, x.Acquire.P999, microseconds(proxy), microseconds(backends))
	}
	for _, x := range r.Results {
		if x.FirstError != "" {
			fmt.Fprintf(out, "  first error of %s at %d/s: %s\n", x.System, x.Rate, x.FirstError)
		}
	}
	switch {
	case r.TargetMet == nil:
		fmt.Fprintln(out, "\ntarget (issue 20): proxy p99 <= redsync p99 at 5000/s: not measured (needs -open-loop with 5000 and both systems)")
	case *r.TargetMet:
		fmt.Fprintln(out, "\ntarget (issue 20): proxy p99 <= redsync p99 at 5000/s: met")
	default:
		fmt.Fprintln(out, "\ntarget (issue 20): proxy p99 <= redsync p99 at 5000/s: MISSED")
	}
}

// microseconds prints a CPU figure, "-" when it was not measured (the
// direct system has no proxy; a proxy the bench did not start).
func microseconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

// preciseSleeper returns a sleep to a due time that wakes within some tens
// of microseconds of it, for the calling goroutine, which must be locked
// to its thread. A Go timer wakes up to a millisecond late when the
// process has nothing else to wake it (the runtime's poller sleeps in
// whole milliseconds): half a millisecond at the median on these
// machines, which would be counted in every system's latency and hide
// their differences. A nanosleep on a thread whose timer slack is 1 ns
// (the default 50 µs lets the kernel batch wake-ups) is not rounded so.
func preciseSleeper() func(due time.Time) {
	const prSetTimerSlack = 29
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	return func(due time.Time) {
		for {
			wait := time.Until(due)
			if wait <= 0 {
				return
			}
			ts := syscall.NsecToTimespec(int64(wait))
			syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps the rest
		}
	}
}
