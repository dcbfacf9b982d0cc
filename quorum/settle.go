package quorum

import (
	"context"
	"fmt"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
)

// Waits bounded by the lease horizon (docs/design/horizon.md). A backend
// that may have lost leases (restarted, emptied, promoted) used to wait
// max_ttl, the longest lease that could exist. Every lease script now
// records the latest expiry it creates ({lockproxy}:horizon, lua/horizon.lua),
// and the identity script that readRecords runs every second tells each
// member's horizon. Once enough intact others (admit.Witnesses) answer, the
// longest of their horizons bounds every lease the lost member could have
// held for a quorum (admit.Settle), and its wait ends there: the proof is
// written into its marker (lua/settle.lua), so that every proxy ends the
// wait together. Where too few answer, nothing is assumed: the full wait.

// horizonKey is each backend's lease horizon: the latest lease expiry
// recorded there (lua/horizon.lua, which names it as the scripts do).
const horizonKey = ReservedPrefix + "horizon"

// settleDelay is how old a loss must be before a read of the witnesses
// proves anything: a grant that the lost backend ran before its loss is
// counted only if its other votes arrive within backend_timeout of the
// flight's start (fanout.go), so it may still land on a witness until
// then. The loss's time is taken late (lostSince); the drift allowance,
// twice, covers the rates of the granting proxy's clock and this one's.
func (e *Engine) settleDelay() time.Duration {
	return e.cfg.NodeTimeout + 2*e.drift(e.cfg.NodeTimeout)
}

// failoverFloor is the least a promoted replica waits: the horizon cannot
// see an old master that still runs and that a proxy still reaches under
// the same address (a split brain), which the minute-long quarantine of
// earlier versions gave a minute to be stopped.
const failoverFloor = time.Minute

// horizonRead is what one records read told of one member.
type horizonRead struct {
	// witness: it answered with its set record, marked for horizons, its
	// own waits are over, and its clock is trusted (clock.go), so its
	// horizon covers every lease it holds.
	witness bool
	horizon time.Duration // how long the longest lease recorded on it has left
	// floor is how long until the locks of the epochs before its last
	// adopt are gone (adopt.go's floorKey): their quorums were of other
	// sets, which this set's witnesses need not meet, so no wait that the
	// horizons end may end before it.
	floor time.Duration
}

// settle shortens the wait of every member whose loss the witnesses of
// the read taken at `at` bound, and records for status what each wait
// rests on.
func (e *Engine) settle(ctx context.Context, reads []horizonRead, at time.Time) {
	needed := admit.Witnesses(len(e.nodes), e.quorum)
	for b, n := range e.nodes {
		var (
			remaining []int64
			floor     time.Duration
		)
		for j, r := range reads {
			if j != b && r.witness {
				remaining = append(remaining, r.horizon.Milliseconds())
				floor = max(floor, r.floor)
			}
		}
		longest, ok := admit.Settle(len(e.nodes), e.quorum, remaining)
		if e.hooks.ignoreHorizon {
			longest, ok = 0, true
		}
		if ok {
			e.settleClock(b, at, max(time.Duration(longest)*time.Millisecond, floor))
		}
		n.mu.Lock()
		waiting := n.marked && n.waitLeft() > 0 && lossReason(n.reason)
		since, read, until, reason := n.lostSince(), n.marker, n.markerUntil, n.reason
		n.witnesses, n.needed, n.waitFor = len(remaining), needed, ""
		proves := waiting && ok && !at.Before(since.Add(e.settleDelay()))
		if waiting && !proves {
			n.waitFor = WaitFull
		}
		n.mu.Unlock()
		if !proves {
			continue
		}
		rest := time.Duration(longest) * time.Millisecond
		end, waitFor := at.Add(max(rest+e.drift(rest), floor+e.drift(floor))), WaitHorizon
		if floor := since.Add(failoverFloor); reason == admit.ReasonFailover && floor.After(end) {
			end, waitFor = floor, WaitFloor
		}
		// A read a second later proves about the same end: only a shorter
		// wait by more than that is worth a write, a log line and a
		// reschedule. Where the marker ends about when this read proves,
		// a proof (this proxy's or another's) wrote it.
		if end.Add(time.Second).After(until) {
			if !end.Before(until.Add(time.Second)) {
				waitFor = WaitFull
			}
			n.mu.Lock()
			n.waitFor = waitFor
			n.mu.Unlock()
			continue
		}
		left := e.clock.Until(end)
		r, err := n.run(ctx, settleScript, []string{markerKey}, read.String(), max(left, 0).Milliseconds()+1)
		if ms, _ := r.Integer(); err != nil || ms < 0 {
			continue // read again in a round
		}
		n.settled(e.clock.Now().Add(left), waitFor, rest)
	}
}

// lossReason tells whether a marker's reason is a loss of the data set
// (restart, unmarked, failover), whose wait the horizon may end; an epoch
// wait is lockproxy adopt's to decide.
func lossReason(reason string) bool {
	return reason == admit.ReasonRestart || reason == admit.ReasonUnmarked || reason == admit.ReasonFailover
}

// lostSince is when, at the latest, the member lost its data set, by the
// proxy's clock: when its marker was written (its end less the wait that
// the identity script gave), and for a restart no sooner than the process
// started. A marker that a proof lowered gives an earlier time: harmless,
// since a read after a proof comes after the proof's own, which was taken
// late enough. n.mu is held.
func (n *node) lostSince() time.Time {
	wait := n.quarantine
	if n.reason == admit.ReasonFailover {
		wait = n.failoverWait
	}
	since := n.markerUntil.Add(-wait)
	if n.reason == admit.ReasonRestart && n.upSince.After(since) {
		since = n.upSince
	}
	return since
}

// settled records that the member's wait ends at until, as a proof
// wrote into its marker, and logs it.
func (n *node) settled(until time.Time, waitFor string, longest time.Duration) {
	n.mu.Lock()
	if until.Before(n.markerUntil) {
		n.markerUntil = until
	}
	n.waitFor = waitFor
	eligibleAt := n.eligibleLocked()
	n.eligibleAt = eligibleAt
	witnesses := fmt.Sprintf("%d/%d", n.witnesses, n.needed)
	n.mu.Unlock()
	n.scheduleCount(eligibleAt)
	left := n.clock.Until(eligibleAt)
	switch waitFor {
	case WaitFloor:
		n.log.Info("backend's wait shortened: the leases it may have lost are gone, but a promoted replica waits out the floor for an old master that may still run",
			"counts_in", left.Round(time.Second), "witnesses", witnesses)
	default:
		n.log.Info("backend's wait shortened by the horizons of the other backends: the longest lease it may have held ends then",
			"counts_in", left.Round(time.Millisecond), "longest_lease_left", longest.Round(time.Millisecond), "witnesses", witnesses)
	}
}

// settleClock shortens the hold of member b's clock verdict: a clock that
// ran fast expired b's leases early, the same loss as a restart's, from
// the start of its run within bounds (clock.go). A read the settle delay
// into that run bounds every lease it lost by the witnesses' longest
// horizon (longest, from at).
func (e *Engine) settleClock(b int, at time.Time, longest time.Duration) {
	since, ok := e.clocks.runSince(b)
	if !ok || at.Before(since.Add(e.settleDelay())) {
		return
	}
	e.clocks.shorten(b, since, at.Add(longest+e.drift(longest)).Sub(since))
}
