package admit

import "time"

// View is what a proxy knows of one member of its set when it decides
// what to record on it: read in one round over every member.
type View struct {
	// Answered is whether the member answered the round.
	Answered bool
	Record   Record
	// Quarantined is whether its quarantine runs (a restart, a failover,
	// an unmarked data set: its votes do not count, for any proxy).
	Quarantined bool
}

// Claims returns the members of set ours, by index in views, on which a
// proxy of that set may write the set's record now: members whose data set
// lost its record (a restart without persistence) get it back, so that
// they count again once their quarantine is over, and a new deployment's
// members get it first. No other write of a record is a proxy's own
// decision: a new epoch is written by lockproxy adopt alone (PlanAdopt).
//
// A proxy records its set on a member without a record where a quorum of
// the members records the set (it is established); where every member
// answered and at least one records it (a majority lost their data set,
// and what is left still names it); or, at epoch 1, where every member
// answered and none has a record (a first start). Where fewer than a quorum record it
// and some member does not answer, the proxy cannot tell itself from a
// proxy of an old epoch cut off from the members adopt rewrote, and waits
// (the model checker finds two holders otherwise). It records its set over an older epoch's record only on a
// member in quarantine (a failover to a replica that missed adopt's
// write) and only while a quorum of the members records the set: its
// votes have counted for nobody since, and it counts for this set from
// the end of its quarantine, like any member that lost data.
//
// It records nothing while any member answers with a record of another
// set (a newer epoch: this proxy runs an old configuration; the same
// epoch with other members: two configurations) or one that adopt is
// writing, and nothing ever again once it has seen another set's final
// record (superseded, which Claims returns updated and the proxy keeps for
// as long as it runs): a proxy of an old or mistaken configuration writes
// nothing, and an old epoch's proxy that learnt of the new one does not
// take back a member that lost the new record. An adopt that never
// finished supersedes nobody: the old epoch goes on.
func Claims(ours Set, views []View, superseded bool) (claims []int, stillSuperseded bool) {
	mine, answered, absent := 0, 0, 0
	for _, v := range views {
		if !v.Answered {
			continue
		}
		answered++
		switch Relate(ours, v.Record) {
		case Other:
			// Another set's final record means its adoption finished: a
			// proxy that saw it is of an old configuration for good.
			return nil, superseded || !v.Record.Pending
		case Adopting:
			return nil, superseded
		case Ours:
			mine++
		case Absent:
			absent++
		}
	}
	if superseded {
		return nil, true
	}
	all := answered == len(views)
	established := mine >= ours.Quorum()
	recovering := all && mine >= 1
	// A first start is of a first epoch: a later one's records are
	// written by adopt, and a proxy of an epoch nobody adopted that finds
	// its members empty (fresh servers, and shared ones that lost their
	// data) would start a set beside the running one.
	first := all && absent == len(views) && ours.Epoch == 1
	for i, v := range views {
		if !v.Answered {
			continue
		}
		switch Relate(ours, v.Record) {
		case Absent:
			if established || recovering || first {
				claims = append(claims, i)
			}
		case Older:
			if established && v.Quarantined {
				claims = append(claims, i)
			}
		}
	}
	return claims, false
}

// Counts tells whether a member's vote counts toward a quorum of set
// ours: its record names the set, final; its quarantine is over; its
// clock runs within the drift allowance; and, with fencing, its counter
// was re-seeded since it may have lost it (Seed).
func Counts(rel Relation, quarantined, clockOff, unseeded bool) bool {
	return rel == Ours && !quarantined && !clockOff && !unseeded
}

// Seed tells whether a member's fencing counter may be re-seeded from the
// others' now, given how many of the others count (counting) and how many
// of those answered the read of their counters (counted): from a quorum
// of them (strict), or, where fewer than a quorum of the others count at
// all, from whatever answered (the first start with fencing on, or every
// member restarted), waiting for them could wait for ever.
func Seed(counted, counting, quorum int) (ok, strict bool) {
	strict = counted >= quorum
	return strict || counting < quorum, strict
}

// Left is how long, from a greeting, until a member's votes may count as
// far as restarts go: until its server has been up for quarantine
// (max_ttl; 0 when restart quarantine is off, because the backends persist
// every write), and until its marker's end (marker, the marker's end less
// the server's clock then).
func Left(uptime, quarantine, marker time.Duration) time.Duration {
	return max(quarantine-uptime, marker, 0)
}

// Duplicate is the member whose vote already counts for the redis-server
// runID that member me reaches, or -1: one server, one vote. claimed holds
// the server each member reached last ("" none): a claim lasts until its
// member reaches another server, a connection lost included, since it may
// well come back to the same one.
func Duplicate(claimed []string, me int, runID string) int {
	for i, id := range claimed {
		if i != me && id == runID {
			return i
		}
	}
	return -1
}
