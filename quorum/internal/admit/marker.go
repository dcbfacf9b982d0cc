package admit

import (
	"strconv"
	"strings"
)

// Why a member waits before its votes count, as its marker records it.
const (
	ReasonRestart  = "restart"  // its data set was last written by another process of it
	ReasonFailover = "failover" // a replica promoted since it started, carrying its old master's data set
	ReasonUnmarked = "unmarked" // its data set carries no marker: new, emptied or swapped
	ReasonEpoch    = "epoch"    // the backend set changed: the old epoch's locks may still be held
	// ReasonInit marks a data set that lockproxy init found fresh: no
	// wait, on the operator's word that no client holds a lock there.
	// While it names the server's process, the process has kept its data
	// set since, so no restart quarantine applies either.
	ReasonInit = "init"
)

// Marker is a backend's quarantine marker ({lockproxy}:server): the
// redis-server process whose data set it is, and until when (ms, by the
// server's clock) its votes do not count, and why. Every proxy reads the
// same, so every proxy ends a quarantine at the same time, one started
// later included.
type Marker struct {
	Present bool
	Owner   string // run_id
	Until   int64
	Reason  string // "" in a marker of an earlier version
}

// String is the marker as stored, "run_id:until:reason".
func (m Marker) String() string {
	if !m.Present {
		return ""
	}
	return m.Owner + ":" + strconv.FormatInt(m.Until, 10) + ":" + m.Reason
}

// ParseMarker reads a stored marker; one that cannot be read is none,
// as lua/identity.lua reads it.
func ParseMarker(raw string) Marker {
	f := strings.Split(raw, ":")
	if len(f) < 2 || len(f) > 3 || f[0] == "" {
		return Marker{}
	}
	until, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || until < 0 {
		return Marker{}
	}
	m := Marker{Present: true, Owner: f[0], Until: until}
	if len(f) == 3 {
		m.Reason = f[2]
	}
	return m
}

// Mark is the marker that the greeting of server runID leaves, at now (ms,
// the server's clock): m itself when it names runID; otherwise one that
// names runID, quarantined for quarantine from now (failover, at least
// quarantine, for a replica promoted since it started), or until m's end
// when that is later, so that no wait already written (an epoch's) is cut
// short by a restart. lua/identity.lua does the same.
func Mark(m Marker, runID string, now, quarantine, failover int64, promoted bool) Marker {
	if m.Present && m.Owner == runID {
		return m
	}
	next := Marker{Present: true, Owner: runID, Until: now + quarantine, Reason: ReasonRestart}
	switch {
	case promoted:
		next.Until, next.Reason = now+failover, ReasonFailover
	case !m.Present:
		next.Reason = ReasonUnmarked
	}
	if m.Present && m.Until > next.Until {
		next.Until, next.Reason = m.Until, m.Reason
	}
	return next
}

// Wait is the marker with an epoch wait of d from now written into it, as
// adopt's second pass writes it on a member that must wait for the old
// epoch's locks: its end moves to now + d unless it is later already.
func Wait(m Marker, now, d int64) Marker {
	if now+d > m.Until {
		m.Until, m.Reason = now+d, ReasonEpoch
	}
	return m
}
