//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// soak is the proxy alone under steady uncontended load for a long time,
// sampled at intervals, to show whether its memory or goroutines grow.
type soak struct {
	Duration       string       `json:"duration"`
	Workers        int          `json:"workers"`
	Interval       string       `json:"sample_interval"`
	Cycles         int64        `json:"cycles"`
	FailedAttempts int64        `json:"failed_attempts"`
	Errors         int64        `json:"errors"`
	ErrorSamples   []string     `json:"error_samples,omitempty"`
	SampleError    string       `json:"first_sample_error,omitempty"`
	Samples        []soakSample `json:"samples"`
	Verdict        soakVerdict  `json:"verdict"`
}

// soakSample is the proxy at one moment and the load of the interval
// that ended there; a figure of 0 was not known.
type soakSample struct {
	Seconds      float64 `json:"seconds"`
	RSS          int64   `json:"proxy_rss_bytes"`
	HeapInuse    int64   `json:"proxy_heap_inuse_bytes"`
	Goroutines   int     `json:"proxy_goroutines"`
	Cycles       int64   `json:"cycles"`
	Errors       int64   `json:"errors"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
}

// soakVerdict compares the first sample after warm-up (the first 10% of
// the run) with the last; throughput compares the first and last interval.
type soakVerdict struct {
	FromSeconds       float64 `json:"from_seconds"`
	ToSeconds         float64 `json:"to_seconds"`
	RSSFrom           int64   `json:"proxy_rss_from_bytes"`
	RSSTo             int64   `json:"proxy_rss_to_bytes"`
	RSSGrowthMiB      float64 `json:"proxy_rss_growth_mib"`
	RSSGrowthPct      float64 `json:"proxy_rss_growth_pct"`
	HeapFrom          int64   `json:"proxy_heap_inuse_from_bytes"`
	HeapTo            int64   `json:"proxy_heap_inuse_to_bytes"`
	GoroutinesFrom    int     `json:"proxy_goroutines_from"`
	GoroutinesTo      int     `json:"proxy_goroutines_to"`
	GoroutinesGrowth  float64 `json:"proxy_goroutines_growth_pct"`
	CyclesPerSecFirst float64 `json:"cycles_per_sec_first_interval"`
	CyclesPerSecLast  float64 `json:"cycles_per_sec_last_interval"`
}

// soakCount is what all soak workers did so far, readable while they run.
type soakCount struct{ cycles, errors atomic.Int64 }

// countedLocker counts what work counts, as it happens, so the sampler can
// read each interval's cycles without stopping the workers: a cycle is a
// release without error after an acquire that got the lock, an error is
// one of either. work's untimed release after a failed acquire is neither.
type countedLocker struct {
	locker
	n    *soakCount
	held bool
}

func (c *countedLocker) acquire(ctx context.Context) (bool, error) {
	ok, err := c.locker.acquire(ctx)
	c.held = ok && err == nil
	if err != nil {
		c.n.errors.Add(1)
	}
	return ok, err
}

func (c *countedLocker) release(ctx context.Context) error {
	err := c.locker.release(ctx)
	if c.held {
		if err != nil {
			c.n.errors.Add(1)
		} else {
			c.n.cycles.Add(1)
		}
	}
	c.held = false
	return err
}

// soakProbe reads the proxy: rss is nil when the bench did not start it,
// pp when its pprof address is unknown.
type soakProbe struct {
	rss func() int64
	pp  *pprofClient
}

// runSoak runs sys with o.soakWorkers uncontended workers for o.soak and
// samples every twentieth of it, at least a second apart.
func runSoak(ctx context.Context, o *options, sys system, probe soakProbe, out io.Writer) (*soak, error) {
	interval := max(o.soak/20, time.Second)
	s := &soak{Duration: o.soak.String(), Workers: o.soakWorkers, Interval: interval.String()}
	fmt.Fprintf(out, "soak: %s alone, %d workers, uncontended, for %s, sampled every %s\n", sys.name, o.soakWorkers, o.soak, interval)

	var n soakCount
	tallies := make([]tally, o.soakWorkers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(o.soak)
	s.Samples = append(s.Samples, s.probe(ctx, probe, 0))
	for w := range o.soakWorkers {
		l := &countedLocker{locker: sys.newLocker(fmt.Sprintf("bench:%s:soak:%d", sys.name, w)), n: &n}
		t := &tallies[w]
		// keep 0: latencies of the first minutes only would say nothing
		// about the last, and a long run would hold them all.
		wg.Go(func() { work(ctx, l, t, end, 0, o.retryDelay) })
	}
	err := s.sample(ctx, probe, &n, start, end, interval, wg.Wait, out)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	s.add(tallies)
	s.verdict(o.soak)
	return s, nil
}

// sample takes a sample every interval while the workers run, and the last
// one once they have stopped (wait), so the last interval has all cycles.
func (s *soak) sample(ctx context.Context, probe soakProbe, n *soakCount, start, end time.Time, interval time.Duration, wait func(), out io.Writer) error {
	last, lastCycles, lastErrors := start, int64(0), int64(0)
	for i := 1; ; i++ {
		next := start.Add(time.Duration(i) * interval)
		final := !next.Before(end)
		if final {
			wait()
		} else {
			sleepUntil(ctx, next)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		cycles, errs := n.cycles.Load(), n.errors.Load()
		smp := s.probe(ctx, probe, now.Sub(start))
		smp.Cycles, smp.Errors = cycles-lastCycles, errs-lastErrors
		smp.CyclesPerSec = float64(smp.Cycles) / now.Sub(last).Seconds()
		s.Samples = append(s.Samples, smp)
		fmt.Fprintf(out, "soak %s/%s: %.0f cycles/s, %d errors, proxy RSS %s\n",
			at(smp.Seconds), end.Sub(start), smp.CyclesPerSec, smp.Errors, orDash(smp.RSS, mib))
		if final {
			return nil
		}
		last, lastCycles, lastErrors = now, cycles, errs
	}
}

// add totals the workers' own counts, which also hold their first errors.
func (s *soak) add(tallies []tally) {
	for _, t := range tallies {
		s.Cycles += t.cycles
		s.FailedAttempts += t.failed
		s.Errors += t.errors
		if t.firstErr != nil && len(s.ErrorSamples) < 3 {
			s.ErrorSamples = append(s.ErrorSamples, t.firstErr.Error())
		}
	}
}

// probe takes the proxy's figures at elapsed into the soak. A failed read
// leaves its figure unknown rather than ending a long run; the first such
// error is kept for the report.
func (s *soak) probe(ctx context.Context, p soakProbe, elapsed time.Duration) soakSample {
	smp := soakSample{Seconds: elapsed.Seconds()}
	if p.rss != nil {
		smp.RSS = p.rss()
	}
	if p.pp == nil {
		return smp
	}
	var err error
	if smp.Goroutines, err = p.pp.goroutines(ctx); err != nil && s.SampleError == "" {
		s.SampleError = err.Error()
	}
	if smp.HeapInuse, err = p.pp.heapInuse(ctx); err != nil && s.SampleError == "" {
		s.SampleError = err.Error()
	}
	return smp
}

// verdict compares the first sample past warm-up with the last. Sample 0
// is before the load and never the baseline.
func (s *soak) verdict(d time.Duration) {
	smp := s.Samples[1:]
	from := smp[len(smp)-1]
	for _, x := range smp {
		if x.Seconds >= (d / 10).Seconds() {
			from = x
			break
		}
	}
	to := smp[len(smp)-1]
	s.Verdict = soakVerdict{
		FromSeconds: from.Seconds, ToSeconds: to.Seconds,
		RSSFrom: from.RSS, RSSTo: to.RSS,
		RSSGrowthMiB: float64(to.RSS-from.RSS) / (1 << 20),
		RSSGrowthPct: 100 * div(float64(to.RSS-from.RSS), float64(from.RSS)),
		HeapFrom:     from.HeapInuse, HeapTo: to.HeapInuse,
		GoroutinesFrom: from.Goroutines, GoroutinesTo: to.Goroutines,
		GoroutinesGrowth:  100 * div(float64(to.Goroutines-from.Goroutines), float64(from.Goroutines)),
		CyclesPerSecFirst: smp[0].CyclesPerSec, CyclesPerSecLast: to.CyclesPerSec,
	}
}

func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

func (s *soak) print(out io.Writer) {
	fmt.Fprintf(out, "\nSoak: proxy alone, %d workers, uncontended, %s (sampled every %s)\n", s.Workers, s.Duration, s.Interval)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "at\tRSS\theap in use\tgoroutines\tcycles/s\terrors\t")
	for i, x := range s.Samples {
		rate, errs := "-", "-"
		if i > 0 {
			rate, errs = fmt.Sprintf("%.0f", x.CyclesPerSec), fmt.Sprint(x.Errors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", at(x.Seconds),
			orDash(x.RSS, mib), orDash(x.HeapInuse, mib), orDash(int64(x.Goroutines), func(v int64) string { return fmt.Sprint(v) }), rate, errs)
	}
	tw.Flush()
	fmt.Fprintf(out, "  %d cycles, %d failed attempts, %d errors in total\n", s.Cycles, s.FailedAttempts, s.Errors)
	for _, e := range s.ErrorSamples {
		fmt.Fprintf(out, "  error: %s\n", e)
	}
	if s.SampleError != "" {
		fmt.Fprintf(out, "  reading the proxy's profiles failed at least once: %s\n", s.SampleError)
	}
	fmt.Fprintln(out, "  "+s.Verdict.String())
}

func (v soakVerdict) String() string {
	rss := "RSS unknown (the bench did not start the proxy)"
	if v.RSSFrom > 0 {
		rss = fmt.Sprintf("RSS %s -> %s (%+.1f MiB, %+.1f%%)", mib(v.RSSFrom), mib(v.RSSTo), v.RSSGrowthMiB, v.RSSGrowthPct)
	}
	gor := "goroutines and heap unknown (no pprof address)"
	if v.GoroutinesFrom > 0 {
		gor = fmt.Sprintf("goroutines %d -> %d (%+d, %+.1f%%), heap in use %s -> %s",
			v.GoroutinesFrom, v.GoroutinesTo, v.GoroutinesTo-v.GoroutinesFrom, v.GoroutinesGrowth, mib(v.HeapFrom), mib(v.HeapTo))
	}
	return fmt.Sprintf("soak verdict, %s (after warm-up) vs %s: %s; %s; cycles/s first interval %.0f, last %.0f (%+.1f%%)",
		at(v.FromSeconds), at(v.ToSeconds), rss, gor, v.CyclesPerSecFirst, v.CyclesPerSecLast,
		100*div(v.CyclesPerSecLast-v.CyclesPerSecFirst, v.CyclesPerSecFirst))
}

// at is a moment of the soak as printed: tenths, since intervals under 20s
// are not whole seconds.
func at(secs float64) time.Duration {
	return time.Duration(secs * float64(time.Second)).Round(100 * time.Millisecond)
}

func orDash(v int64, f func(int64) string) string {
	if v == 0 {
		return "-"
	}
	return f(v)
}
