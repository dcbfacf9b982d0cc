package admin

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Parse(statusHTML))

const (
	// statusRefresh is how often, in seconds, a browser reloads the page:
	// often enough to watch a failover, seldom enough that an open tab
	// does not add up to load (each view pings every backend once).
	statusRefresh = 5
	// statusLocks bounds the held locks sample, whatever the lister gives.
	statusLocks = 20
	// opsWindow is how far back the operation rates look, taking a sample
	// every opsEvery.
	opsWindow = 10 * time.Second
	opsEvery  = time.Second
)

// heldLockRow is one held lock as a lock listing reports it.
type heldLockRow struct {
	Key   string
	Owner string        // the token a quorum of backends holds
	Left  time.Duration // validity left, as PTTL answers it
	// Present says, per backend of its group in configuration order,
	// whether it holds the key with Owner's token (an undecided key's:
	// whether it holds the key); Addrs names them.
	Present []bool
	Addrs   []string
	// Tokens are, for an undecided key, the values the backends hold.
	Tokens []string
}

// StatusPage is the page at / on the metrics address: what an operator
// looks at first, in any browser, without Prometheus. It is rendered on
// the server, runs no script, and pings every backend once per view
// (backendStates, as /readyz does).
type StatusPage struct {
	groups   *shard.Groups
	sampler  *opsSampler
	embedded bool
	version  string // shown when not empty
	// held lists a sample of held and undecided locks; nil when no
	// listing is wired, and the page says so.
	held func(context.Context) lockSample
	// quorumSeen says, per group, that it has had a quorum since the
	// process started: until then a red banner is the start-up's wait,
	// and the page says that it is expected.
	quorumSeen []atomic.Bool
	log        *slog.Logger
}

// NewStatusPage is the status page of groups, whose operation rates come
// from stats (the proxy's Server.Stats) once Sample runs, and whose sample
// of held locks is the first page of the groups' lock listing. embedded
// and version are shown as they are.
func NewStatusPage(groups *shard.Groups, stats func() proxy.Stats, embedded bool, version string, log *slog.Logger) *StatusPage {
	return &StatusPage{groups: groups, sampler: newOpsSampler(stats), embedded: embedded, version: version, held: heldSample(groups),
		quorumSeen: make([]atomic.Bool, len(groups.Engines())), log: log}
}

// Sample takes the samples of the operation counters that the page's
// rates are computed from, and notes which groups have had a quorum,
// every opsEvery until ctx ends: a quorum had between two views still ends
// the start-up.
func (p *StatusPage) Sample(ctx context.Context) { p.sampler.run(ctx, p.noteQuorum) }

// noteQuorum notes the groups that have a quorum now.
func (p *StatusPage) noteQuorum() {
	for i, e := range p.groups.Engines() {
		if e.QuorumAvailable() && i < len(p.quorumSeen) {
			p.quorumSeen[i].Store(true)
		}
	}
}

func (p *StatusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var buf bytes.Buffer
	if err := statusTemplate.Execute(&buf, p.view(ctx, time.Now())); err != nil {
		p.log.Error("status page", "error", err)
		http.Error(w, "status page: internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Keys and tokens are client data: even if one slipped through the
	// template's escaping, the browser would run no script and load nothing.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(buf.Bytes())
}

// statusView is what the template shows, every value formatted.
type statusView struct {
	Version, BackendSet, Generated string
	Refresh                        int
	Embedded, HasQuorum            bool
	Quorum, Counting               int
	Backends                       []backendView
	Window                         string // "" while there is no rate yet
	Ops                            []opView
	Total                          string
	// Startup are the notes that a group's missing quorum is the wait
	// of a start, with when it ends.
	Startup       []startupView
	Listing, More bool
	Locks         []heldLockView
	// ListError is why the listing failed; Undecided the keys no quorum
	// decides, which UndecidedText counts; Skipped names the backends the
	// listing could not scan. Each "" or nil when there is none.
	ListError, UndecidedText, Skipped string
	Undecided                         []heldLockView
	// Groups are the shard groups, when there are several.
	Groups []groupView
}

type backendView struct {
	Addr, State, RunID, Server, Latency, Error, QuarantineLeft, Clock string
	WaitingFor                                                        string // what it waits for, in words
	Group                                                             int
}

type groupView struct {
	Index, Size, Quorum, Counting int
	Slots                         string
	HasQuorum                     bool
}

// startupView is a group's wait at start: quorum expected In, At a time
// of day; Init when a backend waits for want of any marker, where
// lockproxy init would have spared the wait. Group is -1 with one group.
type startupView struct {
	Group  int
	In, At string
	Init   bool
}

type opView struct {
	Op, Rate string
	Outcomes []outcomeView
}

type outcomeView struct{ Name, Rate string }

type heldLockView struct {
	Key, Owner, Left string
	Present          []presenceView
	Count            int
}

type presenceView struct {
	Addr string
	Held bool
}

func (p *StatusPage) view(ctx context.Context, now time.Time) statusView {
	states, counting, ready, groups := groupStates(ctx, p.groups)
	v := statusView{
		Version: p.version, BackendSet: p.groups.BackendSet(), Generated: now.UTC().Format("2006-01-02 15:04:05 UTC"),
		Refresh: statusRefresh, Embedded: p.embedded, Quorum: p.groups.Quorum(), Counting: counting,
		HasQuorum: ready,
	}
	for i, g := range groups {
		size := len(p.groups.Engines()[i].Backends())
		v.Groups = append(v.Groups, groupView{Index: i, Size: size, Quorum: g.Quorum, Counting: g.Counting, Slots: g.Slots, HasQuorum: g.Counting >= g.Quorum})
	}
	// backendStates gives a clock rate only to a backend it refuses for
	// it; the page shows every measured one.
	known := p.groups.Backends()
	for i, s := range states {
		rate := s.ClockRate
		if rate == 0 && i < len(known) {
			rate = known[i].ClockRate
		}
		v.Backends = append(v.Backends, backendViewOf(s, rate))
	}
	quorums := []int{p.groups.Quorum()}
	if groups != nil {
		quorums = quorums[:0]
		for _, g := range groups {
			quorums = append(quorums, g.Quorum)
		}
	}
	for i, q := range quorums {
		if i < len(p.quorumSeen) && groupCounting(states, i) >= q {
			p.quorumSeen[i].Store(true)
		}
	}
	v.Startup = startupNotes(states, quorums, func(i int) bool { return i < len(p.quorumSeen) && p.quorumSeen[i].Load() }, now)
	v.Window, v.Ops, v.Total = p.opsView(now)
	if p.held != nil {
		v.Listing = true
		locksView(&v, p.held(ctx))
	}
	return v
}

// locksView sets v's lock listing from s: the held locks, and what a
// listing could not decide or see.
func locksView(v *statusView, s lockSample) {
	if s.Err != nil {
		v.ListError = s.Err.Error()
		return
	}
	rows := s.Held
	if len(rows) > statusLocks {
		rows, v.More = rows[:statusLocks], true
	}
	for _, r := range rows {
		l := lockView(r)
		l.Owner, l.Left = printable(r.Owner), fmt.Sprintf("%.1f s", r.Left.Seconds())
		v.Locks = append(v.Locks, l)
	}
	undecided := s.Undecided
	if len(undecided) > statusLocks {
		undecided = undecided[:statusLocks]
	}
	for _, r := range undecided {
		l := lockView(r)
		tokens := make([]string, len(r.Tokens))
		for i, t := range r.Tokens {
			tokens[i] = printable(t)
		}
		l.Owner = strings.Join(tokens, ", ")
		v.Undecided = append(v.Undecided, l)
	}
	v.UndecidedText = undecidedText(len(s.Undecided), len(undecided), s.More)
	if len(s.Skipped) > 0 {
		they := "they"
		if len(s.Skipped) == 1 {
			they = "it"
		}
		v.Skipped = fmt.Sprintf("Not scanned: %s did not answer; the keys only %s hold are not listed.", strings.Join(s.Skipped, ", "), they)
	}
}

// lockView is r's key and where it is held, as the page shows them.
func lockView(r heldLockRow) heldLockView {
	l := heldLockView{Key: printable(r.Key)}
	for i, held := range r.Present {
		addr := ""
		if i < len(r.Addrs) {
			addr = r.Addrs[i]
		}
		l.Present = append(l.Present, presenceView{Addr: addr, Held: held})
		if held {
			l.Count++
		}
	}
	return l
}

// undecidedText counts the undecided keys of a listing's first page, n of
// which are shown: "" when there is none. more says the listing goes on.
func undecidedText(n, shown int, more bool) string {
	if n == 0 {
		return ""
	}
	text := fmt.Sprintf("%d locks undecided: no quorum answers, so whether they are held cannot be told; lock commands on them answer NOQUORUM.", n)
	if n == 1 {
		text = "1 lock undecided: no quorum answers, so whether it is held cannot be told; lock commands on it answer NOQUORUM."
	}
	switch {
	case shown < n:
		text += fmt.Sprintf(" The first %d shown.", shown)
	case more:
		text += " More keys than these are not listed here: GET /locks pages through them all."
	}
	return text
}

// groupCounting is how many of group i's backends count, of states (every
// group's, in order).
func groupCounting(states []backendState, i int) int {
	n := 0
	for _, s := range states {
		if groupOf(s) == i && s.State == quorum.StateUp.String() {
			n++
		}
	}
	return n
}

func groupOf(s backendState) int {
	if s.Group == nil {
		return 0
	}
	return *s.Group
}

// startupNotes says, for each group that lacks a quorum and has had none
// since the process started (seen), that this is the wait of a start,
// and when its quorum is expected: when the waits of enough of its
// quarantined backends end, beside those that count. A group whose
// waiting backends could not make a quorum (others are down) gets none:
// its wait is not all that is wrong.
func startupNotes(states []backendState, quorums []int, seen func(int) bool, now time.Time) []startupView {
	var notes []startupView
	for i, q := range quorums {
		counting, init := 0, false
		var waits []float64
		for _, s := range states {
			if groupOf(s) != i {
				continue
			}
			switch s.State {
			case quorum.StateUp.String():
				counting++
			case quorum.StateQuarantined.String(), quorum.StateEpochWait.String():
				waits = append(waits, s.QuarantineLeftS)
				init = init || s.Reason == quorum.ChangeUnmarked
			}
		}
		if counting >= q || seen(i) || counting+len(waits) < q {
			continue
		}
		slices.Sort(waits)
		left := time.Duration(waits[q-counting-1] * float64(time.Second))
		n := startupView{Group: i, In: span(left), At: clockAt(now, now.Add(left)), Init: init}
		if len(quorums) == 1 {
			n.Group = -1
		}
		notes = append(notes, n)
	}
	return notes
}

// span writes d, a wait that quarantine_left_s rounded up to a second, in
// the unit a reader takes in: "42 s", "17 min", "23 h 5 min".
func span(d time.Duration) string {
	switch s := int64(d.Seconds()); {
	case s <= 120:
		return fmt.Sprintf("%d s", s)
	case s <= 120*60:
		return fmt.Sprintf("%d min", (s+59)/60)
	default:
		m := (s + 59) / 60
		return fmt.Sprintf("%d h %d min", m/60, m%60)
	}
}

// clockAt writes at as a time of day in UTC, with its date when that is
// not now's.
func clockAt(now, at time.Time) string {
	now, at = now.UTC(), at.UTC()
	if y, m, d := at.Date(); y != now.Year() || m != now.Month() || d != now.Day() {
		return at.Format("2006-01-02 15:04:05 UTC")
	}
	return at.Format("15:04:05 UTC")
}

// backendViewOf formats a backend's row: s as the probe found it, its
// clock's rate as last measured.
func backendViewOf(s backendState, rate float64) backendView {
	b := backendView{Addr: s.Addr, State: s.State, RunID: s.RunID, Server: "—", Error: s.Error, Latency: "—", Clock: "not measured", WaitingFor: s.WaitingFor}
	if s.Group != nil {
		b.Group = *s.Group
	}
	if s.RunID != "" { // the first 8 of its 40 hex digits tell servers apart at a glance
		b.Server = s.RunID[:min(8, len(s.RunID))] + "…"
	}
	if s.LatencyMS > 0 {
		b.Latency = fmt.Sprintf("%.2f ms", s.LatencyMS)
	}
	if s.QuarantineLeftS > 0 {
		b.QuarantineLeft = fmt.Sprintf("%.0f s (%s)", s.QuarantineLeftS, s.Reason)
	}
	if rate != 0 && !math.IsNaN(rate) {
		b.Clock = fmt.Sprintf("%.5f", rate)
	}
	return b
}

// opsView formats the rates of the operations that happened in the window.
func (p *StatusPage) opsView(now time.Time) (window string, ops []opView, total string) {
	d, rates := p.sampler.rates(now)
	if d == 0 {
		return "", nil, ""
	}
	var all float64
	for op := range quorum.Op(quorum.NumOps) {
		var sum float64
		var outcomes []outcomeView
		for _, o := range proxy.Outcomes(op) {
			if r := rates[op][o]; r > 0 {
				sum += r
				outcomes = append(outcomes, outcomeView{o.String(), formatRate(r)})
			}
		}
		if sum > 0 {
			ops = append(ops, opView{Op: op.String(), Rate: formatRate(sum), Outcomes: outcomes})
			all += sum
		}
	}
	return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64), ops, formatRate(all)
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) }

// printable is s when it reads as text, else s quoted as Go would, so that a
// binary key shows as its bytes instead of as replacement characters.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// opsSampler keeps the proxy's operation counters of the last opsWindow,
// one sample every opsEvery, so that the page can show rates without
// Prometheus. It is safe for concurrent use.
type opsSampler struct {
	stats func() proxy.Stats

	mu      sync.Mutex
	samples []opsSample // oldest first
}

type opsSample struct {
	at  time.Time
	ops [quorum.NumOps][proxy.NumOutcomes]uint64
}

func newOpsSampler(stats func() proxy.Stats) *opsSampler {
	return &opsSampler{stats: stats}
}

// run samples, and calls also, until ctx ends.
func (s *opsSampler) run(ctx context.Context, also func()) {
	t := time.NewTicker(opsEvery)
	defer t.Stop()
	s.take(time.Now())
	also()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.take(now)
			also()
		}
	}
}

// take records the counters as of now, and forgets the samples that a
// younger one replaces as the window's start.
func (s *opsSampler) take(now time.Time) {
	sample := opsSample{at: now, ops: s.stats().Operations}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample)
	for len(s.samples) > 1 && !s.samples[1].at.After(now.Add(-opsWindow)) {
		s.samples = s.samples[1:]
	}
}

// rates returns, per operation and outcome, how many happened per second
// between the window's oldest sample and the counters now, and how long
// that was: 0 until a sample is at least a tenth of a second old.
func (s *opsSampler) rates(now time.Time) (time.Duration, [quorum.NumOps][proxy.NumOutcomes]float64) {
	var rates [quorum.NumOps][proxy.NumOutcomes]float64
	s.mu.Lock()
	if len(s.samples) == 0 {
		s.mu.Unlock()
		return 0, rates
	}
	first := s.samples[0]
	s.mu.Unlock()
	d := now.Sub(first.at)
	if d < opsEvery/10 {
		return 0, rates
	}
	cur := s.stats().Operations
	for op := range cur {
		for o := range cur[op] {
			rates[op][o] = float64(cur[op][o]-first.ops[op][o]) / d.Seconds()
		}
	}
	return d, rates
}
