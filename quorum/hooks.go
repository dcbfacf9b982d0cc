package quorum

import "time"

// hooks are the ways tests steer or break the engine, in one place. Unit
// tests set an engine's own; the end-to-end negative controls get theirs
// through negativeControl, which only a binary built with the tag
// lockproxy_negative_control sets (negative_control.go). In lockproxy they
// are all zero, and each is one test of a field on its path.
type hooks struct {
	// skipFenceWriteBack grants a lock whose token too few backends carry:
	// the control that shows why the write-back is there.
	skipFenceWriteBack bool
	// skipTopUpCopies lets top-ups start and count as before but send no
	// copy: the control of TestTopUpEffect (export_test.go).
	skipTopUpCopies bool
	// splitPaused, when set, is called for the pause before a split
	// acquisition's second try, and returns it: a test acts in it.
	splitPaused func() time.Duration
	// brokenFence grants the token minted by the lowest-numbered backend
	// that granted, and writes nothing back. Once backends' counters drift
	// apart, tokens go back, and the safety run's checkers must say so.
	brokenFence bool
	// brokenSet counts every backend whatever set it records, and the lock
	// scripts' set check lets every proxy through, as before the records
	// existed. Proxies of two sets then grant one lock twice, and the
	// checkers must say so.
	brokenSet bool
	// ignoreHorizon ends a lost backend's wait as soon as a read may prove
	// anything (settleDelay after the loss), whatever leases its
	// witnesses' horizons say may remain: the safety run's mixed phase
	// must then find two holders.
	ignoreHorizon bool
}

// negativeControl is the hooks of every engine of the process.
var negativeControl hooks

// lowestGranted is brokenFence's token: the one minted by the
// lowest-numbered backend that granted.
func lowestGranted(seen []vote[ack]) int64 {
	first, token := -1, int64(0)
	for _, v := range seen {
		if v.err == nil && v.val.yes && (first < 0 || v.node < first) {
			first, token = v.node, v.val.fence
		}
	}
	return token
}
