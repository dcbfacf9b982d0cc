package admit

// The lease horizon (docs/design/horizon.md). Every script that sets or
// raises a lock's expiry on a member also raises the member's horizon
// ({lockproxy}:horizon) to that expiry, atomically: while the member's
// data set is intact, no lease on it outlives its horizon. A member that
// may have lost leases (restarted empty, promoted, emptied) need not wait
// for the longest lease that could exist (max_ttl): it waits until the
// horizons of enough intact others have passed.
//
// Why enough others bound every lease it lost: a validity rests on a
// quorum S of the n members. If the lost member b was in S, S without b is
// q-1 of the n-1 others, any of them; a read of n-q+1 of the others meets
// every such set in at least one member, whose horizon then covers the
// lease. So the longest remaining horizon among n-q+1 witnesses bounds
// every lease that b's loss could have taken from a quorum.

// Witnesses is how many of the n-1 other members of a set of n, quorum q,
// must answer as witnesses before a lost member's wait may end by their
// horizons.
func Witnesses(n, q int) int { return n - q + 1 }

// Settle reports, from the remaining horizons (ms, 0 for none) that the
// witnesses of a lost member answered in one read, how long from that
// read every lease that member may have lost is gone at the latest, and
// whether enough answered (Witnesses) to know it. Where too few answered,
// nothing is known: the member waits its full wait.
func Settle(n, q int, remaining []int64) (longest int64, ok bool) {
	if len(remaining) < Witnesses(n, q) {
		return 0, false
	}
	for _, r := range remaining {
		longest = max(longest, r)
	}
	return longest, true
}

// Settled is marker m once a read that found marker read proved that
// every lease its member may have lost is gone by end (ms, the member's
// clock): its end moves there when m is still the marker read, is later,
// and is a loss's wait (restart, unmarked, failover; an epoch wait is
// decided by adopt). lua/settle.lua does the same.
//
// The marker read, not only its process: the proof is written a round
// trip after its read, and meanwhile the wait may have ended, the member
// counted, then lost its data set again without a restart (FLUSHALL) and
// been marked anew by the same process: a proof of the earlier loss
// would cut the new wait short, and the leases it lost are younger than
// the read (the model checker's "horizon, late proofs" finds two holders).
func Settled(m, read Marker, end int64) Marker {
	switch {
	case !m.Present || m != read || end >= m.Until:
	case m.Reason == ReasonRestart || m.Reason == ReasonUnmarked || m.Reason == ReasonFailover:
		m.Until = end
	}
	return m
}
