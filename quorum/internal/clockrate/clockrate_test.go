package clockrate

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The sampling the engine does: a sample a second, judged over 10 s.
const (
	interval = time.Second
	window   = 10 * time.Second
)

// A backend's clock as the tests of the estimator see it: it reads start
// at proxy time 0 and runs at rate.
type fakeClock struct {
	start time.Duration // its reading at proxy time 0
	rate  float64
	base  time.Duration // proxy time from which rate applies
	at0   time.Duration // its reading at base
}

func newFakeClock(rate float64) *fakeClock {
	c := &fakeClock{start: 1_700_000_000 * time.Second, rate: rate}
	c.at0 = c.start
	return c
}

// read is the clock's reading at proxy time t, truncated to TIME's
// microseconds.
func (c *fakeClock) read(t time.Duration) time.Duration {
	at := c.at0 + time.Duration(float64(t-c.base)*c.rate)
	return at.Truncate(time.Microsecond)
}

// setRate changes the rate from proxy time t on, continuously.
func (c *fakeClock) setRate(t time.Duration, rate float64) {
	c.at0, c.base, c.rate = c.at0+time.Duration(float64(t-c.base)*c.rate), t, rate
}

// sample is a TIME sent at proxy time sent, answered after rtt, read by the
// server at the share read (0 to 1) of the round trip.
func (c *fakeClock) sample(sent, rtt time.Duration, read float64) Sample {
	return Sample{Sent: sent, Recv: sent + rtt, At: c.read(sent + time.Duration(float64(rtt)*read))}
}

// TestEstimateBounds: the bounds hold the true rate wherever in each round
// trip the server read its clock, and narrow with the span.
func TestEstimateBounds(t *testing.T) {
	for _, rate := range []float64{0.5, 0.99, 1, 1.001, 1.5} {
		for _, rtt := range []time.Duration{100 * time.Microsecond, 5 * time.Millisecond} {
			for _, span := range []time.Duration{time.Second, 10 * time.Second} {
				for _, reads := range [][2]float64{{0, 1}, {1, 0}, {0.5, 0.5}, {0, 0}, {1, 1}} {
					c := newFakeClock(rate)
					a, b := c.sample(0, rtt, reads[0]), c.sample(span, rtt, reads[1])
					est, ok := estimate(a, b)
					if !ok {
						t.Fatalf("rate %g rtt %s span %s: no estimate", rate, rtt, span)
					}
					name := fmt.Sprintf("rate %g, rtt %s, span %s, read at %v", rate, rtt, span, reads)
					if est.Low > rate || est.High < rate {
						t.Errorf("%s: [%g, %g] misses the rate", name, est.Low, est.High)
					}
					// Wider than the round trips allow only by TIME's resolution.
					if width, most := est.High-est.Low, rate*float64(2*rtt)/float64(span-rtt)+4e-6/span.Seconds(); width > most {
						t.Errorf("%s: bounds %g wide, at most %g expected", name, width, most)
					}
					if math.Abs(est.Rate-rate) > est.High-est.Low {
						t.Errorf("%s: estimate %g", name, est.Rate)
					}
				}
			}
		}
	}
	// Overlapping round trips bound nothing.
	c := newFakeClock(1)
	if _, ok := estimate(c.sample(0, 10*time.Millisecond, 0.5), c.sample(5*time.Millisecond, 10*time.Millisecond, 0.5)); ok {
		t.Error("an estimate from overlapping round trips")
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		low, high float64
		want      verdict
	}{
		{0.999, 1.001, within},
		{0.99, 1.01, within},
		{1.49, 1.51, outside},
		{0.5, 0.51, outside},
		{1.005, 1.015, undecided}, // straddles 1 + f
		{0.985, 0.995, undecided}, // straddles 1 − f
		{0.98, 1.02, undecided},   // wider than the allowance
		{1.0101, 1.02, outside},
	} {
		if got := (Estimate{Low: tc.low, High: tc.high}).verdict(0.01); got != tc.want {
			t.Errorf("[%g, %g]: verdict %d, want %d", tc.low, tc.high, got, tc.want)
		}
	}
}

// judgeRun feeds a judge one sample a second, from proxy time from to to,
// and returns the proxy times at which the verdict changed.
type judgeRun struct {
	j      Judge
	f      float64 // the drift factor
	hold   time.Duration
	server string
	offAt  []time.Duration
	backAt []time.Duration
}

const testDriftFactor = 0.01

func newJudgeRun(hold time.Duration) *judgeRun {
	return &judgeRun{f: testDriftFactor, hold: hold, server: "a"}
}

func (r *judgeRun) feed(c *fakeClock, from, to time.Duration, rtt time.Duration) {
	for at := from; at < to; at += interval {
		switch r.j.Add(c.sample(at, rtt, 0.5), r.server, window, r.f, r.hold) {
		case Off:
			r.offAt = append(r.offAt, at)
		case Back:
			r.backAt = append(r.backAt, at)
		}
	}
}

func (r *judgeRun) counts() bool { _, off := r.j.Off(); return !off }

// TestClockJudgeFast: a clock at 1.5 is out at the second sample, once,
// and stays out while it runs fast; one at 1.001 is never out.
func TestClockJudgeFast(t *testing.T) {
	r := newJudgeRun(5 * time.Second)
	r.feed(newFakeClock(1.5), 0, time.Minute, time.Millisecond)
	if exp, got := []time.Duration{time.Second}, r.offAt; fmt.Sprint(exp) != fmt.Sprint(got) {
		t.Errorf("out at %v, expected %v", got, exp)
	}
	if r.counts() || len(r.backAt) > 0 {
		t.Errorf("a clock at 1.5 counts (back at %v)", r.backAt)
	}
	if rate := r.j.Rate(); math.Abs(rate-1.5) > 0.001 {
		t.Errorf("rate %g, expected 1.5", rate)
	}

	for _, rate := range []float64{1.001, 0.999, 1.009, 0.991} {
		r := newJudgeRun(5 * time.Second)
		r.feed(newFakeClock(rate), 0, time.Minute, time.Millisecond)
		if !r.counts() || len(r.offAt) > 0 {
			t.Errorf("a clock at %g is out (at %v)", rate, r.offAt)
		}
	}
}

// TestClockJudgeUncertain: a clock at 1.02 behind 50 ms round trips is not
// judged on a 1 s span, whose bounds straddle the limit, but is out once
// the window's span proves it.
func TestClockJudgeUncertain(t *testing.T) {
	r := newJudgeRun(5 * time.Second)
	r.feed(newFakeClock(1.02), 0, time.Minute, 50*time.Millisecond)
	if len(r.offAt) != 1 {
		t.Fatalf("out at %v, expected once", r.offAt)
	}
	if at := r.offAt[0]; at < 2*time.Second || at > window {
		t.Errorf("out at %s, expected once the span proves it, within the window", at)
	}
}

// TestClockJudgeBack: a clock that runs fast, then right again, counts
// again only once a window without the fast part has been in bounds for
// the hold; a doubtful sample starts the hold over.
func TestClockJudgeBack(t *testing.T) {
	const hold = 20 * time.Second
	for _, doubt := range []bool{false, true} {
		t.Run(fmt.Sprint("doubt=", doubt), func(t *testing.T) {
			r := newJudgeRun(hold)
			c := newFakeClock(1.5)
			r.feed(c, 0, 5*time.Second, time.Millisecond)
			c.setRate(5*time.Second, 1)
			fixed := 5 * time.Second
			if !doubt {
				r.feed(c, fixed, 2*time.Minute, time.Millisecond)
			} else {
				r.feed(c, fixed, 30*time.Second, time.Millisecond)
				// One round trip of 4 s: the window's bounds straddle.
				r.feed(c, 30*time.Second, 31*time.Second, 4*time.Second)
				r.feed(c, 31*time.Second, 2*time.Minute, time.Millisecond)
			}
			if len(r.offAt) != 1 || len(r.backAt) != 1 {
				t.Fatalf("out at %v, back at %v: expected once each", r.offAt, r.backAt)
			}
			back := r.backAt[0]
			earliest := fixed + window + hold // the fast part left the window, then the hold
			latest := earliest + 2*interval
			if doubt {
				earliest, latest = 31*time.Second+hold, 31*time.Second+window+hold+2*interval
			}
			if back < earliest || back > latest {
				t.Errorf("back at %s, expected in [%s, %s]", back, earliest, latest)
			}
			if !r.counts() {
				t.Error("does not count after coming back")
			}
		})
	}
}

// TestClockJudgeNewServer: samples of another server are not mixed with
// the last one's, and a backend that is out must show the new server in
// bounds for the hold.
func TestClockJudgeNewServer(t *testing.T) {
	const hold = 5 * time.Second
	r := newJudgeRun(hold)
	r.feed(newFakeClock(1.5), 0, 3*time.Second, time.Millisecond)
	r.server = "b"
	// The new server's clock reads an hour earlier: across servers that
	// would be a rate far below 1.
	c := newFakeClock(1)
	c.at0 -= time.Hour
	r.j.Add(c.sample(3*time.Second, time.Millisecond, 0.5), r.server, window, r.f, hold)
	if rate := r.j.Rate(); !math.IsNaN(rate) {
		t.Errorf("rate %g from one sample of the new server", rate)
	}
	r.feed(c, 4*time.Second, time.Minute, time.Millisecond)
	if len(r.offAt) != 1 || len(r.backAt) != 1 {
		t.Fatalf("out at %v, back at %v: expected once each", r.offAt, r.backAt)
	}
	if back := r.backAt[0]; back < 4*time.Second+hold || back > 4*time.Second+hold+2*interval {
		t.Errorf("back at %s, expected about %s after the new server's first verdict", back, hold)
	}
}

// TestClockJudgeStep: a clock stepped forward by a second expires every key
// a second early; over the window that shows as a rate of about 1.1.
func TestClockJudgeStep(t *testing.T) {
	r := newJudgeRun(5 * time.Second)
	c := newFakeClock(1)
	r.feed(c, 0, 20*time.Second, time.Millisecond)
	c.at0 += time.Second
	r.feed(c, 20*time.Second, 25*time.Second, time.Millisecond)
	if len(r.offAt) != 1 || r.offAt[0] != 20*time.Second {
		t.Errorf("out at %v, expected at 20s", r.offAt)
	}
}

// TestClockJudgeIgnore: with an infinite drift factor (the check off) the
// rate is measured, and nothing is judged.
func TestClockJudgeIgnore(t *testing.T) {
	r := newJudgeRun(5 * time.Second)
	r.f = math.Inf(1)
	r.feed(newFakeClock(1.5), 0, 20*time.Second, time.Millisecond)
	if !r.counts() || len(r.offAt) > 0 {
		t.Errorf("out at %v with the check off", r.offAt)
	}
	if rate := r.j.Rate(); math.Abs(rate-1.5) > 0.001 {
		t.Errorf("rate %g, expected 1.5", rate)
	}
}
