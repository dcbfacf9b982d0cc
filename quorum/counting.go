package quorum

// How many backends count toward quorum now, and the one log line each
// time that crosses the quorum: the moment lock commands start or stop
// answering NOQUORUM whatever the keys.

// counting is how many backends are connected and count toward quorum:
// admitted, out of quarantine, and with a clock rate in bounds.
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
// last change of any backend's connection, admission, quarantine or clock
// verdict.
func (e *Engine) QuorumAvailable() bool { return e.hasQuorum.Load() }

// noteCounting logs, once per change, whether a quorum of backends counts:
// it is called on every change of a backend's connection, admission,
// quarantine or clock verdict.
func (e *Engine) noteCounting() {
	if !e.built.Load() {
		return // New logs the first count once every backend is there
	}
	e.countingMu.Lock()
	defer e.countingMu.Unlock()
	n := e.counting()
	has := n >= e.quorum
	if e.noted && has == e.hasQuorum.Load() {
		return
	}
	e.noted = true
	e.hasQuorum.Store(has)
	if has {
		e.cfg.Logger.Info("quorum available: enough backends count toward quorum for lock commands to be decided",
			"counting", n, "backends", len(e.nodes), "quorum", e.quorum)
		return
	}
	e.cfg.Logger.Warn("quorum lost: too few backends count toward quorum; lock commands answer NOQUORUM until enough do",
		"counting", n, "backends", len(e.nodes), "quorum", e.quorum)
}
