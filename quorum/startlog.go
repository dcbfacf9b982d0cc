package quorum

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// At start every backend connects, is greeted, and may be quarantined or
// have its fencing counter re-seeded at about the same moment, and each
// would say so in a line of its own: five backends made a dozen lines of
// a few events. Until New has connected them all, the backends' lines are
// gathered instead, and New logs each event once, naming the backends it
// befell; each backend's own line goes to Debug. Backends that were not
// up by then (started with the proxy, as docker compose does) come up
// together a little later: their lines are gathered on until all of them
// have connected, or lateWait after the first of those lines. From then
// on a backend's line is news of that backend, logged as it comes.

// lateWait is how long the lines of backends that connect after New are
// gathered, from the first: down backends are dialled once a second, so
// those that start together connect within about a second of each other.
const lateWait = 2 * time.Second

// startLog gathers the backends' lines until flush, and those of the
// backends that had not connected by then until they have.
type startLog struct {
	next    slog.Handler // the engine's logger's
	mu      sync.Mutex
	done    bool         // New has flushed
	up      map[int]bool // the backends that have connected
	late    map[int]bool // those that had not when New flushed, until they have
	timer   *time.Timer
	records []gathered
}

// gathered is a line of backend node, with the attributes of its logger.
type gathered struct {
	node int
	addr string
	r    slog.Record
}

// handler is the handler of backend node's logger, whose lines name it.
func (s *startLog) handler(node int, addr string) slog.Handler {
	return &startHandler{log: s, node: node, addr: addr, next: s.next.WithAttrs([]slog.Attr{slog.String("backend", addr)})}
}

// connected tells that backend node has connected, after its line saying
// so: once every late backend has, their lines are logged.
func (s *startLog) connected(node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up == nil {
		s.up = map[int]bool{}
	}
	s.up[node] = true
	if s.late[node] {
		delete(s.late, node)
		if len(s.late) == 0 {
			s.endLocked()
		}
	}
}

// flush logs the lines gathered, and gathers on those of the backends of
// the first n that have not connected.
func (s *startLog) flush(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	s.logLocked()
	for i := range n {
		if !s.up[i] {
			if s.late == nil {
				s.late = map[int]bool{}
			}
			s.late[i] = true
		}
	}
}

// close logs the late backends' lines gathered, and passes on every line
// from then on.
func (s *startLog) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	s.endLocked()
}

func (s *startLog) endLocked() {
	s.late = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	s.logLocked()
}

// endLater ends the gathering of the late backends' lines lateWait from
// now. On the real clock, not the engine's: it decides nothing but when
// lines are logged, and a test's stepped clock must not hold them back.
func (s *startLog) endLater() *time.Timer { return time.AfterFunc(lateWait, s.close) }

// logNow is the time of a line logged: the real clock's, as slog stamps
// every line of its own.
func logNow() time.Time { return time.Now() }

// gatheringLocked reports whether a line of backend node is gathered now.
func (s *startLog) gatheringLocked(node int) bool {
	return !s.done || s.late[node]
}

// logLocked logs each event gathered once, in the order of their first
// lines. An event of one backend is logged as that backend logged it; one
// of several is logged once with backends=a,b,c in the order of the
// configuration, and each attribute the backends logged alike, or else
// each one's value in that order.
func (s *startLog) logLocked() {
	type event struct {
		level slog.Level
		msg   string
	}
	var order []event
	byEvent := map[event][]gathered{}
	for _, g := range s.records {
		ev := event{g.r.Level, g.r.Message}
		if _, ok := byEvent[ev]; !ok {
			order = append(order, ev)
		}
		byEvent[ev] = append(byEvent[ev], g)
	}
	s.records = nil
	ctx := context.Background()
	for _, ev := range order {
		gs := byEvent[ev]
		slices.SortStableFunc(gs, func(a, b gathered) int { return a.node - b.node })
		if gs[0].node == gs[len(gs)-1].node {
			for _, g := range gs {
				g.r.Time = logNow() // in the order of the log
				s.next.WithAttrs([]slog.Attr{slog.String("backend", g.addr)}).Handle(ctx, g.r)
			}
			continue
		}
		s.next.Handle(ctx, merge(gs))
	}
}

// merge is the one line of an event that several backends logged.
func merge(gs []gathered) slog.Record {
	r := slog.NewRecord(logNow(), gs[0].r.Level, gs[0].r.Message, 0)
	addrs := make([]string, len(gs))
	var keys []string
	values := make([]map[string]slog.Value, len(gs))
	for i, g := range gs {
		addrs[i] = g.addr
		values[i] = map[string]slog.Value{}
		g.r.Attrs(func(a slog.Attr) bool {
			if _, ok := values[i][a.Key]; !ok && !slices.Contains(keys, a.Key) {
				keys = append(keys, a.Key)
			}
			values[i][a.Key] = a.Value.Resolve()
			return true
		})
	}
	r.AddAttrs(slog.String("backends", strings.Join(addrs, ",")))
	for _, k := range keys {
		first, alike := values[0][k], true
		each := make([]string, len(gs))
		for i := range gs {
			v, ok := values[i][k]
			alike = alike && ok && v.Equal(first)
			if ok {
				each[i] = v.String()
			}
		}
		if alike {
			r.AddAttrs(slog.Attr{Key: k, Value: first})
		} else {
			r.AddAttrs(slog.String(k, strings.Join(each, ",")))
		}
	}
	return r
}

// startHandler is a backend's logger's handler: it gathers the lines until
// the start-up log is flushed, and passes them on from then on.
type startHandler struct {
	log   *startLog
	node  int
	addr  string
	attrs []slog.Attr // With's, which next has too
	next  slog.Handler
}

func (h *startHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *startHandler) Handle(ctx context.Context, r slog.Record) error {
	s := h.log
	s.mu.Lock()
	if !s.gatheringLocked(h.node) {
		s.mu.Unlock()
		return h.next.Handle(ctx, r)
	}
	if s.done && s.timer == nil {
		s.timer = s.endLater()
	}
	g := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	g.AddAttrs(h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		g.AddAttrs(a)
		return true
	})
	s.records = append(s.records, gathered{h.node, h.addr, g})
	s.mu.Unlock()
	if !h.next.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	d := r.Clone()
	d.Level = slog.LevelDebug
	return h.next.Handle(ctx, d)
}

func (h *startHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &startHandler{log: h.log, node: h.node, addr: h.addr, attrs: append(slices.Clip(h.attrs), attrs...), next: h.next.WithAttrs(attrs)}
}

// WithGroup gives up gathering: no backend's logger has a group, and a
// line of one could not be merged with another's.
func (h *startHandler) WithGroup(name string) slog.Handler { return h.next.WithGroup(name) }
