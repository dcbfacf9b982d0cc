package quorum

import (
	"errors"
	"strings"
)

// How many backends count toward quorum now, and the one log line each
// time that crosses the quorum: the moment lock commands start or stop
// answering NOQUORUM whatever the keys, with the backends whose change
// crossed it.

// counting is how many backends are connected and count toward quorum:
// admitted, out of quarantine and any epoch wait, recording the engine's
// set, and with a clock rate in bounds.
func (e *Engine) counting() int {
	n := 0
	for i, nd := range e.nodes {
		if e.counts(i, nd) {
			n++
		}
	}
	return n
}

// QuorumAvailable reports whether a quorum of backends counted at the
// last change of any backend's connection, admission, quarantine, record
// or clock verdict.
func (e *Engine) QuorumAvailable() bool { return e.hasQuorum.Load() }

// noteCounting logs, once per change, whether a quorum of backends counts:
// it is called on every change of a backend's connection, admission,
// quarantine, record or clock verdict.
func (e *Engine) noteCounting() {
	if !e.built.Load() {
		return // New logs the first count once every backend is there
	}
	e.countingMu.Lock()
	defer e.countingMu.Unlock()
	now := make([]bool, len(e.nodes))
	n := 0
	for i, nd := range e.nodes {
		if now[i] = e.counts(i, nd); now[i] {
			n++
		}
	}
	has := n >= e.quorum
	first := !e.noted
	was := e.countedBefore
	e.countedBefore = now
	if !first && has == e.hasQuorum.Load() {
		return
	}
	e.noted = true
	e.hasQuorum.Store(has)
	attrs := []any{"counting", n, "backends", len(e.nodes), "quorum", e.quorum}
	switch {
	case first && has:
		e.cfg.Logger.Info("quorum available: enough backends count toward quorum for lock commands to be decided", attrs...)
	case first:
		e.cfg.Logger.Warn("no quorum yet: too few backends count toward quorum; lock commands answer NOQUORUM until enough do",
			append(attrs, "not_counting", e.describe(func(i int) bool { return !now[i] }))...)
	case has:
		e.cfg.Logger.Info("quorum regained: enough backends count toward quorum again for lock commands to be decided",
			append(attrs, "cause", e.describe(func(i int) bool { return now[i] && !was[i] })+" now count")...)
	default:
		e.cfg.Logger.Warn("quorum lost: too few backends count toward quorum; lock commands answer NOQUORUM until enough do",
			append(attrs, "cause", e.describe(func(i int) bool { return !now[i] && was[i] }))...)
	}
}

// describe lists the backends that which picks, each with why it does not
// count (when it does not): "10.0.0.1:6379 down, 10.0.0.2:6379
// quarantined after a restart for 60 s more".
func (e *Engine) describe(which func(int) bool) string {
	var parts []string
	for i, n := range e.nodes {
		if !which(i) {
			continue
		}
		part := n.addr
		if why := e.whyNot(i, n); why != "" {
			part += " " + why
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// whyNot says in a few words why backend i does not count, "" when it
// does.
func (e *Engine) whyNot(i int, n *node) string {
	if st, err := n.pipe.Status(); stateOf(st) != StateUp {
		if err != nil {
			return "down (" + failureKind(err) + ")"
		}
		return stateOf(st).String()
	}
	var s *SetError
	switch err := e.verdict(i, n); {
	case err == nil:
		return ""
	case errors.As(err, &s):
		return s.State.String()
	default:
		return err.Error()
	}
}
