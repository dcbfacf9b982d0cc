package admit

import (
	"flag"
	"testing"
)

var (
	modelLimit = flag.Int("model.limit", 20_000_000, "the most states one scenario of the model checker may visit")
	modelDeep  = flag.Bool("model.deep", false, "explore the scenarios with the larger budgets of docs/design/model.md (minutes, not seconds)")
)

// scenarios are the deployments the model checker explores. Each is as
// small as what it shows allows; budget bounds each history (how many of
// each fault, acquisitions and extensions), deep is the larger budget
// that -model.deep explores instead. Time is not bounded but by the
// horizon of fencing scenarios: every state is explored at whatever tick
// it comes, and times further back than any wait are one.
var scenarios = []struct {
	scenario
	deep budget
}{
	{
		// Restarts without persistence, all of them: the wait after each
		// ends, and no second holder gets in meanwhile.
		scenario: scenario{name: "restarts", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 2, budget: budget{restarts: 3, grants: 2, extends: 1}},
		deep: budget{restarts: 4, grants: 3, extends: 2, cuts: 1, proxyRestarts: 1},
	},
	{
		// The wedge of issue 33: five backends adopted again at epoch 2, a
		// proxy of each epoch running, three backends restarted empty.
		scenario: scenario{name: "wedge", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 3, adopts: 1, grants: 1}},
		deep: budget{restarts: 3, adopts: 2, grants: 2},
	},
	{
		scenario: scenario{name: "grow 3 to 5", backends: 5, sets: [][]int{{0, 1, 2}, {0, 1, 2, 3, 4}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 2, grants: 2}},
		deep: budget{restarts: 2, cuts: 1, proxyRestarts: 1, adopts: 2, grants: 2, extends: 1},
	},
	{
		scenario: scenario{name: "replace one of 3", backends: 4, sets: [][]int{{0, 1, 2}, {0, 1, 3}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 2, grants: 2}},
		deep: budget{restarts: 2, failovers: 1, cuts: 1, proxyRestarts: 1, adopts: 2, grants: 2, extends: 1},
	},
	{
		scenario: scenario{name: "shrink 5 to 3", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}, {0, 1, 2}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 2, grants: 2}},
		deep: budget{restarts: 2, cuts: 1, proxyRestarts: 1, adopts: 2, grants: 2, extends: 1},
	},
	{
		// A mistaken epoch undone: epoch 2 replaced backend 2 by backend 3
		// by mistake, epoch 3 takes backend 2 back.
		scenario: scenario{name: "undo", backends: 4, sets: [][]int{{0, 1, 2}, {0, 1, 3}, {0, 1, 2}}, initial: 1, adopts: []int{2, 3},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 2, grants: 2}},
		deep: budget{restarts: 2, cuts: 1, proxyRestarts: 2, adopts: 3, grants: 2},
	},
	{
		// A proxy started by mistake with a higher epoch and a list of three
		// real backends and two that do not answer, beside the deployment,
		// while three backends restart empty: it writes nothing, and the
		// deployment keeps counting every backend.
		scenario: scenario{name: "stray proxy", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}}, initial: 1, stray: []int{0, 1, 2, 5, 6}, strayEpoch: 2,
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 3, grants: 2}},
		deep: budget{restarts: 5, grants: 2, cuts: 2},
	},
	{
		// Failovers to a replica that missed writes, across an adopt.
		scenario: scenario{name: "failover", backends: 3, sets: [][]int{{0, 1, 2}, {0, 1, 2}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 2, budget: budget{failovers: 2, adopts: 1, grants: 2}},
		deep: budget{failovers: 2, restarts: 1, adopts: 2, grants: 3},
	},
	{
		// Fencing tokens, with proxy 1's clock 3 ticks behind proxy 0's:
		// the tokens of a backend that lost its counter rest on the re-seed.
		scenario: scenario{name: "fencing", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, fencing: true, skew: []int{0, 12},
			proxies: []int{1, 1}, ttl: 2, horizon: 7, budget: budget{restarts: 2, grants: 3, extends: 1}},
		// Not three data losses of three: then the tokens rest on the
		// clock floor, which a proxy 3 ticks behind (more than max_ttl)
		// breaks, as seed.go says.
		deep: budget{restarts: 1, failovers: 1, grants: 4, extends: 2},
	},
	{
		scenario: scenario{name: "clock rate", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1,
			proxies: []int{1, 1}, ttl: 2, budget: budget{clocks: 2, restarts: 1, grants: 2}},
		deep: budget{clocks: 2, restarts: 2, grants: 3, extends: 1},
	},
	{
		// Backends that persist every write, restart quarantine off, across
		// an adopt whose epoch wait a restart must not cut short.
		scenario: scenario{name: "persisted", backends: 4, sets: [][]int{{0, 1, 2}, {0, 1, 3}}, initial: 1, adopts: []int{2}, persist: true,
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 1, grants: 2}},
		deep: budget{restarts: 2, adopts: 2, grants: 2, failovers: 1},
	},
	{
		// Backend 0 is lost for good, and backend 1 restarts empty: the
		// proxies cannot record the set again on backend 1 (they cannot
		// tell themselves from an old epoch's proxies cut off), and the
		// operator replaces backend 0 by backend 3, which adopt allows by
		// the old set's member list.
		scenario: scenario{name: "replace a dead one", backends: 4, sets: [][]int{{0, 1, 2}, {1, 2, 3}}, initial: 1, adopts: []int{2}, dead: []int{0},
			proxies: []int{1, 2}, ttl: 2, budget: budget{restarts: 1, adopts: 1, grants: 2}},
		deep: budget{restarts: 2, adopts: 2, grants: 2, cuts: 1},
	},
	{
		// A DNS change makes one backend's address reach another's server:
		// one server, one vote (a second one would renew a lock that one
		// server alone still holds).
		scenario: scenario{name: "dns change", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1,
			proxies: []int{1, 1}, ttl: 2, budget: budget{aliases: 1, restarts: 1, grants: 2, extends: 1}},
		deep: budget{aliases: 2, restarts: 2, cuts: 1, grants: 3},
	},
	{
		// Top-ups and refills copy a held lock onto backends that lack it,
		// across restarts, each copy landing at any time before the next
		// command on its pipe: no copy outlives its lock's release, or
		// its validity.
		scenario: scenario{name: "top-ups", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1,
			proxies: []int{1, 1}, ttl: 2, budget: budget{restarts: 2, fills: 2, grants: 2, extends: 1}},
		deep: budget{restarts: 3, fills: 3, grants: 3, extends: 2, cuts: 1},
	},
	{
		// Fenced copies raise the backend's counter to the lock's token: a
		// later lock there mints more.
		scenario: scenario{name: "fenced top-ups", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, fencing: true,
			proxies: []int{1, 1}, ttl: 2, horizon: 6, budget: budget{restarts: 1, fills: 2, grants: 3}},
		deep: budget{restarts: 2, fills: 3, grants: 3, extends: 1},
	},
	{
		// Backends emptied while the proxies stay connected (FLUSHALL):
		// seen by their marker at the next round of reads.
		scenario: scenario{name: "emptied", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1,
			proxies: []int{1, 1}, ttl: 2, budget: budget{flushes: 2, grants: 2, extends: 1}},
		deep: budget{flushes: 3, restarts: 1, grants: 3, extends: 1},
	},
	{
		// Replacing two of three at once is refused: nothing is written, and
		// the deployment goes on at its epoch.
		// (A proxy run with that list is another deployment, a quorum of
		// whose backends the first shares none of: no record can keep the
		// two apart, and none runs here.)
		scenario: scenario{name: "replace two of 3", backends: 5, sets: [][]int{{0, 1, 2}, {0, 3, 4}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 1}, ttl: 2, budget: budget{restarts: 1, adopts: 1, grants: 2}},
		deep: budget{restarts: 2, adopts: 2, grants: 2, proxyRestarts: 1},
	},
	// The lease horizon (issue 37, docs/design/horizon.md): a lost member
	// waits until the horizons its witnesses answer have passed, not
	// max_ttl. Leases short (1 tick) and long (max_ttl, 3 ticks), granted
	// and extended in every order; invariants also: every lock copy
	// expires by its data set's horizon.
	{
		// One of three lost, a partition that may hide a witness.
		scenario: scenario{name: "horizon, 3", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 1, cuts: 1, grants: 2, extends: 2}},
		deep: budget{restarts: 2, cuts: 1, fills: 1, grants: 3, extends: 2},
	},
	{
		// A restart and a failover to a replica that may lag (its
		// horizon with it): each lost alone, or both at once.
		scenario: scenario{name: "horizon, 3, failover", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 1, failovers: 1, grants: 2, extends: 1}},
		deep: budget{restarts: 1, failovers: 2, grants: 2, extends: 2},
	},
	{
		// Copies of a held lock record the horizon as grants do; a member
		// emptied while connected settles as one restarted.
		scenario: scenario{name: "horizon, 3, top-ups", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 1, flushes: 1, fills: 1, grants: 2, extends: 1}},
		deep: budget{restarts: 1, flushes: 1, fills: 2, cuts: 1, grants: 2, extends: 2},
	},
	{
		scenario: scenario{name: "horizon, 5", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 1, cuts: 1, grants: 2, extends: 2}},
		deep: budget{restarts: 1, failovers: 1, cuts: 1, grants: 2, extends: 2},
	},
	{
		scenario: scenario{name: "horizon, 5, failover", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{failovers: 1, grants: 2, extends: 1}},
		deep: budget{failovers: 2, grants: 2, extends: 2},
	},
	{
		// Two of five lost at once: each settles by the three left.
		scenario: scenario{name: "horizon, 5, two lost", backends: 5, sets: [][]int{{0, 1, 2, 3, 4}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 2, flushes: 1, grants: 2, extends: 1}},
		deep: budget{restarts: 3, flushes: 1, grants: 2, extends: 2},
	},
	{
		// Proofs written a round trip after their read: meanwhile the
		// member may have counted, lost its data set again (emptied) and
		// been marked anew by the same process. A proof lowers only the
		// marker its read found.
		scenario: scenario{name: "horizon, late proofs", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1, 3}, lateProofs: true, budget: budget{flushes: 2, cuts: 1, grants: 2}},
		deep: budget{restarts: 1, flushes: 2, cuts: 1, grants: 2, extends: 1},
	},
	{
		// Short leases only: a member restarted empty counts again one
		// short lease after, not max_ttl.
		scenario: scenario{name: "horizon, short leases", backends: 3, sets: [][]int{{0, 1, 2}}, initial: 1, proxies: []int{1, 1},
			ttl: 3, horizons: true, leases: []int{1}, wake: 1, budget: budget{restarts: 1, grants: 2, extends: 1}},
		deep: budget{restarts: 1, flushes: 1, grants: 3, extends: 2},
	},
	{
		// An adopt across restarts: an epoch wait is never settled by
		// horizons, and a member waiting one is no witness.
		scenario: scenario{name: "horizon, adopt", backends: 3, sets: [][]int{{0, 1, 2}, {0, 1, 2}}, initial: 1, adopts: []int{2},
			proxies: []int{1, 2}, ttl: 3, horizons: true, leases: []int{1, 3}, budget: budget{restarts: 1, adopts: 1, grants: 2}},
		deep: budget{restarts: 2, failovers: 1, adopts: 1, grants: 2, extends: 1},
	},
}

// controls are the model checker's negative controls: a decision with a
// known bug seeded, which the exploration must find.
var controls = []struct {
	name     string
	scenario string
	budget   *budget // in place of the scenario's
	fills    fillRule
	// blindExtends: extensions that do not raise the horizon.
	blindExtends bool
	kind         string
	d            func() decisions
}{
	{
		// Issue 33's wedge, in this design: without the rule that gives a set
		// that lost the records of a majority its records back, three of
		// five restarted empty never count again.
		name: "claims only where a quorum records the set", scenario: "wedge", kind: "liveness",
		d: func() decisions {
			d := ours
			d.claims = func(s Set, v []View, superseded bool) ([]int, bool) {
				mine := 0
				for _, x := range v {
					if x.Answered && Relate(s, x.Record) == Ours {
						mine++
					}
				}
				if mine < s.Quorum() {
					return nil, superseded
				}
				return Claims(s, v, superseded)
			}
			return d
		},
	},
	{
		name: "quarantine skipped", scenario: "restarts", kind: "safety",
		d: func() decisions {
			d := ours
			d.counts = func(r Relation, _, clockOff, unseeded bool) bool { return Counts(r, false, clockOff, unseeded) }
			return d
		},
	},
	{
		name: "no epoch wait", scenario: "grow 3 to 5", kind: "safety",
		d: func() decisions {
			d := ours
			d.plan = func(s []Set, m []Member) (Plan, error) {
				p, err := PlanAdopt(s, m)
				clear(p.Wait)
				return p, err
			}
			return d
		},
	},
	{
		name: "a restart cuts the epoch wait short", scenario: "persisted", kind: "safety",
		d: func() decisions {
			d := ours
			d.mark = func(m Marker, runID string, now, q, f int64, promoted bool) Marker {
				if m.Present && m.Owner != runID {
					m.Present = false // forget the wait written before
				}
				return Mark(m, runID, now, q, f, promoted)
			}
			return d
		},
	},
	{
		name: "a stray proxy records its set", scenario: "stray proxy", kind: "safety",
		d: func() decisions {
			d := ours
			d.claims = func(s Set, v []View, _ bool) ([]int, bool) {
				var all []int
				for i, x := range v {
					if x.Answered && x.Quarantined {
						all = append(all, i)
					}
				}
				return all, false
			}
			return d
		},
	},
	{
		name: "a lost fencing counter counts without a re-seed", scenario: "fencing", kind: "safety",
		d: func() decisions {
			d := ours
			d.counts = func(r Relation, quarantined, clockOff, _ bool) bool { return Counts(r, quarantined, clockOff, false) }
			d.seed = func(_, _, _ int) (bool, bool) { return false, false }
			return d
		},
	},
	{
		name: "one server counted twice", scenario: "dns change", kind: "safety",
		d: func() decisions {
			d := ours
			d.duplicate = func([]string, int, string) int { return -1 }
			return d
		},
	},
	{
		// PEXPIRE's defect: a command on the key that slips past its send
		// order lets a copy queued before it land after the release.
		name: "copies out of send order", scenario: "top-ups", kind: "safety", fills: fillsOutOfOrder,
		d: func() decisions { return ours },
	},
	{
		name: "copies with the whole TTL", scenario: "top-ups", kind: "safety", fills: fillsWholeTTL,
		d: func() decisions { return ours },
	},
	{
		// The wait ends at the loss, as if every lease had ended (the
		// engine's own control, LOCKPROXY_NEGATIVE_CONTROL=horizon).
		name: "horizon ignored", scenario: "horizon, 3", kind: "safety",
		d: func() decisions {
			d := ours
			d.settle = func(int, int, []int64) (int64, bool) { return 0, true }
			return d
		},
	},
	{
		name: "one witness too few", scenario: "horizon, 3", kind: "safety", budget: &budget{restarts: 1, cuts: 2, grants: 2},
		d: func() decisions {
			d := ours
			d.settle = func(n, q int, remaining []int64) (int64, bool) {
				return Settle(n-1, q, remaining) // n-q witnesses: one of the quorums that held a lease may go unread
			}
			return d
		},
	},
	{
		name: "a lost member as a witness", scenario: "horizon, 3", kind: "safety", budget: &budget{restarts: 2, cuts: 1, grants: 2},
		d: func() decisions {
			d := ours
			d.witness = func(rel Relation, marked, _, clockOff bool) bool { return witness(rel, marked, false, clockOff) }
			return d
		},
	},
	{
		// Without the rule, a member restarted empty waits max_ttl: the
		// short leases' scenario must notice.
		name: "no wait settled", scenario: "horizon, short leases", kind: "liveness",
		d: func() decisions {
			d := ours
			d.settle = func(int, int, []int64) (int64, bool) { return 0, false }
			return d
		},
	},
	{
		// lua/settle.lua as first written: it lowers any marker of the
		// process read, one marked anew since the read included.
		name: "proofs by run_id alone", scenario: "horizon, late proofs", kind: "safety",
		d: func() decisions {
			d := ours
			d.settled = func(m, read Marker, end int64) Marker {
				if m.Owner != read.Owner {
					return m
				}
				return Settled(m, m, end)
			}
			return d
		},
	},
	{
		name: "extensions that do not record", scenario: "horizon, 3", kind: "safety", blindExtends: true,
		d: func() decisions { return ours },
	},
	{
		name: "adopt stops no old set", scenario: "replace two of 3", kind: "safety", budget: &budget{adopts: 1, grants: 2, proxyRestarts: 1},
		d: func() decisions {
			d := ours
			d.plan = func(s []Set, m []Member) (Plan, error) {
				// The plan of a layout that keeps enough members, whatever it keeps.
				plan := Plan{Write: make([]bool, len(m)), Wait: make([]bool, len(m))}
				for i, x := range m {
					plan.Write[i] = true
					plan.Wait[i] = !x.Record.Present || x.Record.Epoch != 1
				}
				return plan, nil
			}
			return d
		},
	},
}

func scenarioNamed(t *testing.T, name string) scenario {
	for _, s := range scenarios {
		if s.name == name {
			return s.scenario
		}
	}
	t.Fatalf("no scenario %q", name)
	return scenario{}
}

// TestModel explores every scenario with the package's decisions: no
// violation of safety or liveness in any.
func TestModel(t *testing.T) {
	t.Log("invariants, on every transition: no two holders' validity overlaps; fencing tokens only grow; a proxy of a stray configuration writes no record; a top-up's copy lands only while its lock is held, for no longer than its validity; with horizons, no lock copy outlives its data set's horizon")
	t.Log("liveness, from every state: once faults stop (partitions heal, clocks run true, every adopt is run to its end), every backend of the current set counts for every proxy of it within max_ttl (horizon, short leases: within one short lease)")
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			sc := s.scenario
			if *modelDeep {
				sc.budget = s.deep
			}
			r := newModel(sc, ours).explore(*modelLimit)
			t.Logf("%-18s %s", s.name+":", r)
			if r.violation != "" {
				t.Fatalf("%s", r)
			}
			if sc.horizons && r.lowered == 0 {
				t.Fatal("no wait was ever settled by horizons: the rule is not exercised")
			}
		})
	}
}

// TestModelNegativeControls explores scenarios with a bug seeded in one
// decision: each must be found, or the checker proves nothing.
func TestModelNegativeControls(t *testing.T) {
	for _, c := range controls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := scenarioNamed(t, c.scenario)
			if c.budget != nil {
				s.budget = *c.budget
			}
			s.fills, s.blindExtends = c.fills, c.blindExtends
			r := newModel(s, c.d()).explore(*modelLimit)
			if r.kind != c.kind {
				t.Fatalf("%s: want a %s violation, got %s", c.name, c.kind, r)
			}
			t.Logf("%s (scenario %s): found, as it must, %s", c.name, c.scenario, r)
		})
	}
}
