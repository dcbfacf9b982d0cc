package admit

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// A model of lockproxy deployments small enough to explore every
// interleaving of: backends that hold one lock key, their set records and
// quarantine markers, proxies that greet them, count their votes, record
// their set on them, re-seed their fencing counters and take, extend and
// release the lock, and an operator who runs lockproxy adopt. Faults:
// restarts without persistence, failovers to a replica that missed
// writes, partitions between a proxy and a backend, clocks that run fast,
// proxy restarts (with the same configuration or the next epoch's), an
// adopt that stops halfway. Time moves in ticks; max_ttl, every lock's TTL
// and every quarantine, is scenario.ttl ticks, and there is no drift.
//
// Top-ups and refills (quorum/topup.go, docs/design/topups.md) are copies
// of a held lock queued on its proxy's pipe to a backend that lacks it,
// each landing later, in the pipe's order: a release or extension sent
// after it on that pipe finds it landed. Their invariants, checked where a
// copy lands: it is of a lock still held, and it lasts no longer than the
// lock's validity.
//
// The lease horizon (horizon.go, docs/design/horizon.md), in the
// scenarios that record it: every lock script raises its member's horizon
// to the expiry it gives; every proxy's read of the records ends a lost
// member's wait (restart, emptied, failover) once enough witnesses answer,
// when the longest of their horizons has passed (Settle, Settled). Leases
// then are short (1 tick) or long (max_ttl); a proof is written in its
// read's step, or (lateProofs) any time later. Its invariant, on every
// transition: no lock copy outlives its data set's horizon.
//
// Every decision about which backends count is the package's own
// function, called as quorum calls it (the decisions field, which the
// negative controls replace); what runs on a backend (the lock script and
// its set check, the greeting's marker, adopt's writes) is written here
// as lua/ does it, and quorum's tests compare the two on real
// redis-servers.
//
// The explorer checks, on every transition, that no two holders' validity
// overlaps, that fencing tokens only grow, and that a proxy of a stray
// configuration writes no record; and, from every state reached, that
// once faults stop (partitions heal, clocks run true, an adopt that
// stopped is run again), every backend of the current set counts for every
// proxy of the current configuration within max_ttl.

// scenario is a deployment, its history's bounds and its faults' budget.
type scenario struct {
	name     string
	backends int     // the real backends, 0..backends-1
	sets     [][]int // the members of epoch 1, 2, ...: sets[e-1]
	initial  int     // the epoch whose record the backends carry at the start
	adopts   []int   // the epochs the operator adopts, in turn
	proxies  []int   // each proxy's configuration at the start: an epoch, or stray
	// stray is the list of a proxy started by mistake with strayEpoch:
	// real backends, and others (>= backends) that do not answer.
	stray      []int
	strayEpoch int
	ttl        int // max_ttl in ticks
	horizon    int // the last tick explored, with fencing (whose tokens grow with time)
	fencing    bool
	// persist: the backends persist every write, and restart quarantine is
	// off; a restart keeps the data set.
	persist bool
	// skew is how far each proxy's clock is behind, in the units of the
	// fencing tokens' clock floor (4 a tick).
	skew []int
	// dead are backends that never answer anyone (a host lost for good).
	dead []int
	// fills is how top-ups' copies are sent: as quorum sends them, or a
	// negative control's bug.
	fills fillRule
	// horizons: every lock script records its member's lease horizon, and
	// every proxy's read of the records ends a lost member's wait by the
	// horizons its witnesses answer (horizon.go, docs/design/horizon.md);
	// else nothing records one and every wait is the full one, as before.
	// leases are the TTLs (ticks) grants and extensions pick from: none,
	// max_ttl alone.
	horizons bool
	leases   []int
	// wake is how many ticks after faults stop every member must count
	// (0: max_ttl).
	wake int
	// blindExtends: extensions do not raise the horizon (a negative
	// control's bug).
	blindExtends bool
	// lateProofs: a proof is written some time after its read, as
	// lua/settle.lua runs a round trip later, not in the read's step.
	lateProofs bool
	budget     budget
}

// fillRule is how a top-up's copies are sent (topup.go).
type fillRule uint8

const (
	// fillsInOrder: in the key's send order, with the validity left.
	fillsInOrder fillRule = iota
	// fillsOutOfOrder: a command that ends the lock may pass a copy queued
	// before it (a command built without its key, PEXPIRE's defect).
	fillsOutOfOrder
	// fillsWholeTTL: a copy with the lock's whole TTL, not the validity
	// it has left.
	fillsWholeTTL
)

// budget bounds each kind of event in one history.
type budget struct {
	restarts, failovers, cuts, clocks, proxyRestarts, adopts, grants, extends uint8
	// aliases are DNS changes that make one backend's address reach
	// another's server; fills are top-ups (or refills) of a held lock
	// onto a backend that lacks it, queued on the holder's proxy's pipe
	// (each lands at a time of its own, unbudgeted).
	aliases, fills uint8
	// flushes empty a backend's data set while the proxies stay connected
	// (FLUSHALL).
	flushes uint8
}

// decisions are the functions the model decides with: the package's own,
// or a negative control's mutation of one.
type decisions struct {
	claims    func(Set, []View, bool) ([]int, bool)
	counts    func(Relation, bool, bool, bool) bool
	mark      func(Marker, string, int64, int64, int64, bool) Marker
	plan      func([]Set, []Member) (Plan, error)
	seed      func(int, int, int) (bool, bool)
	duplicate func([]string, int, string) int
	settle    func(int, int, []int64) (int64, bool)
	settled   func(m, read Marker, end int64) Marker
	witness   func(rel Relation, marked, waiting, clockOff bool) bool
}

var ours = decisions{Claims, Counts, Mark, PlanAdopt, Seed, Duplicate, Settle, Settled, witness}

// witness is the engine's rule for whose answer to a read of the records
// is a witness of a lost member's horizon (quorum/members.go): a member
// whose record, marked, names the set, with no wait of its own (its
// horizon is then complete, by induction) and a clock trusted.
func witness(rel Relation, marked, waiting, clockOff bool) bool {
	return rel == Ours && marked && !waiting && !clockOff
}

const (
	maxB = 6 // backends, the stray's phantoms included
	maxP = 3 // proxies
	maxH = 3 // lock values: holders and attempts in flight
	anon = 255
)

// bdata is a backend's data set.
type bdata struct {
	mOwner  uint8 // the marker's run_id (an incarnation), 0 without a marker
	mReason uint8
	mUntil  int8
	rec     uint8 // the record, an index into model.recs; 0 none
	holder  uint8 // the lock's value: 1+slot, anon, 0 free
	exp     int8
	counter uint8 // the fencing counter
	seed    uint8 // the incarnation whose counter was re-seeded
	// hz is the lease horizon ({lockproxy}:horizon): the latest expiry
	// a lock script recorded, relative to now like exp, 0 none.
	hz int8
}

type bstate struct {
	inc      uint8 // the process: its run_id
	upAt     int8  // when it started
	promoted bool
	clockOff bool
	healedAt int8 // when its clock last ran true again
	data     bdata
	replica  bdata // what its replica holds
}

// view is a proxy's node: what its greeting and refreshes read.
type view struct {
	up      bool
	refused bool // a lock script's set check refused its set since
	seeded  bool
	srv     uint8 // the server (1+index) it reached last, which it claims while down too
	inc     uint8
	until   int8
	upAt    int8
	rec     uint8
	// fill is the copy of lock value fill (1+slot) queued on this pipe by
	// a top-up, lasting fillExp ticks; staleFill once its lock was
	// released behind it (fillsOutOfOrder); 0 none. A connection dropped
	// drops it (greet makes the view anew).
	fill    uint8
	fillExp int8
}

// staleFill marks a queued copy whose lock's release, sent after it, ran
// first (fillsOutOfOrder).
const staleFill = 254

type pstate struct {
	cfg        uint8 // 0: stopped; an epoch; or the stray configuration
	superseded bool  // it has seen another set's record (admit.Claims)
	views      [maxB]view
	proof      proof
}

// proof is a horizon's proof that a proxy read and has yet to write
// (scenario.lateProofs): member b-1 may count in end ticks; its marker,
// when read, named process inc, for reason, ending in until; stale once
// it was written since (ticks are too coarse to tell two markers apart by
// their ends, which the backend's milliseconds do). b 0: none.
type proof struct {
	b, inc, reason uint8
	end, until     int8
	stale          bool
}

// read is the marker as the proof's read found it, unlike any written
// since.
func (pr proof) read() Marker {
	m := marker(bdata{mOwner: pr.inc, mUntil: pr.until, mReason: pr.reason})
	if pr.stale {
		m.Until = -1
	}
	return m
}

// rewrote makes stale the proofs in flight for server s, whose marker
// was just written.
func (m *model) rewrote(w *world, s int) {
	for p := range w.p {
		if pr := &w.p[p].proof; pr.b != 0 && w.server(int(pr.b)-1) == s {
			pr.stale = true
		}
	}
}

type holderState struct {
	state uint8 // 0 free, 2 held
	end   int8
	token uint8
	proxy uint8
}

type adoptState struct {
	phase   uint8 // 0 idle, 1 first pass, 3 its check, 2 second pass
	retries uint8 // first passes made again after the check
	next    uint8 // index into scenario.adopts of the run to make
	step    uint8
	write   uint8 // by position in the list
	wait    uint8
	read    [maxB]uint8
}

// world is one state. It holds only one-byte fields, so that its memory is
// its identity.
type world struct {
	now      int8
	maxToken uint8
	srv      [maxB]uint8 // the server (1+index) each address reaches; 0: its own
	cut      [maxP]uint8 // partitions: bit b, proxy p cannot reach backend b
	b        [maxB]bstate
	p        [maxP]pstate
	h        [maxH]holderState
	adopt    adoptState
	used     budget
}

// model is a scenario prepared for exploration.
type model struct {
	scenario
	d      decisions
	stray  uint8    // the stray's configuration number
	recs   []Record // by record index
	cfgSet []Set    // by configuration
	lists  [][]int  // by configuration
	// classes are the backends that no list tells apart (each list has all
	// of them or none), which the exploration treats as one up to order.
	classes [][]int
	// lowered counts the markers a horizon's proof lowered, quiet runs
	// included: that the rule is exercised at all.
	lowered int
}

func newModel(s scenario, d decisions) *model {
	m := &model{scenario: s, d: d, recs: []Record{{}}, cfgSet: []Set{{}}, lists: [][]int{nil}}
	add := func(set Set, list []int) {
		m.cfgSet, m.lists = append(m.cfgSet, set), append(m.lists, list)
		m.recs = append(m.recs, Final(set), PendingFor(set, false), PendingFor(set, true))
	}
	names := func(list []int) string {
		var n []string
		for _, b := range list {
			n = append(n, addr(b))
		}
		slices.Sort(n)
		return strings.Join(n, ",")
	}
	for e, list := range s.sets {
		add(Set{Epoch: e + 1, N: len(list), Fingerprint: fmt.Sprintf("s%d", e+1), Slots: "-", Members: names(list)}, list)
	}
	m.stray = uint8(len(m.cfgSet))
	if s.stray != nil {
		add(Set{Epoch: s.strayEpoch, N: len(s.stray), Fingerprint: "stray", Slots: "-", Members: names(s.stray)}, s.stray)
	}
	bySignature := map[string][]int{}
	var order []string
	for b := range s.backends {
		var sig strings.Builder
		for _, list := range m.lists[1:] {
			fmt.Fprint(&sig, slices.Contains(list, b), ",")
		}
		if _, ok := bySignature[sig.String()]; !ok {
			order = append(order, sig.String())
		}
		bySignature[sig.String()] = append(bySignature[sig.String()], b)
	}
	for _, sig := range order {
		m.classes = append(m.classes, bySignature[sig])
	}
	return m
}

// same is 1 for the process inc, 0 for none, 2 for another.
func same(x, inc uint8) uint8 {
	switch x {
	case 0:
		return 0
	case inc:
		return 1
	}
	return 2
}

// column is what a state says of one backend.
type column struct {
	status uint8
	srv    uint8
	b      bstate
	views  [maxP]view
	cut    [maxP]uint8
}

// canonical is w with the backends of each class in a fixed order (of
// what each holds and what the proxies know of it), so that states that
// differ only by which of two interchangeable backends is which are
// explored once. Not while adopt writes: it goes through them in order.
func (m *model) canonical(w *world) world {
	c := *w
	if !m.fencing {
		c.now = 0 // time is relative: the same state at another tick is the same
	}
	// Which process a server runs matters only as "the one the marker, the
	// re-seed mark and a proxy's connection name, or another": a connection
	// that is down is greeted afresh before it is used (it keeps only the
	// server it claims, where addresses can move), and a promotion matters
	// only until the marker names the new process.
	for p := range c.p {
		if pr := &c.p[p].proof; pr.b != 0 {
			pr.inc = same(pr.inc, w.b[w.server(int(pr.b)-1)].inc)
		}
		for a := range m.backends {
			v := &c.p[p].views[a]
			switch {
			case v.srv == 0:
				*v = view{}
			case !v.up && m.budget.aliases == 0:
				*v = view{}
			case !v.up:
				*v = view{srv: v.srv, inc: same(v.inc, w.b[v.srv-1].inc)}
			default:
				v.inc = same(v.inc, w.b[v.srv-1].inc)
			}
		}
	}
	for b := range m.backends {
		bs := &c.b[b]
		for _, d := range []*bdata{&bs.data, &bs.replica} {
			d.mOwner = same(d.mOwner, bs.inc)
			d.seed = same(d.seed, bs.inc)
			if !m.horizons || d.mUntil == 0 {
				d.mReason = 0 // shown, never decided by but by a horizon's proof
			}
		}
		bs.inc = 1
		if bs.data.mOwner == 1 {
			bs.promoted = false
		}
		if w.used.failovers == m.budget.failovers {
			bs.replica = bdata{} // nobody will be promoted
		}
	}
	src := c
	var posOf [maxB]int
	for b := range posOf {
		posOf[b] = -1
	}
	if src.adopt.phase != 0 {
		for i, b := range m.lists[m.adopts[src.adopt.next]] {
			posOf[b] = i
		}
	}
	// Adopt goes through its list in order: a backend it wrote, the one it
	// writes next and those after are told apart. Status only grows with
	// the position, so sorting by it first keeps each where it is.
	status := func(b int) uint8 {
		switch pos := posOf[b]; {
		case pos < 0:
			return 3
		case pos < int(src.adopt.step):
			return 0
		case pos == int(src.adopt.step):
			return 1
		}
		return 2
	}
	var columns [maxB]column
	for b := range m.backends {
		columns[b] = column{status: status(b), b: src.b[b], srv: src.srv[b]}
		for p := range src.p {
			columns[b].views[p] = src.p[p].views[b]
			columns[b].cut[p] = src.cut[p] >> b & 1
		}
	}
	bytes := func(c *column) string {
		return unsafe.String((*byte)(unsafe.Pointer(c)), unsafe.Sizeof(*c))
	}
	// perm[from] is where each backend goes; servers named by number (an
	// address's server, a connection's) are renamed alike.
	var perm [maxB]int
	for b := range perm {
		perm[b] = b
	}
	var sorted [maxB]int
	for _, class := range m.classes {
		if len(class) < 2 {
			continue
		}
		copy(sorted[:], class)
		slices.SortFunc(sorted[:len(class)], func(a, b int) int { return strings.Compare(bytes(&columns[a]), bytes(&columns[b])) })
		for i, to := range class {
			perm[sorted[i]] = to
		}
	}
	rename := func(srv uint8) uint8 {
		if srv == 0 {
			return 0
		}
		return uint8(perm[srv-1] + 1)
	}
	for from := range m.backends {
		to := perm[from]
		c.b[to] = src.b[from]
		c.srv[to] = rename(src.srv[from])
		for p := range src.p {
			v := src.p[p].views[from]
			v.srv = rename(v.srv)
			c.p[p].views[to] = v
			if src.p[p].proof.b == uint8(from+1) {
				c.p[p].proof.b = uint8(to + 1)
			}
			c.cut[p] = c.cut[p]&^(1<<to) | (src.cut[p]>>from&1)<<to
		}
		if f, t := posOf[from], posOf[to]; f >= 0 {
			a := &c.adopt
			a.read[t] = src.adopt.read[f]
			a.write = a.write&^(1<<t) | (src.adopt.write>>f&1)<<t
			a.wait = a.wait&^(1<<t) | (src.adopt.wait>>f&1)<<t
		}
	}
	return c
}

// addr is backend b's address, as sets list their members.
func addr(b int) string { return fmt.Sprintf("b%d", b) }

// recOf is the record index of configuration c's record.
func recOf(c uint8, pending, wait bool) uint8 {
	r := 1 + (c-1)*3
	if pending {
		r++
		if wait {
			r++
		}
	}
	return r
}

func (m *model) start() world {
	var w world
	for b := range m.backends {
		w.b[b] = bstate{inc: 1, upAt: m.long(), healedAt: m.long()}
	}
	// The deployment's backends carry its record and their markers; the
	// others are servers lockproxy never touched, with neither.
	for _, b := range m.sets[m.initial-1] {
		w.b[b].data.rec = recOf(uint8(m.initial), false, false)
		w.b[b].data.mOwner = 1
		w.b[b].data.seed = 1
	}
	for b := range m.backends {
		w.b[b].replica = w.b[b].data
	}
	for p, c := range m.proxies {
		w.p[p].cfg = uint8(c)
	}
	m.redial(&w)
	return w
}

// Actions.
const (
	aTick uint8 = iota
	aAcquire
	aRelease
	aExtend
	aRestart
	aFailover
	aReplicate
	aCut
	aHeal
	aClockOff
	aClockHeal
	aProxyRestart
	aAdoptStart
	aAdoptStep
	aAdoptCrash
	aAlias
	aUnalias
	aFill // a top-up queues a copy
	aFlush
	aLand  // a queued copy lands
	aProve // a proof read earlier is written (lateProofs)
)

var actionNames = [...]string{"tick", "acquire", "release", "extend",
	"restart", "failover", "replicate", "cut", "heal", "clock-off", "clock-heal", "proxy-restart", "adopt-start", "adopt-step", "adopt-crash", "alias", "unalias", "fill", "flush", "land", "prove"}

// action is one event; after it, the proxies read the records in index
// order, or the other way round with reverse: which one claims a record
// first is a race. lease is the TTL of a grant or an extension.
type action struct{ kind, p, b, x, reverse, lease uint8 }

func (a action) String() string {
	order := ""
	if a.lease != 0 {
		order = fmt.Sprintf(", for %d ticks", a.lease)
	}
	if a.reverse != 0 {
		order += ", proxies read the other way round"
	}
	return fmt.Sprintf("%s(p%d b%d x%d%s)", actionNames[a.kind], a.p, a.b, a.x, order)
}

// leases are the TTLs a grant or an extension may give, in ticks.
func (m *model) leases() []int {
	if m.scenario.leases == nil {
		return []int{m.ttl}
	}
	return m.scenario.leases
}

// record is a lock script raising d's horizon to the expiry it gave,
// in the same script.
func (m *model) record(d *bdata, exp int8) {
	if m.horizons {
		d.hz = max(d.hz, exp)
	}
}

// q is the restart quarantine; qFailover that of a failover, which is
// never off.
func (m *model) q() int64 {
	if m.persist {
		return 0
	}
	return int64(m.ttl)
}

func (m *model) qFailover() int64 { return int64(m.ttl) }

// floor is proxy p's clock as a fencing token's floor.
func (m *model) floor(w *world, p int) uint8 {
	f := int(w.now) * 4
	if p < len(m.skew) {
		f -= m.skew[p]
	}
	return uint8(max(f, 0))
}

// long is a time longer ago than any wait: times are kept relative to now,
// and all such are one.
func (m *model) long() int8 { return int8(-m.ttl - 1) }

// tick moves time on: every time kept is relative to now, what expires
// does, and what lies further back than any wait is "long ago".
func (m *model) tick(w *world) {
	w.now++
	back := func(t *int8, floor int8) { *t = max(*t-1, floor) }
	for s := range w.h {
		if w.h[s].state == 2 {
			if back(&w.h[s].end, 0); w.h[s].end == 0 {
				anonymize(w, uint8(s))
			}
		}
	}
	for b := range m.backends {
		bs := &w.b[b]
		back(&bs.upAt, m.long())
		back(&bs.healedAt, m.long())
		for _, d := range []*bdata{&bs.data, &bs.replica} {
			back(&d.mUntil, 0)
			back(&d.hz, 0)
			if d.holder != 0 {
				if back(&d.exp, 0); d.exp == 0 {
					d.holder = 0
				}
			}
		}
		for p := range w.p {
			if b == 0 {
				back(&w.p[p].proof.end, 0)
				back(&w.p[p].proof.until, 0)
			}
			v := &w.p[p].views[b]
			back(&v.until, 0)
			back(&v.upAt, m.long())
			if v.fill != 0 {
				// A copy with no lease left is not sent (topUpLeast).
				if back(&v.fillExp, 0); v.fillExp == 0 {
					v.fill = 0
				}
			}
		}
	}
}

func (m *model) cutOff(w *world, p, b int) bool {
	return w.cut[p]&(1<<b) != 0 || slices.Contains(m.dead, b)
}

func (m *model) real(b int) bool { return b < m.backends }

// server is the server that address a reaches.
func (w *world) server(a int) int {
	if w.srv[a] != 0 {
		return int(w.srv[a]) - 1
	}
	return a
}

// at is the server that address a reaches.
func (w *world) at(a int) *bstate { return &w.b[w.server(a)] }

// standing decides whether backend b's vote counts for proxy p now, as
// quorum's node does.
func (m *model) standing(w *world, p, b int) bool {
	v := w.p[p].views[b]
	if !v.up {
		return false
	}
	rel := Relate(m.cfgSet[w.p[p].cfg], m.recs[v.rec])
	if v.refused {
		rel = Other
	}
	quarantined := m.quarantined(w, v)
	bs := w.at(b)
	clockOff := bs.clockOff || -int(bs.healedAt) < m.ttl
	return m.d.counts(rel, quarantined, clockOff, m.fencing && !v.seeded)
}

func (m *model) quarantined(w *world, v view) bool {
	// With horizons, the uptime quarantine is dropped where the marker
	// speaks (always, once greeted): it is the same loss, and a proof that
	// lowers the marker ends it.
	q := m.q()
	if m.horizons {
		q = 0
	}
	return Left(time.Duration(-v.upAt), time.Duration(q), time.Duration(v.until)) > 0
}

var reasons = []string{"", ReasonRestart, ReasonFailover, ReasonUnmarked, ReasonEpoch}

func reasonCode(r string) uint8 {
	for i, s := range reasons {
		if s == r {
			return uint8(i)
		}
	}
	panic("reason " + r)
}

// runIDs names the processes (incarnations) as run_ids.
var runIDs = func() (ids [256]string) {
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}()

func runID(inc uint8) string { return runIDs[inc] }

func marker(d bdata) Marker {
	if d.mOwner == 0 {
		return Marker{}
	}
	return Marker{Present: true, Owner: runID(d.mOwner), Until: int64(d.mUntil), Reason: reasons[d.mReason]}
}

func setMarker(d *bdata, mk Marker, inc uint8) {
	if mk.Owner != runID(inc) {
		panic("a marker names another process than the one that wrote it")
	}
	d.mOwner, d.mUntil, d.mReason = inc, int8(mk.Until), reasonCode(mk.Reason)
}

// identity is lua/identity.lua on backend b: the marker's greeting.
func (m *model) identity(w *world, b int) {
	bs := &w.b[b]
	before := marker(bs.data)
	mk := m.d.mark(before, runID(bs.inc), 0, m.q(), m.qFailover(), bs.promoted)
	if mk != before {
		m.rewrote(w, b)
	}
	setMarker(&bs.data, mk, bs.inc)
}

// serverID names process inc of server srv (1+index) as Duplicate
// compares them: never "", and cheap (greetings are most of the work).
func serverID(srv, inc uint8) string { return string([]byte{srv, inc}) }

func (m *model) greet(w *world, p, a int) {
	s := w.server(a)
	bs := &w.b[s]
	// One server, one vote: a server another address of the list claims
	// refuses this one (quorum's servers.claim).
	ps := &w.p[p]
	list := m.lists[ps.cfg]
	claimed := make([]string, len(list))
	me := -1
	for i, c := range list {
		if c == a {
			me = i
		}
		if m.real(c) && ps.views[c].srv != 0 {
			claimed[i] = serverID(ps.views[c].srv, ps.views[c].inc)
		}
	}
	if m.d.duplicate(claimed, me, serverID(uint8(s+1), bs.inc)) >= 0 {
		return
	}
	m.identity(w, s)
	ps.views[a] = view{up: true, srv: uint8(s + 1), inc: bs.inc, until: bs.data.mUntil, upAt: bs.upAt, rec: bs.data.rec, seeded: bs.data.seed == bs.inc}
}

// down drops every proxy's connection to b, and each redials and greets it
// at once where it can: a proxy redials a lost backend within about a
// second, well within a tick.
func (m *model) down(w *world, s int) {
	for p := range w.p {
		for a := range m.backends {
			if w.server(a) == s {
				w.p[p].views[a].up = false
			}
		}
	}
	m.redial(w)
}

// redial greets every member that a running proxy reaches and is not
// connected to.
func (m *model) redial(w *world) {
	for p := range m.proxies {
		ps := &w.p[p]
		if ps.cfg == 0 {
			continue
		}
		for _, b := range m.lists[ps.cfg] {
			if m.real(b) && !ps.views[b].up && !m.cutOff(w, p, b) {
				m.greet(w, p, b)
			}
		}
	}
}

// anonymize gives the copies of lock value slot+1 to nobody in particular:
// its holder's time is over, its copies stay until they expire.
func anonymize(w *world, slot uint8) {
	for b := range w.b {
		for _, d := range []*bdata{&w.b[b].data, &w.b[b].replica} {
			if d.holder == slot+1 {
				d.holder = anon
			}
		}
	}
	w.h[slot] = holderState{}
}

// refresh is a proxy's reading of every member's record, about every
// second, and the records it writes then (Claims).
func (m *model) refresh(w *world, p int) string {
	ps := &w.p[p]
	list := m.lists[ps.cfg]
	views := make([]View, len(list))
	for i, b := range list {
		if !m.real(b) || !ps.views[b].up {
			continue
		}
		// The round runs the identity script, which rewrites a marker that
		// no longer names the process (its data set was emptied).
		if bs := w.at(b); bs.data.mOwner != bs.inc {
			m.identity(w, w.server(b))
		}
		d := w.at(b).data
		v := &ps.views[b]
		v.rec, v.until, v.refused, v.seeded = d.rec, d.mUntil, false, d.seed == v.inc
		views[i] = View{Answered: true, Record: m.recs[v.rec], Quarantined: m.quarantined(w, *v)}
	}
	if m.horizons {
		m.settleByHorizons(w, p, views)
	}
	// The claims: each a compare-and-set of the record read (lua/claim.lua),
	// made in the same round here; a write between the read and it fails it.
	claims, superseded := m.d.claims(m.cfgSet[ps.cfg], views, ps.superseded)
	ps.superseded = superseded
	for _, i := range claims {
		b := list[i]
		if ps.cfg == m.stray {
			return "a proxy of a stray configuration wrote its record"
		}
		w.at(b).data.rec = recOf(ps.cfg, false, false)
		ps.views[b].rec = w.at(b).data.rec
	}
	return ""
}

// settleByHorizons is the rest of proxy p's read of the records (views,
// as read): for each member that waits, the others that answered as
// witnesses tell their remaining horizons, and where enough answered
// (Settle) the longest of them, from the read, ends every lease the member
// may have lost: the proof lowers its marker (Settled, lua/settle.lua),
// for every proxy. The read is one step: no vote is in flight across it
// (the engine reads D after the loss for that, design §1.6).
func (m *model) settleByHorizons(w *world, p int, views []View) {
	ps := &w.p[p]
	set := m.cfgSet[ps.cfg]
	list := m.lists[ps.cfg]
	for i, b := range list {
		if !views[i].Answered || w.at(b).data.mUntil == 0 {
			continue
		}
		var remaining []int64
		for j, x := range list {
			if j == i || !views[j].Answered {
				continue
			}
			xs, rec := w.at(x), views[j].Record
			waiting := xs.data.mOwner != xs.inc || xs.data.mUntil > 0
			clockOff := xs.clockOff || -int(xs.healedAt) < m.ttl
			if m.d.witness(Relate(set, rec), rec.Horizon, waiting, clockOff) {
				remaining = append(remaining, int64(xs.data.hz))
			}
		}
		longest, ok := m.d.settle(set.N, set.Quorum(), remaining)
		if !ok {
			continue
		}
		bs := w.at(b)
		before := marker(bs.data)
		after := m.d.settled(before, before, longest)
		if after == before {
			continue
		}
		if m.lateProofs {
			// Written a round trip later; the proxy reads again only
			// once it is.
			if ps.proof.b == 0 {
				ps.proof = proof{b: uint8(b + 1), inc: bs.inc, reason: bs.data.mReason, end: int8(longest), until: bs.data.mUntil}
			}
			return
		}
		m.lowered++
		m.rewrote(w, w.server(b))
		setMarker(&bs.data, after, bs.inc)
		ps.views[b].until = bs.data.mUntil
	}
}

// prove writes proxy p's proof (lua/settle.lua), as Settled decides.
func (m *model) prove(w *world, p int) {
	pr := w.p[p].proof
	w.p[p].proof = proof{}
	b := int(pr.b) - 1
	if !w.p[p].views[b].up || m.cutOff(w, p, b) {
		return // the write is lost; the next read proves again
	}
	d := &w.at(b).data
	before := marker(*d)
	after := m.d.settled(before, pr.read(), int64(pr.end))
	if after == before {
		return
	}
	m.lowered++
	m.rewrote(w, w.server(b))
	d.mUntil = int8(after.Until) // the owner may be a process gone since (persisted)
	if v := &w.p[p].views[b]; v.inc == w.at(b).inc {
		v.until = d.mUntil
	}
}

// hzCovers checks the horizon's local invariant (design §1.2): on every
// data set, replicas' included, no lock copy outlives the horizon.
func (m *model) hzCovers(w *world) string {
	for b := range m.backends {
		for _, d := range []bdata{w.b[b].data, w.b[b].replica} {
			if d.holder != 0 && d.exp > d.hz {
				return fmt.Sprintf("backend %d holds lock value %d for %d ticks, past its horizon (%d)", b, d.holder, d.exp, d.hz)
			}
		}
	}
	return ""
}

func popcount(x uint8) int { return bits.OnesCount8(x) }

// successors lists the actions enabled in w.
func (m *model) successors(w *world) []action {
	var as []action
	add := func(kind uint8, p, b, x int) {
		as = append(as, action{kind: kind, p: uint8(p), b: uint8(b), x: uint8(x)})
	}
	for p := range m.proxies {
		ps := &w.p[p]
		if ps.cfg == 0 {
			continue
		}

		if w.used.grants < m.budget.grants {
			for s := range w.h {
				if w.h[s].state == 0 {
					for _, l := range m.leases() {
						as = append(as, action{kind: aAcquire, p: uint8(p), x: uint8(s), lease: uint8(l)})
					}
					break
				}
			}
		}
		// A proxy restarts with its configuration, or with the one adopted
		// since (the roll); one started with a list nobody adopted is the
		// stray scenario's.
		if w.used.proxyRestarts < m.budget.proxyRestarts {
			add(aProxyRestart, p, 0, int(ps.cfg))
			if cur := m.current(w); cur != ps.cfg && ps.cfg != m.stray {
				add(aProxyRestart, p, 0, int(cur))
			}
		}
		for b := range m.backends {
			switch {
			case slices.Contains(m.dead, b):
			case m.cutOff(w, p, b):
				add(aHeal, p, b, 0)
			case w.used.cuts < m.budget.cuts:
				add(aCut, p, b, 0)
			}
		}
	}
	for s, h := range w.h {
		if h.state == 2 && w.p[h.proxy].cfg != 0 {
			add(aRelease, 0, 0, s)
			if w.used.extends < m.budget.extends {
				for _, l := range m.leases() {
					as = append(as, action{kind: aExtend, x: uint8(s), lease: uint8(l)})
				}
			}
			if w.used.fills < m.budget.fills {
				for _, b := range m.lists[w.p[h.proxy].cfg] {
					if v := w.p[h.proxy].views[b]; m.real(b) && v.up && v.fill == 0 && !m.cutOff(w, int(h.proxy), b) {
						add(aFill, 0, b, s)
					}
				}
			}
		}
	}
	for p := range m.proxies {
		for b := range m.backends {
			if v := w.p[p].views[b]; v.fill != 0 && v.up && !m.cutOff(w, p, b) {
				add(aLand, p, b, 0)
			}
		}
		if w.p[p].proof.b != 0 {
			add(aProve, p, 0, 0)
		}
	}
	for a := range m.backends {
		switch {
		case w.srv[a] != 0:
			add(aUnalias, 0, a, 0)
		case w.used.aliases < m.budget.aliases:
			for s := range m.backends {
				if s != a {
					add(aAlias, 0, a, s)
				}
			}
		}
	}
	if !m.fencing || int(w.now) < m.horizon {
		add(aTick, 0, 0, 0)
	}
	for b := range m.backends {
		bs := &w.b[b]
		if w.used.restarts < m.budget.restarts {
			add(aRestart, 0, b, 0)
		}
		if w.used.failovers < m.budget.failovers {
			add(aFailover, 0, b, 0)
			if bs.replica != bs.data {
				add(aReplicate, 0, b, 0)
			}
		}
		if bs.clockOff {
			add(aClockHeal, 0, b, 0)
		} else if w.used.clocks < m.budget.clocks {
			add(aClockOff, 0, b, 0)
		}
		if w.used.flushes < m.budget.flushes {
			add(aFlush, 0, b, 0)
		}
	}
	switch {
	case w.adopt.phase != 0:
		add(aAdoptStep, 0, 0, 0)
		add(aAdoptCrash, 0, 0, 0)
	case int(w.adopt.next) < len(m.adopts) && w.used.adopts < m.budget.adopts:
		add(aAdoptStart, 0, 0, 0)
	}
	if len(m.proxies) > 1 {
		for _, a := range as {
			if racy[a.kind] {
				a.reverse = 1
				as = append(as, a)
			}
		}
	}
	return as
}

// racy are the events after which two proxies may both want to record
// their set on a backend: which reads first is explored both ways.
var racy = map[uint8]bool{aRestart: true, aFailover: true, aFlush: true, aAdoptStep: true, aAdoptCrash: true,
	aProxyRestart: true, aHeal: true, aAlias: true, aUnalias: true, aTick: true}

// apply makes action a in w, and what the proxies do by themselves
// within a second of it (settle); it returns a violation of an invariant,
// or "".
func (m *model) apply(w *world, a action) string {
	if why := m.act(w, a); why != "" {
		return why
	}
	if why := m.settle(w, a.reverse != 0); why != "" {
		return why
	}
	if m.horizons {
		return m.hzCovers(w)
	}
	return ""
}

// settle is what every running proxy does by itself, about every second:
// it reads the records again where one does not let a member count, and
// records its set where Claims says so; it re-seeds the fencing counter
// of a member whose quarantine is over.
func (m *model) settle(w *world, reverse bool) string {
	m.redial(w) // a backend refused as another's server is dialled again too
	for i := range m.proxies {
		p := i
		if reverse {
			p = len(m.proxies) - 1 - i
		}
		if w.p[p].cfg == 0 {
			continue
		}
		if why := m.refresh(w, p); why != "" {
			return why
		}
		if !m.fencing {
			continue
		}
		for _, b := range m.lists[w.p[p].cfg] {
			if !m.real(b) || m.cutOff(w, p, b) {
				continue
			}
			if v := w.p[p].views[b]; v.up && !v.seeded && !m.quarantined(w, v) {
				m.reseed(w, p, b)
			}
		}
	}
	return ""
}

func (m *model) act(w *world, a action) string {
	p, b := int(a.p), int(a.b)
	switch a.kind {
	case aTick:
		m.tick(w)
	case aAcquire:
		w.used.grants++
		return m.acquire(w, p, a.x, int8(a.lease))
	case aRelease:
		h := w.h[a.x]
		p := int(h.proxy)
		for _, b := range m.lists[w.p[p].cfg] {
			if !m.real(b) || !w.p[p].views[b].up || m.cutOff(w, p, b) {
				continue
			}
			// A copy queued before the release lands before it, in the
			// key's send order; out of order, it lands after.
			if v := &w.p[p].views[b]; v.fill == a.x+1 && m.fills == fillsOutOfOrder {
				v.fill = staleFill
			} else if why := m.land(w, p, b); why != "" {
				return why
			}
			if w.at(b).data.holder == a.x+1 {
				w.at(b).data.holder, w.at(b).data.exp = 0, 0
			}
		}
		anonymize(w, a.x)
	case aExtend:
		if why := m.extend(w, a.x, int8(a.lease)); why != "" {
			return why
		}
	case aRestart:
		w.used.restarts++
		bs := &w.b[b]
		if m.persist {
			bs.inc, bs.upAt = bs.inc+1, 0 // the data set persisted is loaded again
		} else {
			*bs = bstate{inc: bs.inc + 1, clockOff: bs.clockOff, healedAt: bs.healedAt}
		}
		m.rewrote(w, b)
		m.down(w, b)
	case aFailover:
		w.used.failovers++
		bs := &w.b[b]
		bs.data, bs.inc, bs.promoted, bs.upAt = bs.replica, bs.inc+1, true, m.long()
		m.rewrote(w, b)
		m.down(w, b)
	case aReplicate:
		w.b[b].replica = w.b[b].data
	case aCut:
		w.used.cuts++
		w.cut[p] |= 1 << b
		w.p[p].views[b].up = false
	case aHeal:
		w.cut[p] &^= 1 << b
		m.redial(w)
	case aClockOff:
		w.used.clocks++
		bs := &w.b[b]
		bs.clockOff = true
		bs.data.holder, bs.data.exp = 0, 0 // a clock that ran fast expired it early
	case aClockHeal:
		w.b[b].clockOff, w.b[b].healedAt = false, 0
	case aProxyRestart:
		w.used.proxyRestarts++
		w.p[p] = pstate{cfg: a.x}
		m.redial(w)
	case aAdoptStart:
		w.used.adopts++
		m.adoptStart(w)
	case aAdoptStep:
		if w.adopt.phase == 3 {
			m.adoptVerify(w)
		} else {
			m.adoptStep(w)
		}
	case aAdoptCrash:
		w.adopt = adoptState{next: w.adopt.next}
	case aAlias, aUnalias:
		// A DNS change: the address now reaches another server, or its own
		// again; every connection to it is made anew.
		if a.kind == aAlias {
			w.used.aliases++
			w.srv[b] = a.x + 1
		} else {
			w.srv[b] = 0
		}
		for p := range w.p {
			w.p[p].views[b].up = false
		}
		m.redial(w)
	case aFill:
		w.used.fills++
		m.queueFill(w, a.x, b)
	case aLand:
		return m.land(w, p, b)
	case aProve:
		m.prove(w, p)
	case aFlush:
		w.used.flushes++
		w.b[b].data = bdata{}
		m.rewrote(w, b)
	}
	return ""
}

func (m *model) reseed(w *world, p, n int) {
	ps := &w.p[p]
	if ps.views[n].seeded || !ps.views[n].up {
		return
	}
	list := m.lists[ps.cfg]
	counting := 0
	var high uint8
	for _, b := range list {
		if b == n || !m.real(b) {
			continue
		}
		if m.standing(w, p, b) {
			counting++
		}
		if ps.views[b].up && !m.cutOff(w, p, b) {
			high = max(high, w.at(b).data.counter)
		}
	}
	if ok, _ := m.d.seed(counting, counting, m.cfgSet[ps.cfg].Quorum()); !ok {
		return
	}
	bs := w.at(n)
	bs.data.counter = max(bs.data.counter, high)
	bs.data.seed = bs.inc
	ps.views[n].seeded = true
}

// acquire is proxy p's acquisition, as lock value slot+1: on every member
// the lock script (the set check, SET NX PX, and with fencing the token
// minted, lua/acquire_fenced.lua), then the decision, and with fencing the
// token written back to every holder that minted less. The votes are taken
// in one step: whose votes count is what the model is about, and it
// changes between acquisitions.
func (m *model) acquire(w *world, p int, slot uint8, lease int8) string {
	ps := &w.p[p]
	set := m.cfgSet[ps.cfg]
	list := m.lists[ps.cfg]
	var yes []int
	var token uint8
	for _, b := range list {
		if !m.real(b) || !ps.views[b].up || m.cutOff(w, p, b) {
			continue
		}
		d := &w.at(b).data
		if !Allows(set, m.recs[d.rec]) {
			ps.views[b].refused = true
			continue
		}
		if d.holder != 0 {
			continue
		}
		d.holder, d.exp = slot+1, lease
		m.record(d, lease)
		var minted uint8
		if m.fencing {
			minted = max(d.counter+1, m.floor(w, p))
			d.counter = minted
		}
		if m.standing(w, p, b) {
			yes = append(yes, b)
			token = max(token, minted)
		}
	}
	if len(yes) < set.Quorum() {
		anonymize(w, slot) // no rollback: its copies expire
		return ""
	}
	for s, h := range w.h {
		if h.state == 2 && h.end > 0 {
			return fmt.Sprintf("two holders: proxy %d granted the lock while lock value %d (proxy %d) holds it for %d more ticks", p, s+1, h.proxy, h.end)
		}
	}
	if m.fencing {
		if token <= w.maxToken {
			return fmt.Sprintf("a fencing token went back: %d after %d", token, w.maxToken)
		}
		w.maxToken = token
		for _, b := range yes {
			w.at(b).data.counter = max(w.at(b).data.counter, token)
		}
	}
	w.h[slot] = holderState{state: 2, end: lease, token: token, proxy: uint8(p)}
	return ""
}

// extend is the holder's extension to lease ticks (lua/extend.lua on
// every member, at once).
func (m *model) extend(w *world, slot uint8, lease int8) string {
	w.used.extends++
	h := &w.h[slot]
	p := int(h.proxy)
	ps := &w.p[p]
	yes := 0
	for _, b := range m.lists[ps.cfg] {
		if !m.real(b) || !ps.views[b].up || m.cutOff(w, p, b) {
			continue
		}
		// A copy queued before the extension lands before it.
		if why := m.land(w, p, b); why != "" {
			return why
		}
		d := &w.at(b).data
		if !Allows(m.cfgSet[ps.cfg], m.recs[d.rec]) {
			ps.views[b].refused = true
			continue
		}
		if d.holder != slot+1 {
			continue
		}
		d.exp = lease
		if !m.blindExtends {
			m.record(d, lease)
		}
		if m.standing(w, p, b) {
			yes++
		}
	}
	// A refused extension is rolled back (the lock is lost, and its holder
	// told so); here its holder keeps its validity, more than the engine
	// allows, but no more than it asked for: a shorter lease asked for
	// shortened some of its keys.
	if yes >= m.cfgSet[ps.cfg].Quorum() {
		h.end = lease
	} else {
		h.end = min(h.end, lease)
	}
	return ""
}

// queueFill is a top-up (or a renewal's refill) of held lock value slot+1
// queued on its proxy's pipe to backend b, with the validity the lock has
// left (fillsWholeTTL: its whole TTL).
func (m *model) queueFill(w *world, slot uint8, b int) {
	h := w.h[slot]
	v := &w.p[h.proxy].views[b]
	v.fill, v.fillExp = slot+1, h.end
	if m.fills == fillsWholeTTL {
		v.fillExp = int8(m.ttl)
	}
}

// land is the copy queued on proxy p's pipe to backend b, if any, landing
// (lua/fence_fill.lua, hash_fill.lua): it takes the key where it is free.
// It returns a violation where the copy is of a lock nobody holds (its
// release ran first) or outlives the lock's validity.
func (m *model) land(w *world, p, b int) string {
	v := &w.p[p].views[b]
	fill, exp := v.fill, v.fillExp
	if fill == 0 {
		return ""
	}
	v.fill, v.fillExp = 0, 0
	d := &w.at(b).data
	if !Allows(m.cfgSet[w.p[p].cfg], m.recs[d.rec]) || d.holder != 0 {
		return ""
	}
	if fill == staleFill {
		return fmt.Sprintf("a copy landed on backend %d after its lock's release: it holds the key %d more ticks", b, exp)
	}
	h := w.h[fill-1]
	if h.state != 2 || int(h.proxy) != p {
		return fmt.Sprintf("a copy of lock value %d landed on backend %d, which nobody holds", fill, b)
	}
	if exp > h.end {
		return fmt.Sprintf("a copy of lock value %d landed on backend %d for %d ticks, past the lock's validity (%d)", fill, b, exp, h.end)
	}
	d.holder, d.exp = fill, exp
	m.record(d, exp)
	if m.fencing {
		d.counter = max(d.counter, h.token)
	}
	return ""
}

// adoptStart is lockproxy adopt's reading: it greets every member of the
// epoch it adopts and plans.
func (m *model) adoptStart(w *world) {
	e := uint8(m.adopts[w.adopt.next])
	list := m.lists[e]
	members := make([]Member, len(list))
	seen := map[int]bool{}
	for i, b := range list {
		if seen[w.server(b)] {
			return // two addresses of one server: adopt refuses
		}
		seen[w.server(b)] = true
		m.identity(w, w.server(b))
		members[i] = Member{Addr: addr(b), Record: m.recs[w.at(b).data.rec]}
	}
	plan, err := m.d.plan([]Set{m.cfgSet[e]}, members)
	if err != nil {
		return
	}
	if plan.Done {
		w.adopt.next++
		return
	}
	w.adopt.phase, w.adopt.step, w.adopt.write, w.adopt.wait = 1, 0, 0, 0
	for i, b := range list {
		if plan.Write[i] {
			w.adopt.write |= 1 << i
		}
		if plan.Wait[i] {
			w.adopt.wait |= 1 << i
		}
		w.adopt.read[i] = w.at(b).data.rec
	}
}

// adoptStep is one write of adopt (lua/adopt.lua), followed by WAIT for the
// backend's replicas.
func (m *model) adoptStep(w *world) {
	a := &w.adopt
	e := uint8(m.adopts[a.next])
	list := m.lists[e]
	i := int(a.step)
	b := list[i]
	bs := w.at(b)
	if a.write&(1<<i) != 0 {
		switch a.phase {
		case 1:
			if bs.data.rec != a.read[i] {
				*a = adoptState{next: a.next}
				return
			}
			bs.data.rec = recOf(e, true, a.wait&(1<<i) != 0)
		case 2:
			if rel := Relate(m.cfgSet[e], m.recs[bs.data.rec]); rel != Adopting && rel != Absent {
				*a = adoptState{next: a.next}
				return
			}
			bs.data.rec = recOf(e, false, false)
			if a.wait&(1<<i) != 0 {
				mk := m.d.mark(marker(bs.data), runID(bs.inc), 0, m.q(), m.qFailover(), bs.promoted)
				setMarker(&bs.data, Wait(mk, 0, int64(m.ttl)), bs.inc)
				m.rewrote(w, w.server(b))
			}
		}
		bs.replica = bs.data
	}
	a.step++
	if int(a.step) < len(list) {
		return
	}
	a.step = 0
	if a.phase == 1 {
		a.phase = 3
		return
	}
	a.phase = 0
	a.next++
	a.read, a.write, a.wait = [maxB]uint8{}, 0, 0
}

// adoptVerify is adopt's reading after its first pass: a member that a
// proxy of the old epoch took back meanwhile (it lost the pending record
// and the old set was still established) is written again, and the
// second pass starts only once every member carries the pending record or
// none. Then no quorum of the old set is left, for good.
func (m *model) adoptVerify(w *world) {
	a := &w.adopt
	e := uint8(m.adopts[a.next])
	a.write = 0
	for i, b := range m.lists[e] {
		if rel := Relate(m.cfgSet[e], m.recs[w.at(b).data.rec]); rel != Adopting && rel != Absent {
			a.write |= 1 << i
			a.read[i] = w.at(b).data.rec
		}
	}
	if a.write == 0 {
		// The second pass writes every member that is not final yet.
		for i, b := range m.lists[e] {
			if Relate(m.cfgSet[e], m.recs[w.at(b).data.rec]) != Ours {
				a.write |= 1 << i
			}
		}
		a.phase = 2
		return
	}
	if a.retries++; a.retries > 2 {
		*a = adoptState{next: a.next} // adopt gives up and says so
		return
	}
	a.phase = 1
}

// current is the configuration whose proxies must count every member once
// faults stop: the last epoch adopted to the end, else the initial one.
func (m *model) current(w *world) uint8 {
	e := uint8(m.initial)
	for _, t := range m.adopts[:w.adopt.next] {
		e = uint8(t)
	}
	return e
}

// quiet runs w on with no more faults, and returns why a member of the
// current set does not count for a proxy of it max_ttl later, or "".
func (m *model) quiet(w world) string {
	w.cut = [maxP]uint8{}
	for a := range w.srv {
		if w.srv[a] != 0 {
			m.act(&w, action{kind: aUnalias, b: uint8(a)})
		}
	}
	m.redial(&w)
	for p := range w.p {
		if w.p[p].proof.b != 0 {
			m.prove(&w, p)
		}
	}
	for b := range m.backends {
		if w.b[b].clockOff {
			w.b[b].clockOff, w.b[b].healedAt = false, 0
		}
	}
	// The operator runs again an adopt that stopped, and every one that was
	// to be run; one refused writes nothing, and the deployment stays where
	// it is.
	for runs := 0; ; runs++ {
		if runs > 4*len(m.adopts)+4 {
			return "adopt does not finish"
		}
		if w.adopt.phase != 0 {
			for w.adopt.phase != 0 {
				m.act(&w, action{kind: aAdoptStep})
			}
			continue
		}
		next := w.adopt.next
		if int(next) >= len(m.adopts) {
			break
		}
		m.adoptStart(&w)
		if w.adopt.phase == 0 && w.adopt.next == next {
			break
		}
	}
	cur := m.current(&w)
	// Every backend of a later epoch's set lost its data: the operator runs
	// adopt with the configuration in force, which records it anew (no old
	// set left to stop, nobody waits).
	if int(cur) > 1 && !slices.ContainsFunc(m.lists[cur], func(b int) bool { return w.at(b).data.rec != 0 }) {
		for _, b := range m.lists[cur] {
			m.identity(&w, w.server(b))
			w.at(b).data.rec = recOf(cur, false, false)
		}
	}
	if why := m.settle(&w, false); why != "" {
		return why
	}
	wake := m.ttl
	if m.wake != 0 {
		wake = m.wake
	}
	for range wake {
		if why := m.apply(&w, action{kind: aTick}); why != "" {
			return why
		}
	}
	for p, ps := range w.p {
		if ps.cfg != cur {
			continue
		}
		for _, b := range m.lists[cur] {
			if !m.standing(&w, p, b) {
				v := ps.views[b]
				return fmt.Sprintf("backend %d does not count for proxy %d at tick %d, %d ticks after faults stopped (view: up %v, record %q, marker until %d, up since %d, seeded %v, refused %v)",
					b, p, w.now, wake, v.up, m.recs[v.rec], v.until, v.upAt, v.seeded, v.refused)
			}
		}
	}
	return ""
}

// result is what an exploration found.
type result struct {
	states, transitions int
	violation           string
	kind                string // "safety" or "liveness"
	trace               []string
	elapsed             time.Duration
	lowered             int // markers lowered by a horizon's proof
}

type key [2]uint64

// explore visits every state reachable from the scenario's initial one,
// breadth first, checking the invariants on every transition and liveness
// from every state; it stops at the first violation, with the shortest
// trace to it, or at limit states.
func (m *model) explore(limit int) result {
	start := time.Now()
	seeds := [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	hash := func(w *world) key {
		c := m.canonical(w)
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&c)), unsafe.Sizeof(c))
		return key{maphash.Bytes(seeds[0], raw), maphash.Bytes(seeds[1], raw)}
	}
	type node struct {
		parent int32
		act    action
	}
	init := m.start()
	seen := map[key]int32{hash(&init): 0}
	nodes := []node{{parent: -1}}
	queue := []world{init}
	index := []int32{0}
	head := 0
	res := result{}
	fail := func(at int32, last *action, kind, why string) result {
		res.violation, res.kind = why, kind
		var acts []action
		for i := at; nodes[i].parent >= 0; i = nodes[i].parent {
			acts = append(acts, nodes[i].act)
		}
		if last != nil {
			acts = append([]action{*last}, acts...)
		}
		w := m.start()
		for j := len(acts) - 1; j >= 0; j-- {
			m.apply(&w, acts[j])
			res.trace = append(res.trace, fmt.Sprintf("t%d %s", w.now, acts[j]))
		}
		res.elapsed = time.Since(start)
		return res
	}
	for head < len(queue) {
		w, at := queue[head], index[head]
		head++
		if head > 1<<16 && head > len(queue)/2 {
			queue, index = append(queue[:0], queue[head:]...), append(index[:0], index[head:]...)
			head = 0
		}
		res.states++
		if why := m.quiet(w); why != "" {
			return fail(at, nil, "liveness", why)
		}
		for _, a := range m.successors(&w) {
			next := w
			res.transitions++
			if why := m.apply(&next, a); why != "" {
				return fail(at, &a, "safety", why)
			}
			k := hash(&next)
			if _, ok := seen[k]; ok {
				continue
			}
			if len(seen) >= limit {
				res.violation, res.kind = fmt.Sprintf("more than %d states: raise the limit or lower the scenario's bounds", limit), "bound"
				res.elapsed = time.Since(start)
				return res
			}
			seen[k] = int32(len(nodes))
			nodes = append(nodes, node{parent: at, act: a})
			queue = append(queue, next)
			index = append(index, int32(len(nodes)-1))
		}
	}
	res.elapsed, res.lowered = time.Since(start), m.lowered
	return res
}

func (r result) String() string {
	if r.violation == "" {
		lowered := ""
		if r.lowered != 0 {
			lowered = fmt.Sprintf(", %d waits settled by horizons", r.lowered)
		}
		return fmt.Sprintf("%d states, %d transitions, no violation%s (%v)", r.states, r.transitions, lowered, r.elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s violation after %d states: %s\n  %s", r.kind, r.states, r.violation, strings.Join(r.trace, "\n  "))
}
