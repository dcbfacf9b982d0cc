package admit

import (
	"fmt"
	"slices"
	"strings"
)

// Adopting a new backend set. lockproxy adopt, run by the operator with
// the new configuration, writes the new epoch's record on every member of
// every new set, in two passes, once every member answered:
//
//  1. A pending record (PendingFor) on every member. Each member of the old
//     epoch refuses the old epoch's proxies from then on, atomically with
//     their requests (the set check); the new epoch's proxies do not count
//     a pending record. Then every record is read again, and a member that
//     the old epoch's proxies took back meanwhile (it lost the pending
//     record while the old set was still established) is written again.
//  2. Once every member carries it, or none: the final record, and, on each
//     member that must wait for the old epoch's locks (Plan.Wait), an epoch
//     wait of max_ttl and its drift allowance from now in its marker (Wait).
//
// Why it is safe. The old epoch takes no lock after pass 1 and its check:
// adopt requires that the new sets keep enough members of each old set (by
// the member list its records carry) that the rest are no quorum of it
// (Blocking), and claims never give an old epoch's record back to a member
// unless a quorum of the old set still records it. Its last locks expire
// within max_ttl and the drift after that (or by the end of the longest
// lease on the old sets' witnesses, where enough answer: quorum's
// adopt.go), so by the end of an epoch wait written in pass 2 they are
// gone. Until then the new epoch's proxies count
// only old members, and only where every quorum of the new set drawn from
// them meets every quorum of the old set (Q_new + Q_old > N_old: growing,
// or replacing fewer than half); a member new to the set, a group whose
// slots changed, and every member of a set that does not meet that rule
// wait. A member that loses its data later is in restart quarantine from
// then, which ends after any epoch wait written before.

// Member is one member of a new set as adopt's reading found it.
type Member struct {
	// Set is the index of its set in the new layout; Addr its address
	// ("host:port/db"), as the sets list their members.
	Set    int
	Addr   string
	Record Record
}

// Plan is what adopt writes.
type Plan struct {
	// Done is set when every member records its new set already: nothing
	// to write.
	Done bool
	// Old lists the sets of the old epoch that adopt stops (none on a
	// first adoption, or when resuming one).
	Old []Set
	// Write tells, member by member, whom adopt writes: every member that
	// does not record its new set, final, yet.
	Write []bool
	// Wait tells, of those, who waits for the old epoch's locks.
	Wait []bool
}

// PlanError is why PlanAdopt refuses: Member is the index of the member
// that refuses it, -1 when it is the layout as a whole.
type PlanError struct {
	Member int
	Reason string
}

func (e *PlanError) Error() string { return e.Reason }

// PlanAdopt decides what adopting sets (the new layout: one set, or one per
// shard group) writes on members, as read just before. It fails, and
// nothing may be written, when a member records a newer epoch, or the
// same epoch with other members, or when the new sets keep too few members
// of an old set for adopting to stop it.
//
// A plan resumes an adopt that stopped halfway (a member already records
// the new epoch, pending or final): members whose pending record carries
// the decision keep it, and those that lost or never got it wait.
func PlanAdopt(sets []Set, members []Member) (Plan, error) {
	plan := Plan{Write: make([]bool, len(members)), Wait: make([]bool, len(members))}
	resuming, done := false, true
	for i, m := range members {
		rel := Relate(sets[m.Set], m.Record)
		plan.Write[i] = rel != Ours
		switch rel {
		case Other:
			return Plan{}, &PlanError{Member: i, Reason: fmt.Sprintf("it records %s, not an epoch older than %d: adopt a higher epoch", describe(m.Record), sets[m.Set].Epoch)}
		case Ours:
			resuming = true
		case Adopting:
			resuming, done = true, false
		default:
			done = false
		}
	}
	if done {
		plan.Done = true
		return plan, nil
	}
	if resuming {
		for i, m := range members {
			plan.Wait[i] = plan.Write[i] && (!m.Record.Pending || m.Record.Wait)
		}
		return plan, nil
	}
	old := oldSets(members)
	plan.Old = old
	for _, o := range old {
		// The old set's members that adopt rewrites: by its list, where
		// its records carry one, so that a member that lost its data set
		// counts as one; else those that record it.
		keep := 0
		for _, m := range members {
			if o.Has(m.Addr) || o.Members == "" && final(m.Record) && m.Record.Name() == o.Name() {
				keep++
			}
		}
		if keep < Blocking(o.N) {
			return Plan{}, &PlanError{Member: -1, Reason: fmt.Sprintf("the new backends keep %d of the %d members of epoch %d's set %s; adopting stops an old set only where it keeps at least %d (the rest then make no quorum of it): change fewer members at a time", keep, o.N, o.Epoch, o.Fingerprint, Blocking(o.N))}
		}
	}
	if len(old) == 0 {
		return plan, nil // a first adoption: no epoch's locks to wait for
	}
	for s, set := range sets {
		from, moved := oldSetOf(set, s, members, old[0].Epoch)
		for i, m := range members {
			if m.Set != s {
				continue
			}
			oldMember := final(m.Record) && m.Record.Name() == from.Name()
			plan.Wait[i] = moved || !oldMember || set.Quorum()+from.Quorum() <= from.N
		}
	}
	return plan, nil
}

// Blocking is how many members of a set of n must refuse its proxies for
// the rest to be no quorum of it: n − Majority(n) + 1.
func Blocking(n int) int { return n - Majority(n) + 1 }

// oldSets lists the distinct sets of the newest epoch that members record
// final, none when none does: the sets whose proxies may be taking locks.
// A pending record is an adopt that did not finish, whose set never
// counted.
func oldSets(members []Member) []Set {
	epoch := 0
	for _, m := range members {
		if final(m.Record) {
			epoch = max(epoch, m.Record.Epoch)
		}
	}
	var old []Set
	for _, m := range members {
		if !final(m.Record) || m.Record.Epoch != epoch {
			continue
		}
		i := slices.IndexFunc(old, func(o Set) bool { return o.Name() == m.Record.Name() })
		switch {
		case i < 0:
			old = append(old, m.Record.Set)
		case old[i].Members == "":
			old[i].Members = m.Record.Members // a record of an earlier version lists none
		}
	}
	return old
}

// oldSetOf is the old set whose members set s keeps, and whether the
// set's keys may have moved: it keeps members of more than one old set,
// or none, or its slots are not that set's (the shard groups changed).
func oldSetOf(set Set, s int, members []Member, epoch int) (Set, bool) {
	var from Set
	found := false
	for _, m := range members {
		if m.Set != s || !final(m.Record) || m.Record.Epoch != epoch {
			continue
		}
		if found && m.Record.Name() != from.Name() {
			return Set{}, true
		}
		from, found = m.Record.Set, true
	}
	return from, !found || from.Slots != set.Slots
}

// describe names a record in an error.
func describe(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d (%d members, %s)", r.Epoch, r.N, r.Fingerprint)
	if r.Pending {
		b.WriteString(", being adopted")
	}
	return b.String()
}

func final(r Record) bool { return r.Present && !r.Pending }
