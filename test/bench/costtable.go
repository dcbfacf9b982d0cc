//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// The cost table (-cost-table): what each feature of a lock cycle costs,
// from builds of the current source that switch one feature's per-cycle
// work off (quorum.measureWithout, set with the linker's -X), each started
// as a system of its own over the same backends and measured in turns with
// the full build (the system proxy) and -baseline-bin's.

// costFeatures are the names quorum.measureWithout knows, one build each;
// "all" switches every one off.
var costFeatures = []string{"setcheck", "stamp", "horizon", "notice", "topup", "all"}

// measureWithoutVar is the variable the variants set. A build of a tree
// without it links all the same (-X of an unknown symbol is ignored) and
// behaves as the full build.
const measureWithoutVar = "github.com/lockproxy/lockproxy/quorum.measureWithout"

// variantPrefix starts the system name of each variant: without-stamp.
const variantPrefix = "without-"

// variantBuild is one variant: its system's name, its binary, and the go
// command's arguments that build it in the module root.
type variantBuild struct {
	system string
	bin    string
	args   []string
}

// variantBuilds are the builds of -cost-table, into dir.
func variantBuilds(dir string) []variantBuild {
	var vs []variantBuild
	for _, f := range costFeatures {
		bin := filepath.Join(dir, "lockproxy-"+variantPrefix+f)
		vs = append(vs, variantBuild{
			system: variantPrefix + f,
			bin:    bin,
			args:   []string{"build", "-ldflags", "-X " + measureWithoutVar + "=" + f, "-o", bin, "."},
		})
	}
	return vs
}

// namedProxy is a started proxy measured as a system of its own.
type namedProxy struct{ system, addr string }

// startVariants builds and starts the variants of -cost-table with the
// flags of the plain proxy.
func startVariants(ctx context.Context, o *options, e *env) ([]namedProxy, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := e.tempDir()
	if err != nil {
		return nil, err
	}
	var started []namedProxy
	for _, v := range variantBuilds(dir) {
		if err := goBuild(ctx, root, v.args); err != nil {
			return nil, err
		}
		addr, c, err := e.startProxy(ctx, v.bin, o.backends, proxyFlags(o))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.system, err)
		}
		e.addOther(v.system, c)
		started = append(started, namedProxy{v.system, addr})
	}
	return started, nil
}

// costRow is one line of the cost table: one system in one setting.
type costRow struct {
	Mode    string `json:"mode"`
	Workers int    `json:"workers"`
	System  string `json:"system"`
	// CyclesPerSec is the median of the rounds'; ToFull is the system's
	// cycles over the full build's, round by round.
	CyclesPerSec float64 `json:"cycles_per_sec_median"`
	ToFull       spread  `json:"to_full_cycles_by_round"`
	// Per lock cycle; null where not measured.
	CommandsPerBackend *float64 `json:"backend_commands_per_backend"`
	Breakdown          string   `json:"backend_commands_breakdown"`
	BackendsCPU        *float64 `json:"backends_cpu_us"`
	ScriptUs           *float64 `json:"script_us"`
	ProxyCPU           *float64 `json:"proxy_cpu_us"`
	NoticesSent        *float64 `json:"notices_sent"`
	NoticesReceived    *float64 `json:"notices_received"`
}

// costRows are the cost table's rows of every setting the proxy was
// measured in: the full build, the variants in the order of costFeatures,
// then the baseline.
func (r *report) costRows() []costRow {
	var rows []costRow
	for _, full := range r.Results {
		if full.System != "proxy" {
			continue
		}
		names := []string{"proxy"}
		for _, f := range costFeatures {
			names = append(names, variantPrefix+f)
		}
		names = append(names, "baseline")
		for _, name := range names {
			x := r.find(name, full.Mode, full.Workers)
			if x == nil {
				continue
			}
			row := costRow{Mode: x.Mode, Workers: x.Workers, System: x.System,
				ToFull: pairedRatios(full.Rounds, x.Rounds, func(r roundFigures) float64 { return r.CyclesPerSec })}
			var cps []float64
			for _, rf := range x.Rounds {
				cps = append(cps, rf.CyclesPerSec)
			}
			row.CyclesPerSec, _ = median(cps)
			if b := x.Backend; b != nil {
				row.CommandsPerBackend, row.Breakdown = ptr(b.Commands), b.breakdown()
				row.ScriptUs, row.NoticesSent, row.NoticesReceived = ptr(b.ScriptUs), ptr(b.NoticesSent), b.NoticesReceived
			}
			if x.CPU != nil {
				row.BackendsCPU, row.ProxyCPU = x.CPU.Backends, x.CPU.Proxy
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// variantLabel is the cost table's name of a system.
func variantLabel(system string) string {
	switch {
	case system == "proxy":
		return "full build"
	case system == "baseline":
		return "baseline (-baseline-bin)"
	case system == variantPrefix+"all":
		return "without all five"
	}
	return strings.Replace(system, variantPrefix, "without ", 1)
}

// printCostTable prints the cost table as markdown, one per setting.
func (r *report) printCostTable(out io.Writer) {
	if len(r.CostTable) == 0 {
		return
	}
	fmt.Fprintf(out, "\nCost per feature (builds of this tree with one feature's per-cycle work off, %s; %d rounds of %s in turns; per lock cycle; backends CPU, script time and notices sent (PUBLISH) over all %d backends; notices received by the variant's own proxy)\n",
		measureWithoutVar, r.Params.Rounds, r.Params.Duration, len(r.Params.Backends))
	for i, x := range r.CostTable {
		if i == 0 || x.Mode != r.CostTable[i-1].Mode || x.Workers != r.CostTable[i-1].Workers {
			fmt.Fprintf(out, "\n%s, %d workers:\n\n", x.Mode, x.Workers)
			fmt.Fprintln(out, "| variant | cycles/s (median) | × full, by round | backend commands per backend | backends CPU µs | script µs | proxy CPU µs | notices sent | notices received | commands per backend, by name |")
			fmt.Fprintln(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|")
		}
		ratio := fmt.Sprintf("%.3f [%.3f–%.3f]", x.ToFull.Median, x.ToFull.Min, x.ToFull.Max)
		if x.System == "proxy" {
			ratio = "1"
		}
		fmt.Fprintf(out, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", variantLabel(x.System), x.CyclesPerSec, ratio,
			decOrUnknown(x.CommandsPerBackend, 2), usOrUnknown(x.BackendsCPU), usOrUnknown(x.ScriptUs), usOrUnknown(x.ProxyCPU),
			decOrUnknown(x.NoticesSent, 2), decOrUnknown(x.NoticesReceived, 2), x.Breakdown)
	}
}

func decOrUnknown(v *float64, places int) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.*f", places, *v)
}
