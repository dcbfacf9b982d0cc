//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is every figure of one run; -json writes it as is.
type report struct {
	Started     time.Time `json:"started"`
	Machine     machine   `json:"machine"`
	NoFileLimit uint64    `json:"nofile_limit"`
	Params      params    `json:"params"`
	Results     []result  `json:"results"`
	Ratios      []ratio   `json:"ratios"`
	Fencing     []fencing `json:"fencing,omitempty"`
	// Baseline is proxy over the proxy of -baseline-bin, in the same
	// terms as Fencing.
	Baseline []fencing `json:"baseline,omitempty"`
	// CostTable is -cost-table's: the full build, its variants and the
	// baseline, per lock cycle.
	CostTable []costRow `json:"cost_table,omitempty"`
	// FencingTokens and FencingWriteBacks are the fenced proxy's counts
	// over the whole run, from its INFO; -1 where it did not say.
	FencingTokens     int64    `json:"fencing_tokens,omitempty"`
	FencingWriteBacks int64    `json:"fencing_write_backs,omitempty"`
	Targets           []target `json:"targets"`
	Floor             *floor   `json:"floor,omitempty"`
	Memory            memory   `json:"memory"`
	Soak              *soak    `json:"soak,omitempty"`
	Profiles          []string `json:"cpu_profiles,omitempty"`
}

type machine struct {
	CPUs       int    `json:"cpus"`
	OS         string `json:"os"`
	Go         string `json:"go"`
	Redis      string `json:"redis"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

func (m machine) String() string {
	return fmt.Sprintf("%d CPUs, %s, %s, load average %s", m.CPUs, m.OS, m.Go, m.LoadBefore)
}

type params struct {
	Duration      string   `json:"duration_per_round"`
	Rounds        int      `json:"rounds"`
	Concurrency   []int    `json:"concurrency"`
	TTL           string   `json:"ttl"`
	RetryDelay    string   `json:"contended_retry_delay"`
	ContendedKeys int      `json:"contended_keys"`
	Backends      []string `json:"backends"`
	Proxy         string   `json:"proxy"`
	ProxyArgs     []string `json:"proxy_args,omitempty"`
	FencedProxy   string   `json:"fenced_proxy,omitempty"`
	ProfileDir    string   `json:"profile_dir,omitempty"`
	PprofAddr     string   `json:"pprof_addr,omitempty"`
	CostTable     bool     `json:"cost_table,omitempty"`
}

// latency percentiles in microseconds, exact over the kept samples.
type latency struct {
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Mean float64 `json:"mean_us"`
	N    int     `json:"samples"`
}

type result struct {
	System         string   `json:"system"`
	Mode           string   `json:"mode"`
	Workers        int      `json:"workers"`
	Cycles         int64    `json:"cycles"`
	FailedAttempts int64    `json:"failed_attempts"`
	Errors         int64    `json:"errors"`
	Seconds        float64  `json:"seconds"`
	CyclesPerSec   float64  `json:"cycles_per_sec"`
	FailedPerSec   float64  `json:"failed_attempts_per_sec"`
	Acquire        latency  `json:"acquire"`
	Release        latency  `json:"release"`
	ErrorSamples   []string `json:"error_samples,omitempty"`
	// CPU is what the bench's workers, the proxy and the backends used
	// during the rounds, over the cycles done; MachineBusy is their sum
	// over the rounds' time on all cores. Null parts were not measured:
	// processes the bench did not start.
	CPU         *cpuPerCycle `json:"cpu_us_per_cycle"`
	MachineBusy *float64     `json:"machine_busy"`
	// Backend is what a cycle asked of the backends, over the rounds;
	// null when a reading failed (BackendError says why).
	Backend      *backendPerCycle `json:"backend_per_cycle"`
	BackendError string           `json:"backend_error,omitempty"`
	// Rounds are each round's figures, in the order they ran.
	Rounds []roundFigures `json:"rounds"`
}

type ratio struct {
	Mode           string  `json:"mode"`
	Workers        int     `json:"workers"`
	ProxyToRedsync float64 `json:"proxy_to_redsync_cycles"`
	ProxyToDirect  float64 `json:"proxy_to_direct_cycles"`
	AcquireP50     float64 `json:"proxy_to_redsync_acquire_p50"`
}

// fencing is proxy-fenced over proxy in one setting: what fencing costs,
// from rounds taken in turns in the same run.
type fencing struct {
	Mode       string  `json:"mode"`
	Workers    int     `json:"workers"`
	Cycles     float64 `json:"fenced_to_plain_cycles"`
	AcquireP50 float64 `json:"fenced_to_plain_acquire_p50"`
	AcquireP99 float64 `json:"fenced_to_plain_acquire_p99"`
	// The same two ratios taken round by round, fenced over the plain
	// round next to it: their median, and the least and most favourable.
	// A round that the host's other tenants slowed (these machines have
	// CPU steal) moves one pair, not the median; the pooled ratios above
	// take its whole weight.
	CyclesByRound     spread `json:"fenced_to_plain_cycles_by_round"`
	AcquireP50ByRound spread `json:"fenced_to_plain_acquire_p50_by_round"`
	AcquireP99ByRound spread `json:"fenced_to_plain_acquire_p99_by_round"`
	// The proxy's CPU per cycle, fenced over plain, pooled and by round;
	// 0 where not measured.
	ProxyCPURatio   float64 `json:"fenced_to_plain_proxy_cpu"`
	ProxyCPUByRound spread  `json:"fenced_to_plain_proxy_cpu_by_round"`
	// CPU per cycle, fenced minus plain (µs); null where not measured.
	ProxyCPU    *float64 `json:"fenced_minus_plain_proxy_cpu_us"`
	BackendsCPU *float64 `json:"fenced_minus_plain_backends_cpu_us"`
}

type target struct {
	Name  string  `json:"name"`
	Want  string  `json:"want"`
	Got   float64 `json:"got"`
	Met   bool    `json:"met"`
	Known bool    `json:"known"`
}

type memory struct {
	RSSStart       int64   `json:"proxy_rss_start_bytes"`
	RSSAfterLoad   int64   `json:"proxy_rss_after_load_bytes"`
	IdleConns      int     `json:"idle_conns"`
	RSSBeforeIdle  int64   `json:"proxy_rss_before_idle_bytes"`
	RSSWithIdle    int64   `json:"proxy_rss_with_idle_bytes"`
	RSSAfterClose  int64   `json:"proxy_rss_after_close_bytes"`
	BytesPerIdle   float64 `json:"bytes_per_idle_conn"`
	IdleOpenSecond float64 `json:"idle_open_seconds"`
}

func (c *cell) result(sys system, st setting, cpus int) result {
	secs := c.elapsed.Seconds()
	cpu, busy := cpuFigures(c.cpu, c.cycles, c.elapsed, cpus)
	var backend *backendPerCycle
	var backendErr string
	if c.backendErr != nil {
		backendErr = c.backendErr.Error()
	} else {
		backend = c.backend.perCycle(c.cycles, sys.backends)
	}
	return result{
		System: sys.name, Mode: st.mode(), Workers: st.workers,
		Backend: backend, BackendError: backendErr,
		Cycles: c.cycles, FailedAttempts: c.failed, Errors: c.errors, Seconds: secs,
		CyclesPerSec: float64(c.cycles) / secs, FailedPerSec: float64(c.failed) / secs,
		Acquire: percentiles(c.acquire), Release: percentiles(c.release),
		ErrorSamples: c.errSamples,
		CPU:          cpu, MachineBusy: busy,
		Rounds: c.rounds,
	}
}

// percentiles sorts ns and reads nearest-rank percentiles from it.
func percentiles(ns []int64) latency {
	if len(ns) == 0 {
		return latency{}
	}
	slices.Sort(ns)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ns)))) - 1
		return float64(ns[max(i, 0)]) / 1e3
	}
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return latency{P50: at(0.50), P99: at(0.99), P999: at(0.999), Mean: sum / float64(len(ns)) / 1e3, N: len(ns)}
}

func (r *report) find(system, mode string, workers int) *result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.System == system && x.Mode == mode && x.Workers == workers {
			return x
		}
	}
	return nil
}

// ratios computes proxy/redsync and proxy/direct for every setting, and
// checks the targets of issue 5; with -fencing, proxy-fenced/proxy too,
// and the target of issue 14. A ratio to a system not measured is 0.
func (r *report) ratios() {
	for _, x := range r.Results {
		if x.System != "proxy" {
			continue
		}
		var d, rs result
		if p := r.find("direct", x.Mode, x.Workers); p != nil {
			d = *p
		}
		if p := r.find("redsync", x.Mode, x.Workers); p != nil {
			rs = *p
		}
		r.Ratios = append(r.Ratios, ratio{
			Mode: x.Mode, Workers: x.Workers,
			ProxyToRedsync: div(x.CyclesPerSec, rs.CyclesPerSec),
			ProxyToDirect:  div(x.CyclesPerSec, d.CyclesPerSec),
			AcquireP50:     div(x.Acquire.P50, rs.Acquire.P50),
		})
		if f := r.find("proxy-fenced", x.Mode, x.Workers); f != nil {
			r.Fencing = append(r.Fencing, fencingOf(x, *f))
		}
		if b := r.find("baseline", x.Mode, x.Workers); b != nil {
			r.Baseline = append(r.Baseline, fencingOf(*b, x))
		}
	}
	if r.Params.CostTable {
		r.CostTable = r.costRows()
	}
	var at32, at1 *ratio
	for i := range r.Ratios {
		x := &r.Ratios[i]
		if x.Mode == "uncontended" && x.Workers == 32 {
			at32 = x
		}
		if x.Mode == "uncontended" && x.Workers == 1 {
			at1 = x
		}
	}
	add := func(name, want string, x *ratio, got func(*ratio) float64, ok func(float64) bool) {
		t := target{Name: name, Want: want, Known: x != nil}
		if x != nil {
			t.Got = got(x)
			t.Met = ok(t.Got)
		}
		r.Targets = append(r.Targets, t)
	}
	add("32 workers: proxy/redsync cycles", ">= 3", at32, func(x *ratio) float64 { return x.ProxyToRedsync }, func(v float64) bool { return v >= 3 })
	add("32 workers: proxy/direct cycles", ">= 0.5", at32, func(x *ratio) float64 { return x.ProxyToDirect }, func(v float64) bool { return v >= 0.5 })
	add("1 worker: proxy/redsync acquire p50", "<= 1", at1, func(x *ratio) float64 { return x.AcquireP50 }, func(v float64) bool { return v > 0 && v <= 1 })
	if len(r.Fencing) > 0 {
		var f32, f1 *fencing
		for i := range r.Fencing {
			x := &r.Fencing[i]
			if x.Mode == "uncontended" && x.Workers == 32 {
				f32 = x
			}
			if x.Mode == "uncontended" && x.Workers == 1 {
				f1 = x
			}
		}
		addF := func(name, want string, x *fencing, got func(*fencing) float64, ok func(float64) bool) {
			t := target{Name: name, Want: want, Known: x != nil}
			if x != nil {
				t.Got = got(x)
				t.Met = t.Got > 0 && ok(t.Got)
			}
			r.Targets = append(r.Targets, t)
		}
		// By round, for the reason given at fencing.CyclesByRound.
		addF("32 workers: fenced/plain cycles (median of rounds)", ">= 0.9", f32, func(x *fencing) float64 { return x.CyclesByRound.Median }, func(v float64) bool { return v >= 0.9 })
		addF("1 worker: fenced/plain acquire p50 (median of rounds)", "<= 1.1", f1, func(x *fencing) float64 { return x.AcquireP50ByRound.Median }, func(v float64) bool { return v <= 1.1 })
	}
	r.latencyTargets()
	m := r.Memory
	add("bytes per idle connection", "<= 16384", &ratio{}, func(*ratio) float64 { return m.BytesPerIdle }, func(v float64) bool { return v <= 16384 })
	if m.IdleConns == 0 {
		r.Targets[len(r.Targets)-1].Known = false
		r.Targets[len(r.Targets)-1].Met = false
	}
}

// spread is the median of some ratios, and their range.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// pairedRatios is the spread of fenced over plain, round by round, of
// what figure reads from a round.
func pairedRatios(plain, fenced []roundFigures, figure func(roundFigures) float64) spread {
	var rs []float64
	for i := range min(len(plain), len(fenced)) {
		if v := div(figure(fenced[i]), figure(plain[i])); v > 0 {
			rs = append(rs, v)
		}
	}
	m, ok := median(rs)
	if !ok {
		return spread{}
	}
	return spread{Median: m, Min: slices.Min(rs), Max: slices.Max(rs)}
}

func fencingOf(plain, fenced result) fencing {
	f := fencing{
		Mode: plain.Mode, Workers: plain.Workers,
		Cycles:     div(fenced.CyclesPerSec, plain.CyclesPerSec),
		AcquireP50: div(fenced.Acquire.P50, plain.Acquire.P50),
		AcquireP99: div(fenced.Acquire.P99, plain.Acquire.P99),
		CyclesByRound: pairedRatios(plain.Rounds, fenced.Rounds,
			func(r roundFigures) float64 { return r.CyclesPerSec }),
		AcquireP50ByRound: pairedRatios(plain.Rounds, fenced.Rounds,
			func(r roundFigures) float64 { return r.AcquireP50 }),
		AcquireP99ByRound: pairedRatios(plain.Rounds, fenced.Rounds,
			func(r roundFigures) float64 { return r.AcquireP99 }),
		ProxyCPUByRound: pairedRatios(plain.Rounds, fenced.Rounds,
			func(r roundFigures) float64 { return r.ProxyCPU }),
	}
	if plain.CPU != nil && fenced.CPU != nil {
		if plain.CPU.Proxy != nil && fenced.CPU.Proxy != nil {
			f.ProxyCPURatio = div(*fenced.CPU.Proxy, *plain.CPU.Proxy)
		}
		diff := func(a, b *float64) *float64 {
			if a == nil || b == nil {
				return nil
			}
			return ptr(*a - *b)
		}
		f.ProxyCPU = diff(fenced.CPU.Proxy, plain.CPU.Proxy)
		f.BackendsCPU = diff(fenced.CPU.Backends, plain.CPU.Backends)
	}
	return f
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *report) print(out io.Writer) {
	fmt.Fprintf(out, "\nThroughput and latency (cycle = acquire + release; latencies in µs, exact percentiles of %s)\n",
		"all kept samples")
	r.table(out, "mode\tworkers\tsystem\tcycles/s\tfailed/s\terrors\tacq p50\tacq p99\tacq p99.9\trel p50\trel p99\trel p99.9\t", func(x result) string {
		return fmt.Sprintf("%s\t%d\t%s\t%.0f\t%.0f\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n",
			x.Mode, x.Workers, x.System, x.CyclesPerSec, x.FailedPerSec, x.Errors,
			x.Acquire.P50, x.Acquire.P99, x.Acquire.P999, x.Release.P50, x.Release.P99, x.Release.P999)
	})
	r.printCPU(out)
	r.printBackends(out)

	fmt.Fprintln(out, "\nRatios (proxy over the others)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tworkers\tproxy/redsync cycles\tproxy/direct cycles\tproxy/redsync acq p50\t")
	for _, x := range r.Ratios {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t\n", x.Mode, x.Workers, x.ProxyToRedsync, x.ProxyToDirect, x.AcquireP50)
	}
	tw.Flush()
	r.printFencing(out)
	r.printBaseline(out)
	r.printCostTable(out)

	m := r.Memory
	fmt.Fprintln(out, "\nProxy memory (VmRSS)")
	if m.RSSStart == 0 {
		fmt.Fprintln(out, "  not measured: the proxy was not started by the bench")
	} else {
		fmt.Fprintf(out, "  at start %s, after the load %s\n", mib(m.RSSStart), mib(m.RSSAfterLoad))
		if m.IdleConns > 0 {
			fmt.Fprintf(out, "  %d idle connections (opened in %.1fs): %s -> %s, %.0f bytes (%.1f KiB) each; after closing them %s\n",
				m.IdleConns, m.IdleOpenSecond, mib(m.RSSBeforeIdle), mib(m.RSSWithIdle), m.BytesPerIdle, m.BytesPerIdle/1024, mib(m.RSSAfterClose))
		}
	}

	if r.Soak != nil {
		r.Soak.print(out)
	}

	if r.Floor != nil {
		r.Floor.print(out, len(r.Params.Backends))
	}
	fmt.Fprintln(out, "\nTargets of issues 5, 14 and 20")
	for _, t := range r.Targets {
		verdict := "MISSED"
		switch {
		case !t.Known:
			verdict = "not measured"
		case t.Met:
			verdict = "met"
		}
		fmt.Fprintf(out, "  %-56s want %-8s got %-10.2f %s\n", t.Name, t.Want, t.Got, verdict)
	}
	r.printProxyAlone(out)
	var errs int64
	for _, x := range r.Results {
		errs += x.Errors
		for _, e := range x.ErrorSamples {
			fmt.Fprintf(out, "  error (%s %s %d): %s\n", x.System, x.Mode, x.Workers, e)
		}
	}
	fmt.Fprintf(out, "errors in total: %d; load average after: %s\n", errs, r.Machine.LoadAfter)
	r.printProfiles(out)
}

// printCPU shows where the machine's CPU went per lock cycle: all parts
// share its cores, so a system's cycles/s here cannot exceed the cores'
// time over the total.
func (r *report) printCPU(out io.Writer) {
	fmt.Fprintf(out, "\nCPU per lock cycle (µs; client = the bench's workers, backends = all %d redis-servers)\n",
		len(r.Params.Backends))
	r.table(out, "mode\tworkers\tsystem\tclient\tproxy\tbackends\ttotal\tmachine busy %\t", func(x result) string {
		c := x.CPU
		if c == nil {
			c = &cpuPerCycle{} // no cycles: nothing to divide by
		}
		return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Mode, x.Workers, x.System,
			usOrUnknown(c.Client), r.proxyCPU(x, c.Proxy), usOrUnknown(c.Backends), usOrUnknown(c.Total),
			pctOrUnknown(x.MachineBusy))
	})
}

// table writes one row per result under header, with a blank row between
// settings.
func (r *report) table(out io.Writer, header string, row func(x result) string) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	for i, x := range r.Results {
		if i > 0 && newSetting(r.Results[i-1], x) {
			fmt.Fprintln(tw, strings.Repeat("\t", strings.Count(header, "\t")))
		}
		fmt.Fprint(tw, row(x))
	}
	tw.Flush()
}

// printBackends shows what a lock cycle asked of the backends, beside the
// CPU it took.
func (r *report) printBackends(out io.Writer) {
	fmt.Fprintln(out, "\nBackends per lock cycle (commands: per backend the system uses, a script's own commands counted too; script µs (EVAL, EVALSHA) and notices sent (PUBLISH): all backends; notices received: by the system's own proxy, INFO release_notices)")
	r.table(out, "mode\tworkers\tsystem\tcommands\tscript µs\tnotices sent\tnotices received\t by command\t", func(x result) string {
		b := x.Backend
		if b == nil {
			why := "no cycles"
			if x.BackendError != "" {
				why = x.BackendError
			}
			return fmt.Sprintf("%s\t%d\t%s\t?\t?\t?\t?\t %s\t\n", x.Mode, x.Workers, x.System, why)
		}
		recv := decOrUnknown(b.NoticesReceived, 2)
		if x.System == "direct" || x.System == "redsync" {
			recv = "-"
		}
		return fmt.Sprintf("%s\t%d\t%s\t%.2f\t%.1f\t%.2f\t%s\t %s\t\n", x.Mode, x.Workers, x.System,
			b.Commands, b.ScriptUs, b.NoticesSent, recv, b.breakdown())
	})
}

// proxyCPU is the proxy column: for the other systems the proxy idles, so
// its figure is shown only when it exceeds what the readings' resolution
// could make of nothing, one clock tick per round and reading pair.
func (r *report) proxyCPU(x result, us *float64) string {
	if x.System != "direct" && x.System != "redsync" || us == nil {
		return usOrUnknown(us)
	}
	if *us*float64(x.Cycles) <= float64(r.Params.Rounds)*float64(clockTick.Microseconds()) {
		return "-"
	}
	return usOrUnknown(us)
}

// newSetting reports whether y starts another setting's rows than x's.
func newSetting(x, y result) bool { return x.Mode != y.Mode || x.Workers != y.Workers }

// printBaseline shows this build against -baseline-bin's, whose rounds
// alternated in this run.
func (r *report) printBaseline(out io.Writer) {
	printPairs(out, "Against the baseline (proxy over the -baseline-bin build, rounds in turns in this run; proxy CPU per cycle as a ratio, and in µs (proxy minus baseline); by round: median [range] of each round over the baseline one next to it)", r.Baseline)
}

// printFencing shows what fencing costs: proxy-fenced over proxy, whose
// rounds alternated in this run, so that the machine's drift cancels.
func (r *report) printFencing(out io.Writer) {
	printPairs(out, "Fencing (proxy-fenced over proxy, rounds in turns in this run; proxy CPU per cycle as a ratio, and in µs (fenced minus plain); by round: median [range] of each round over the plain one next to it)", r.Fencing)
	if len(r.Fencing) > 0 && r.FencingTokens > 0 && r.FencingWriteBacks >= 0 {
		fmt.Fprintf(out, "  the fenced proxy minted %d tokens in the whole run; %d of them (%.2f%%) took a write-back round trip\n",
			r.FencingTokens, r.FencingWriteBacks, 100*float64(r.FencingWriteBacks)/float64(r.FencingTokens))
	}
}

// printPairs is the table of one system over another, under title; none
// when rows is empty.
func printPairs(out io.Writer, title string, rows []fencing) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "\n"+title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tworkers\tcycles\tacq p50\tacq p99\tproxy CPU\tproxy CPU µs\tbackends CPU µs\tcycles by round\tacq p50 by round\tacq p99 by round\tproxy CPU by round\t")
	for _, x := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Mode, x.Workers, x.Cycles, x.AcquireP50, x.AcquireP99,
			x.ProxyCPURatio, signedOrUnknown(x.ProxyCPU), signedOrUnknown(x.BackendsCPU),
			x.CyclesByRound, x.AcquireP50ByRound, x.AcquireP99ByRound, x.ProxyCPUByRound)
	}
	tw.Flush()
}

// String is the median and, in brackets, the range.
func (s spread) String() string {
	return fmt.Sprintf("%.3f [%.3f-%.3f]", s.Median, s.Min, s.Max)
}

func signedOrUnknown(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%+.1f", *v)
}

func usOrUnknown(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.1f", *v)
}

func pctOrUnknown(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.0f", *v*100)
}

// printProxyAlone derives from the proxy's own CPU per cycle at 32
// uncontended workers what it would carry without clients and backends on
// its cores, and likewise direct's redis-server: the shared machine caps
// both, so this is what compares them apart from it.
func (r *report) printProxyAlone(out io.Writer) {
	p, d := r.find("proxy", "uncontended", 32), r.find("direct", "uncontended", 32)
	if p == nil || p.CPU == nil || p.CPU.Proxy == nil || *p.CPU.Proxy <= 0 {
		return
	}
	x := *p.CPU.Proxy
	fmt.Fprintf(out, "  at 32 workers the proxy's own CPU is %.1f µs per cycle: on a machine of its own (clients and backends elsewhere) one core would carry about %.0f cycles/s\n",
		x, roughly(1e6/x))
	if d == nil || d.CPU == nil || d.CPU.Backends == nil || *d.CPU.Backends <= 0 {
		return
	}
	y := *d.CPU.Backends
	fmt.Fprintf(out, "  at 32 workers direct's backends use %.1f µs per cycle: one core of redis-server alone would carry about %.0f cycles/s\n",
		y, roughly(1e6/y))
}

// roughly rounds to hundreds: figures from 10 ms clock ticks are not finer.
func roughly(v float64) float64 { return math.Round(v/100) * 100 }

// printProfiles names the CPU profiles, and how to read the uncontended one
// with the most workers: the busiest proxy, without contention's waits.
func (r *report) printProfiles(out io.Writer) {
	if len(r.Profiles) == 0 {
		return
	}
	fmt.Fprintf(out, "\nCPU profiles of the proxy (first round of each setting, %s)\n", r.Params.PprofAddr)
	hint, most := r.Profiles[0], 0
	for _, p := range r.Profiles {
		fmt.Fprintf(out, "  %s\n", p)
	}
	for _, x := range r.Results {
		if x.System == "proxy" && x.Mode == "uncontended" && x.Workers > most {
			most = x.Workers
			hint = profileFile(r.Params.ProfileDir, "proxy", setting{false, x.Workers})
		}
	}
	fmt.Fprintf(out, "read one with: go tool pprof -top %s\n", hint)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func (r *report) writeJSON(path string) error { return writeJSONFile(path, r) }

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func machineInfo() machine {
	m := machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), LoadBefore: loadAvg()}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		m.Redis = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg returns the three load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// latencyTargets checks issue 20's: one lock at a time, the proxy's
// acquisition against redsync's and direct's, round by round (the
// median of the rounds' figures, each round's systems run back to back),
// and its CPU per cycle at 1 and 32 workers.
func (r *report) latencyTargets() {
	proxy1, redsync1, direct1 := r.find("proxy", "uncontended", 1), r.find("redsync", "uncontended", 1), r.find("direct", "uncontended", 1)
	add := func(name, want string, known bool, got float64, ok bool) {
		r.Targets = append(r.Targets, target{Name: name, Want: want, Known: known, Got: got, Met: known && ok})
	}
	if proxy1 != nil && redsync1 != nil {
		s := pairedRatios(redsync1.Rounds, proxy1.Rounds, func(x roundFigures) float64 { return x.AcquireP50 })
		add("1 worker: proxy/redsync acquire p50 (median of rounds)", "<= 0.8", s.Median > 0, s.Median, s.Median <= 0.8)
	} else {
		add("1 worker: proxy/redsync acquire p50 (median of rounds)", "<= 0.8", false, 0, false)
	}
	if proxy1 != nil && direct1 != nil {
		var diffs []float64
		for i := range min(len(proxy1.Rounds), len(direct1.Rounds)) {
			diffs = append(diffs, proxy1.Rounds[i].AcquireP50-direct1.Rounds[i].AcquireP50)
		}
		d, known := median(diffs)
		add("1 worker: proxy - direct acquire p50, µs (median of rounds)", "<= 100", known, d, d <= 100)
	} else {
		add("1 worker: proxy - direct acquire p50, µs (median of rounds)", "<= 100", false, 0, false)
	}
	cpu := func(x *result) (float64, bool) {
		if x == nil || x.CPU == nil || x.CPU.Proxy == nil {
			return 0, false
		}
		return *x.CPU.Proxy, true
	}
	c1, known := cpu(proxy1)
	add("1 worker: proxy CPU per cycle, µs", "<= 100", known, c1, c1 <= 100)
	c32, known := cpu(r.find("proxy", "uncontended", 32))
	add("32 workers: proxy CPU per cycle, µs", "< 50", known, c32, c32 < 50)
}

// median is the median of xs, false for none.
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	xs = slices.Sorted(slices.Values(xs))
	if len(xs)%2 == 0 {
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2, true
	}
	return xs[len(xs)/2], true
}
