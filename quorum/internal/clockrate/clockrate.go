// Package clockrate judges whether a backend's clock runs at the proxy's
// rate, from samples of it; it knows nothing of connections or locks.
// Redis expires a key by its own wall
// clock, so a key set with TTL t on a backend whose clock runs at rate ρ
// (its seconds per second of the proxy's monotonic clock) is gone after
// t/ρ, while validity promises the holder t − elapsed − drift, with drift =
// t × drift_factor + 2 ms. A backend counts while |ρ − 1| ≤ drift_factor:
//
//   - fast, ρ ≤ 1 + f: the key lasts t/ρ ≥ t/(1+f) > t(1−f), past the end
//     of any validity granted (mutual exclusion). The exact limit would be
//     1/(1−f), which leaves nothing of the allowance for anything else;
//   - slow, ρ ≥ 1 − f: the key lasts at most t/(1−f), about one drift
//     allowance past its TTL, so a crashed holder's lock still expires about
//     when its TTL says (no deadlock), and a PTTL read there means what it
//     says.
//
// The rate is measured, not trusted: every interval the engine sends TIME
// on each backend's connection (behind whatever lock commands are queued
// there: no connection of its own) and notes the proxy's monotonic clock
// before sending and on the reply. The server read its clock somewhere in
// between, so a pair of samples bounds the mean rate between them:
// [ΔTIME / longest proxy span, ΔTIME / shortest proxy span], the spans
// differing by the two round trips. The estimate is over the oldest and the
// newest sample of a sliding window (about window long), not the best pair
// of it: what a key's life depends on is how much the backend's clock
// advanced over a long span, jumps included, and a pair inside the window
// that skipped a jump would hide it. A backend is judged only by what the
// bounds prove: out when the whole interval lies outside 1 ± f, back in
// once the whole interval has stayed inside for max_ttl (every lock granted
// while it was off has expired by then), and an interval that straddles a
// limit (a slow round trip, a short span) changes nothing.
//
// Until two samples exist a backend counts as before: at start and on a
// new server the first verdict comes within an interval or two, and a new
// server is in restart quarantine for longer than that anyway.
package clockrate

import (
	"math"
	"sync"
	"time"
)

// Sample is one TIME: the proxy's monotonic clock when the request was
// sent and when its reply came (since an epoch of the caller's), and the
// backend's clock, read somewhere in between (since the Unix epoch).
type Sample struct {
	Sent, Recv time.Duration
	At         time.Duration
}

// Estimate is a backend clock's mean rate between two samples, relative to
// the proxy's monotonic clock: Rate from the midpoints of the round trips,
// and Low and High bounds that hold whatever part of each round trip the
// server read its clock in.
type Estimate struct {
	Rate, Low, High float64
}

// timeResolution is TIME's: microseconds, truncated, at each end.
const timeResolution = float64(time.Microsecond)

// estimate bounds the mean rate of the backend's clock between samples a
// and b (a first); false when their round trips overlap, which bounds
// nothing.
func estimate(a, b Sample) (Estimate, bool) {
	shortest := float64(b.Sent - a.Recv)
	if shortest <= 0 {
		return Estimate{}, false
	}
	longest := float64(b.Recv - a.Sent)
	passed := float64(b.At - a.At)
	mid := float64(b.Sent+b.Recv-a.Sent-a.Recv) / 2
	return Estimate{
		Rate: passed / mid,
		Low:  (passed - timeResolution) / longest,
		High: (passed + timeResolution) / shortest,
	}, true
}

// verdict is what an estimate proves of a rate, against the drift factor.
type verdict uint8

const (
	undecided verdict = iota // the bounds straddle a limit
	within                   // certainly within 1 ± f
	outside                  // certainly outside
)

func (e Estimate) verdict(f float64) verdict {
	switch {
	case e.Low >= 1-f && e.High <= 1+f:
		return within
	case e.High < 1-f || e.Low > 1+f:
		return outside
	}
	return undecided
}

// Change is news of a judgement: the backend stopped counting (Off), or
// counts again (Back).
type Change uint8

const (
	Same Change = iota
	Off
	Back
)

// Judge is what is known of one backend's clock. Its zero value is ready
// for the first sample, and its methods are safe for concurrent use.
type Judge struct {
	mu      sync.Mutex
	server  string   // the server (run_id) the samples are of
	samples []Sample // oldest first, spanning about the window
	est     Estimate
	known   bool // est is of the current samples
	off     bool
	// While off: since when (Recv of a sample) every verdict has been
	// within bounds, if the last one was.
	withinSince time.Duration
	inRun       bool
}

// Add records sample s of server's clock and judges the backend against
// drift factor f over a window of samples about window long: it counts
// again once within bounds for hold. It reports a change of verdict, so
// that each is logged once. An infinite f measures and judges nothing.
func (j *Judge) Add(s Sample, server string, window time.Duration, f float64, hold time.Duration) Change {
	j.mu.Lock()
	defer j.mu.Unlock()
	if server != j.server {
		// Another server has another clock, which the samples of the last
		// one say nothing of; one that does not count must show a rate in
		// bounds for hold all over again.
		j.server, j.samples, j.known, j.inRun = server, j.samples[:0], false, false
	}
	j.samples = append(j.samples, s)
	for len(j.samples) > 2 && s.Sent-j.samples[1].Sent >= window {
		j.samples = append(j.samples[:0], j.samples[1:]...)
	}
	if len(j.samples) < 2 {
		return Same
	}
	est, ok := estimate(j.samples[0], s)
	if !ok {
		return Same
	}
	j.est, j.known = est, true
	switch est.verdict(f) {
	case outside:
		j.inRun = false
		if !j.off {
			j.off = true
			return Off
		}
	case within:
		if !j.off {
			return Same
		}
		if !j.inRun {
			j.inRun, j.withinSince = true, s.Recv
		}
		if s.Recv-j.withinSince >= hold {
			j.inRun, j.off = false, false
			return Back
		}
	default:
		j.inRun = false
	}
	return Same
}

// Run reports, while the backend does not count, since when (Recv of a
// sample) every verdict has been within bounds, if the last one was: the
// run whose length hold is measured against.
func (j *Judge) Run() (since time.Duration, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.withinSince, j.off && j.inRun
}

// Off reports whether the backend does not count now, and the last
// estimate of its rate.
func (j *Judge) Off() (Estimate, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.est, j.off
}

// Rate is the last estimate of the backend's clock rate, NaN until there
// is one for its current server.
func (j *Judge) Rate() float64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.known {
		return math.NaN()
	}
	return j.est.Rate
}

// Samples are the samples the estimate spans now, oldest first.
func (j *Judge) Samples() []Sample {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Sample(nil), j.samples...)
}
