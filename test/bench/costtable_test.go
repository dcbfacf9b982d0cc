//go:build linux

package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestVariantBuilds(t *testing.T) {
	dir := t.TempDir()
	vs := variantBuilds(dir)
	if len(vs) != len(costFeatures) {
		t.Fatalf("%d builds, want one per feature (%d)", len(vs), len(costFeatures))
	}
	seen := map[string]bool{}
	for i, v := range vs {
		f := costFeatures[i]
		want := []string{"build", "-ldflags", "-X github.com/lockproxy/lockproxy/quorum.measureWithout=" + f, "-o", v.bin, "."}
		if !slices.Equal(v.args, want) {
			t.Errorf("%s: go %q, want go %q", f, v.args, want)
		}
		if v.system != "without-"+f {
			t.Errorf("%s: system %q", f, v.system)
		}
		if filepath.Dir(v.bin) != dir || seen[v.bin] {
			t.Errorf("%s: binary %s, want one of its own in %s", f, v.bin, dir)
		}
		seen[v.bin] = true
	}
	for _, f := range []string{"setcheck", "stamp", "horizon", "notice", "topup", "all"} {
		if !slices.Contains(costFeatures, f) {
			t.Errorf("no variant without %s", f)
		}
	}
}

// TestMeasureWithoutVar checks the -X target against the tree: the
// module's path, and, once quorum declares the variable, that it is a
// package-level string variable (what -X can set) whose code names every
// feature the bench builds a variant for. Until then a variant links
// without complaint and is the full build, which this test cannot see.
func TestMeasureWithoutVar(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	module := strings.TrimSpace(strings.TrimPrefix(first, "module"))
	if want := module + "/quorum.measureWithout"; measureWithoutVar != want {
		t.Fatalf("-X target %s, want %s", measureWithoutVar, want)
	}

	fset := token.NewFileSet()
	var declared *ast.File
	literals := map[string]bool{}
	files, _ := filepath.Glob("../../quorum/*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, n := range v.Names {
					if n.Name != "measureWithout" {
						continue
					}
					declared = f
					ident, _ := v.Type.(*ast.Ident)
					var lit *ast.BasicLit
					if i < len(v.Values) {
						lit, _ = v.Values[i].(*ast.BasicLit)
					}
					if (ident == nil || ident.Name != "string") && (lit == nil || lit.Kind != token.STRING) {
						t.Errorf("%s: quorum.measureWithout is not a string variable: -X cannot set it", fset.Position(n.Pos()))
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if b, ok := n.(*ast.BasicLit); ok && b.Kind == token.STRING {
				if s, err := strconv.Unquote(b.Value); err == nil {
					for _, part := range strings.Split(s, ",") {
						literals[part] = true
					}
				}
			}
			return true
		})
	}
	if declared == nil {
		t.Log("quorum.measureWithout is not in this tree yet: every variant is the full build")
		return
	}
	for _, f := range costFeatures {
		if !literals[f] {
			t.Errorf("quorum names no feature %q: its variant would be the full build", f)
		}
	}
}

// TestCostRows builds the table from three systems' figures and checks its
// arithmetic and its markdown.
func TestCostRows(t *testing.T) {
	rounds := func(cps ...float64) []roundFigures {
		var rs []roundFigures
		for _, c := range cps {
			rs = append(rs, roundFigures{CyclesPerSec: c})
		}
		return rs
	}
	figures := func(system string, cps []float64, commands, proxyCPU float64) result {
		return result{System: system, Mode: "uncontended", Workers: 32, Rounds: rounds(cps...),
			CPU:     &cpuPerCycle{Proxy: ptr(proxyCPU), Backends: ptr(40)},
			Backend: &backendPerCycle{Backends: 5, Commands: commands, ByCommand: map[string]float64{"evalsha": 2, "set": commands - 2}, ScriptUs: 30, NoticesSent: 5, NoticesReceived: ptr(1)}}
	}
	r := &report{Params: params{CostTable: true, Rounds: 3, Duration: "2s", Backends: make([]string, 5)}}
	r.Results = []result{
		{System: "direct", Mode: "uncontended", Workers: 32, Rounds: rounds(1, 1, 1)},
		figures("proxy", []float64{1000, 900, 1100}, 6, 60),
		figures("without-notice", []float64{1100, 990, 990}, 5, 55),
		figures("baseline", []float64{1200, 1200, 1200}, 3, 50),
	}
	r.Results[3].Backend.NoticesReceived = nil // a build from before the notices
	r.ratios()
	if len(r.CostTable) != 3 {
		t.Fatalf("%d rows, want full, without notice, baseline: %+v", len(r.CostTable), r.CostTable)
	}
	full, notice, base := r.CostTable[0], r.CostTable[1], r.CostTable[2]
	if full.System != "proxy" || notice.System != "without-notice" || base.System != "baseline" {
		t.Fatalf("rows in the order %s, %s, %s", full.System, notice.System, base.System)
	}
	if full.CyclesPerSec != 1000 || notice.CyclesPerSec != 990 {
		t.Errorf("medians of rounds %v and %v, want 1000 and 990", full.CyclesPerSec, notice.CyclesPerSec)
	}
	// Round by round: 1.1, 1.1, 0.9.
	if s := notice.ToFull; s.Median != 1.1 || s.Min != 0.9 || s.Max != 1.1 {
		t.Errorf("without notice over full by round: %+v, want 1.1 [0.9-1.1]", s)
	}
	if *notice.CommandsPerBackend != 5 || *notice.ProxyCPU != 55 || *notice.ScriptUs != 30 || *notice.BackendsCPU != 40 {
		t.Errorf("without notice per cycle: %+v", notice)
	}

	var out bytes.Buffer
	r.printCostTable(&out)
	text := out.String()
	for _, want := range []string{
		"| full build | 1000 | 1 | 6.00 | 40.0 | 30.0 | 60.0 | 5.00 | 1.00 | set 4, evalsha 2 |",
		"| without notice | 990 | 1.100 [0.900–1.100] | 5.00 | 40.0 | 30.0 | 55.0 | 5.00 | 1.00 | set 3, evalsha 2 |",
		"| baseline (-baseline-bin) | 1200 | 1.200 [1.091–1.333] | 3.00 | 40.0 | 30.0 | 50.0 | 5.00 | ? | evalsha 2, set 1 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the table has no line\n%s\n%s", want, text)
		}
	}
}

func TestCostTableFlags(t *testing.T) {
	o, err := parseFlags([]string{"-cost-table", "-systems", "proxy", "-baseline-bin", "/bin/true"})
	if err != nil || !o.costTable {
		t.Fatalf("-cost-table -systems proxy -baseline-bin: %v, cost table %v", err, o != nil && o.costTable)
	}
	for _, args := range [][]string{
		{"-cost-table", "-proxy-bin", "/bin/true"},           // the table is of this tree
		{"-cost-table", "-proxy", "h:1", "-backends", "h:2"}, // likewise
		{"-cost-table", "-systems", "direct,redsync"},        // no full build to compare with
		{"-cost-table", "-open-loop", "1000"},                // a table of the closed loop only
		{"-cost-table", "-waiting"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
