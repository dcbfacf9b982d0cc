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
	"strconv"
	"sync"
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
	// whether it holds the key with Owner's token; Addrs names them.
	Present []bool
	Addrs   []string
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
	// held lists a sample of held locks; nil when no listing is wired, and
	// the page says so.
	held func(context.Context) []heldLockRow
	log  *slog.Logger
}

// NewStatusPage is the status page of groups, whose operation rates come
// from stats (the proxy's Server.Stats) once Sample runs, and whose sample
// of held locks is the first page of the groups' lock listing. embedded
// and version are shown as they are.
func NewStatusPage(groups *shard.Groups, stats func() proxy.Stats, embedded bool, version string, log *slog.Logger) *StatusPage {
	return &StatusPage{groups: groups, sampler: newOpsSampler(stats), embedded: embedded, version: version, held: heldSample(groups), log: log}
}

// Sample takes the samples of the operation counters that the page's
// rates are computed from, until ctx ends.
func (p *StatusPage) Sample(ctx context.Context) { p.sampler.run(ctx) }

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
	Listing, More                  bool
	Locks                          []heldLockView
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
	v.Window, v.Ops, v.Total = p.opsView(now)
	if p.held != nil {
		v.Listing = true
		rows := p.held(ctx)
		if len(rows) > statusLocks {
			rows, v.More = rows[:statusLocks], true
		}
		for _, r := range rows {
			l := heldLockView{Key: printable(r.Key), Owner: printable(r.Owner), Left: fmt.Sprintf("%.1f s", r.Left.Seconds())}
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
			v.Locks = append(v.Locks, l)
		}
	}
	return v
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

// run samples until ctx ends.
func (s *opsSampler) run(ctx context.Context) {
	t := time.NewTicker(opsEvery)
	defer t.Stop()
	s.take(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.take(now)
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
