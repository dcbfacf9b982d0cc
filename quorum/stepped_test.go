package quorum

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// newSteppedCluster is newCluster on stepped time: one backend per rate (0
// or 1: as the steps; 1.5: half as fast again), whose clocks move only when
// the test steps them, as the engine's does (Config.clock). A wait of
// max_ttl then takes a step, not max_ttl.
func newSteppedCluster(t *testing.T, rates []float64, cfg Config) *cluster {
	t.Helper()
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = time.Second // as newCluster
	}
	clock := redistest.NewSteppedClock(time.Now().UTC().Truncate(time.Second))
	cfg.clock = clock
	c := &cluster{clock: clock}
	for _, rate := range rates {
		s := redistest.StartWith(t, 1, redistest.Options{Stepped: clock, ClockRate: rate})[0]
		c.servers = append(c.servers, s)
		c.direct = append(c.direct, s.Client(t))
		cfg.Backends = append(cfg.Backends, s.URL())
	}
	c.cfg = cfg
	c.engine = newEngine(t, cfg)
	return c
}

// step advances the cluster's time by d. A step of a sampling interval or
// more then waits until each engine has heard the clock of every backend
// it is connected to at the new time: the sample that the step's tick sent
// (clock.go) is judged by then. (A shorter one may or may not reach a
// tick.)
func (c *cluster) step(t *testing.T, d time.Duration, engines ...*Engine) {
	t.Helper()
	c.clock.Advance(d)
	now := c.clock.Now()
	for k, e := range append([]*Engine{c.engine}, engines...) {
		if d < e.cfg.sampling.interval {
			continue
		}
		for i, n := range e.nodes {
			if status, _ := n.pipe.Status(); status != backend.StatusUp {
				continue // not sampled (clocks.run)
			}
			redistest.Eventually(t, func() string {
				if !e.sampledAt(i, now) {
					return fmt.Sprintf("engine %d: backend %s's clock is not sampled at the step's time", k, n.addr)
				}
				return ""
			})
		}
	}
}

// sampledAt reports whether backend i's last clock sample was answered at
// t or later.
func (e *Engine) sampledAt(i int, t time.Time) bool {
	s := e.clocks.judges[i].judge.Samples()
	return len(s) > 0 && s[len(s)-1].Recv >= t.Sub(e.clocks.epoch)
}

// topUpsRun steps time by d, past the rounds of the top-ups under way
// (topup.go), and waits until they are over: where the real clock would
// pass them before the test's next command, which could stop them.
func (c *cluster) topUpsRun(t *testing.T, d time.Duration) {
	t.Helper()
	c.step(t, d)
	waitFor(t, func() bool { return c.engine.TopUps().Running == 0 })
}

// connected waits until the engine is connected to backend i again, as
// after its restart: the sampling uses the connection there is, and
// requests dial.
func (c *cluster) connected(t *testing.T, i int) {
	t.Helper()
	c.connectedOf(t, c.engine, i)
}

// connectedOf is connected, for another engine than the cluster's.
func (c *cluster) connectedOf(t *testing.T, e *Engine, i int) {
	t.Helper()
	waitFor(t, func() bool {
		e.Probe(t.Context())
		st, _ := e.nodes[i].pipe.Status()
		return st == backend.StatusUp
	})
}

// realClockUses are the engine's only reads of the real clock, by
// function: each bounds or measures one exchange on the wire, or is a
// fencing token's floor, which every proxy must read on one scale.
// Everything else that the engine waits for or measures a lock by goes
// through Config.clock, which TestEngineTimeIsStepped holds true.
var realClockUses = map[string]string{
	"Probe":        "a ping's round trip",
	"newFlight":    "the backend timeout of a fan-out",
	"awaitCleanup": "the backend timeout of a clean-up the answer waits for",
	"once":         "the backend timeout of a top-up's round",
	"getInLine":    "the backend timeout of a subscription's settling",
	"watchPattern": "the backend timeout of a subscription's settling",
	"awaitSeeds":   "New's bound on the re-seeds' exchanges",
	"retrySplit":   "the pause between a split acquisition's two tries, within one request",
	"sendClocked":  "a fencing token's floor: the wall clock, on one scale for every proxy",
	"logNow":       "the time of a start-up line logged, as slog stamps every line",
	"endLater":     "how long the late backends' start-up lines are gathered, which decides nothing",
	"keepMarks":    "the renewals of the waiting marks, whose TTLs run on the backends' clocks",
}

// TestEngineTimeIsStepped: every read of the time in the engine, and every
// timer, goes through its clock (Config.clock), but for realClockUses: so
// the stepped clock reaches every decision made by time (the tests on
// stepped time show it for the quarantine, the clock-rate judge, the
// re-seed, the records' rounds, the renewals and their refills).
func TestEngineTimeIsStepped(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range pkgs {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "time" {
					return true
				}
				switch sel.Sel.Name {
				case "Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Sleep", "Tick":
				default:
					return true
				}
				if _, ok := realClockUses[fn.Name.Name]; !ok {
					t.Errorf("%s: time.%s in %s: the engine's clock (Engine.clock) is what tests step", fset.Position(sel.Pos()), sel.Sel.Name, fn.Name.Name)
				}
				seen[fn.Name.Name] = true
				return true
			})
		}
	}
	for name := range realClockUses {
		if !seen[name] {
			t.Errorf("realClockUses names %s, which reads no real clock now", name)
		}
	}
}
