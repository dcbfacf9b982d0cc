package quorum

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
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
func (c *fakeClock) sample(sent, rtt time.Duration, read float64) clockSample {
	return clockSample{sent: sent, recv: sent + rtt, at: c.read(sent + time.Duration(float64(rtt)*read))}
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
					if est.low > rate || est.high < rate {
						t.Errorf("%s: [%g, %g] misses the rate", name, est.low, est.high)
					}
					// Wider than the round trips allow only by TIME's resolution.
					if width, most := est.high-est.low, rate*float64(2*rtt)/float64(span-rtt)+4e-6/span.Seconds(); width > most {
						t.Errorf("%s: bounds %g wide, at most %g expected", name, width, most)
					}
					if math.Abs(est.rate-rate) > est.high-est.low {
						t.Errorf("%s: estimate %g", name, est.rate)
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
		if got := (rateEstimate{low: tc.low, high: tc.high}).verdict(0.01); got != tc.want {
			t.Errorf("[%g, %g]: verdict %d, want %d", tc.low, tc.high, got, tc.want)
		}
	}
}

// judgeRun feeds a judge one sample a second, from proxy time from to to,
// and returns the proxy times at which the verdict changed.
type judgeRun struct {
	j      clockJudge
	p      clockParams
	hold   time.Duration
	server string
	offAt  []time.Duration
	backAt []time.Duration
}

const testDriftFactor = 0.01

func newJudgeRun(hold time.Duration) *judgeRun {
	return &judgeRun{p: defaultClockParams, hold: hold, server: "a"}
}

func (r *judgeRun) feed(c *fakeClock, from, to time.Duration, rtt time.Duration) {
	for at := from; at < to; at += r.p.interval {
		switch r.j.add(c.sample(at, rtt, 0.5), r.server, r.p, testDriftFactor, r.hold) {
		case clockOff:
			r.offAt = append(r.offAt, at)
		case clockBack:
			r.backAt = append(r.backAt, at)
		}
	}
}

func (r *judgeRun) counts() bool { return r.j.off.Load() == nil }

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
	if rate := r.j.rate(); math.Abs(rate-1.5) > 0.001 {
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
	if at := r.offAt[0]; at < 2*time.Second || at > r.p.window {
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
			earliest := fixed + r.p.window + hold // the fast part left the window, then the hold
			latest := earliest + 2*r.p.interval
			if doubt {
				earliest, latest = 31*time.Second+hold, 31*time.Second+r.p.window+hold+2*r.p.interval
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
	r.j.add(c.sample(3*time.Second, time.Millisecond, 0.5), r.server, r.p, testDriftFactor, hold)
	if rate := r.j.rate(); !math.IsNaN(rate) {
		t.Errorf("rate %g from one sample of the new server", rate)
	}
	r.feed(c, 4*time.Second, time.Minute, time.Millisecond)
	if len(r.offAt) != 1 || len(r.backAt) != 1 {
		t.Fatalf("out at %v, back at %v: expected once each", r.offAt, r.backAt)
	}
	if back := r.backAt[0]; back < 4*time.Second+hold || back > 4*time.Second+hold+2*r.p.interval {
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

// TestClockJudgeIgnore: with the check off the rate is measured, and
// nothing is judged.
func TestClockJudgeIgnore(t *testing.T) {
	r := newJudgeRun(5 * time.Second)
	r.p.ignore = true
	r.feed(newFakeClock(1.5), 0, 20*time.Second, time.Millisecond)
	if !r.counts() || len(r.offAt) > 0 {
		t.Errorf("out at %v with the check off", r.offAt)
	}
	if rate := r.j.rate(); math.Abs(rate-1.5) > 0.001 {
		t.Errorf("rate %g, expected 1.5", rate)
	}
}

// newClockCluster starts one backend per rate, its clock running at that
// rate (0: the real clock), and an engine over them.
func newClockCluster(t *testing.T, rates []float64, cfg Config) *cluster {
	t.Helper()
	return newSteppedCluster(t, rates, cfg)
}

// samples is how many samples the estimate of backend i spans now.
func (e *Engine) samples(i int) int {
	j := &e.clocks.judges[i]
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.samples)
}

// TestClockRateFast: a backend whose clock runs at 1.5 times the proxy's
// is found out at its second sample, one interval of stepped time after
// the first, and its votes then do not count; it is logged once.
func TestClockRateFast(t *testing.T) {
	var logged syncBuffer
	c := newClockCluster(t, []float64{1.5, 0, 0}, Config{
		DisableRestartQuarantine: true,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	})
	if st := c.engine.Backends()[0]; st.State != StateUp {
		t.Fatalf("judged %s on one sample", st.State)
	}
	c.step(t, defaultClockParams.interval)
	if st := c.engine.Backends()[0]; st.State != StateClock {
		t.Fatalf("%s after two samples", st.State)
	}
	if rate := c.engine.Backends()[0].ClockRate; math.Abs(rate-1.5) > 1e-6 {
		t.Errorf("measured rate %g, expected 1.5", rate)
	}
	for i, st := range c.engine.Backends()[1:] {
		if st.State != StateUp {
			t.Errorf("backend %d: %s", i+1, st.State)
		}
	}
	var ce *ClockError
	if err := c.engine.Probe(t.Context())[0].Err; !errors.As(err, &ce) {
		t.Errorf("Probe: expected a *ClockError, got %v", err)
	}

	// With backend 2 down, backend 1 alone counts.
	c.servers[2].Kill()
	_, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second)
	var nq *NoQuorumError
	if !errors.As(err, &nq) || !strings.Contains(nq.Error(), "clock rate 1.50") {
		t.Fatalf("expected NOQUORUM naming the clock rate, got %v", err)
	}
	if st := c.engine.Backends()[0]; st.Failures[KindClock] == 0 || st.LastError != KindClock {
		t.Errorf("the fast backend's vote is not counted as a clock failure: %+v", st)
	}

	// More samples, still out, not logged again.
	for range 3 {
		c.step(t, defaultClockParams.interval)
	}
	if st := c.engine.Backends()[0]; st.State != StateClock {
		t.Errorf("back to %s", st.State)
	}
	if n := strings.Count(logged.String(), "clock runs at a rate outside"); n != 1 {
		t.Errorf("logged %d times, expected once:\n%s", n, logged.String())
	}
}

// TestClockRateQuorumLost: two backends of three out for their clocks
// leave no quorum, which QuorumAvailable says and the log tells once,
// though every connection is up.
func TestClockRateQuorumLost(t *testing.T) {
	var logged syncBuffer
	c := newClockCluster(t, []float64{1.5, 1.5, 0}, Config{
		DisableRestartQuarantine: true,
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	})
	if !c.engine.QuorumAvailable() {
		t.Fatal("no quorum before the clocks were measured")
	}
	c.step(t, defaultClockParams.interval)
	waitFor(t, func() bool { return !c.engine.QuorumAvailable() })
	for i, st := range c.engine.Backends()[:2] {
		if st.State != StateClock {
			t.Errorf("backend %d: %s", i, st.State)
		}
	}
	if n := strings.Count(logged.String(), "quorum lost"); n != 1 {
		t.Errorf("%d lines say the quorum was lost, expected 1:\n%s", n, logged.String())
	}
}

// TestClockRateSlightlyFast: a clock at 1.001, well inside drift_factor,
// is proved in bounds and counts.
func TestClockRateSlightlyFast(t *testing.T) {
	c := newClockCluster(t, []float64{1.001, 0, 0}, Config{DisableRestartQuarantine: true})
	for range 3 {
		c.step(t, defaultClockParams.interval)
	}
	if n := c.engine.samples(0); n < 4 {
		t.Fatalf("%d samples after three steps", n)
	}
	j := &c.engine.clocks.judges[0]
	j.mu.Lock()
	est := j.est
	j.mu.Unlock()
	if v := est.verdict(c.engine.cfg.DriftFactor); v != within || math.Abs(est.rate-1.001) > 1e-6 {
		t.Errorf("estimate %+v (verdict %d), expected 1.001, proved within bounds", est, v)
	}
	if st := c.engine.Backends()[0]; st.State != StateUp {
		t.Fatalf("state %s", st.State)
	}
	c.servers[2].Kill()
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Fatalf("acquire with the slightly fast backend and one other: %v", err)
	}
}

// TestClockRateBack: a backend out for its clock that comes back as a
// server with a right clock counts again once proved in bounds for
// max_ttl (the default minute, of stepped samples), not a step before;
// each change is logged once.
func TestClockRateBack(t *testing.T) {
	var logged syncBuffer
	c := newClockCluster(t, []float64{1.5, 0, 0}, Config{
		DisableRestartQuarantine: true, // the clock alone keeps it out
		Logger:                   slog.New(slog.NewTextHandler(&logged, nil)),
	})
	c.step(t, defaultClockParams.interval)
	if st := c.engine.Backends()[0]; st.State != StateClock {
		t.Fatalf("%s after two samples at 1.5", st.State)
	}
	c.servers[0].SetClockRate(0)
	c.servers[0].Restart()
	c.connected(t, 0)
	// The new server's first two samples prove its rate in bounds, from
	// the second on: a minute from then it counts, and not before.
	c.step(t, defaultClockParams.interval)
	c.step(t, defaultClockParams.interval)
	if rate := c.engine.Backends()[0].ClockRate; math.Abs(rate-1) > 1e-6 {
		t.Fatalf("rate %g after the restart, expected 1", rate)
	}
	c.step(t, defaultMaxTTL-defaultClockParams.interval)
	if st := c.engine.Backends()[0]; st.State != StateClock {
		t.Fatalf("%s a second before the rate was proved in bounds for max_ttl", st.State)
	}
	c.step(t, defaultClockParams.interval)
	if st := c.engine.Backends()[0]; st.State != StateUp {
		t.Fatalf("%s once the rate was proved in bounds for max_ttl", st.State)
	}
	c.servers[2].Kill()
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Fatalf("acquire with the backend back and one other: %v", err)
	}
	text := logged.String()
	if strings.Count(text, "clock runs at a rate outside") != 1 || strings.Count(text, "count toward quorum again") != 1 {
		t.Errorf("expected one line each way:\n%s", text)
	}
}

// TestClockRateHazard shows why the check exists: a backend at 1.5 forgets
// a lock after two thirds of its TTL. With the check off (as lockproxy was
// before it) a second holder is granted the lock, on the fast backend and
// one that missed the first, while the first holder's validity still
// runs. With it, the fast backend's votes do not count, and nobody is.
func TestClockRateHazard(t *testing.T) {
	const ttl = 6 * time.Second // the fast backend forgets it after 4 s
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			c := newClockCluster(t, []float64{1.5, 0, 0}, Config{
				DisableRestartQuarantine: true,
				MaxTTL:                   10 * time.Second,
				sampling:                 clockParams{ignore: !check},
			})
			// Measured either way.
			c.step(t, defaultClockParams.interval)
			if rate := c.engine.Backends()[0].ClockRate; math.Abs(rate-1.5) > 1e-6 {
				t.Fatalf("rate %g, expected 1.5", rate)
			}
			key := uniqueKey(t)
			c.servers[2].Kill()
			res, err := c.engine.acquire(t.Context(), key, "first", ttl)
			if check {
				// The fast backend does not count, and backend 2 is down.
				if exp, got := "noquorum", outcome(err); exp != got {
					t.Fatalf("first holder: expected %s, got %v", exp, err)
				}
			} else {
				// The grant's top-up finds backend 2 down, as its rounds
				// would on the real clock, before it restarts.
				c.topUpsRun(t, topUpDelays[len(topUpDelays)-1])
			}
			c.servers[2].Restart() // empty
			c.connected(t, 2)
			if check {
				// Once the restarted backend records the set again.
				redistest.Eventually(t, func() string {
					if res, err = c.engine.acquire(t.Context(), key, "first", ttl); err != nil {
						return "first holder: " + err.Error()
					}
					return ""
				})
			}
			if err != nil {
				t.Fatalf("first holder: %v", err)
			}
			validUntil := c.clock.Now().Add(res.Validity)
			if check {
				// Its top-up copies it to the fast backend now, not after
				// the step below.
				c.topUpsRun(t, topUpDelays[len(topUpDelays)-1])
			}

			c.step(t, 4*time.Second+time.Millisecond)
			if v := c.value(t, 0, key); v != "" {
				t.Fatalf("the fast backend kept the key through 6 s of its clock: %q", v)
			}
			if !c.clock.Now().Before(validUntil) {
				t.Fatalf("the fast backend kept the key through the first holder's validity: this run shows nothing")
			}
			_, err = c.engine.acquire(t.Context(), key, "second", ttl)
			left := c.clock.Until(validUntil)
			switch {
			case !check && err == nil && left > 0:
				t.Logf("without the check: a second holder granted %s before the first holder's validity ends", left.Round(time.Millisecond))
			case !check:
				t.Fatalf("without the check: expected a second holder within the first's validity, got %v (%s left)", err, left)
			case !errors.Is(err, ErrNotAcquired):
				t.Fatalf("with the check: expected ErrNotAcquired, got %v", err)
			}
		})
	}
}

// TestCloseStopsClockSampling: Close ends the sampling goroutine, even with
// a request in flight to a paused backend.
func TestCloseStopsClockSampling(t *testing.T) {
	servers := redistest.StartN(t, 2)
	before := runtime.NumGoroutine()
	e, err := New(Config{
		Backends:                 []string{servers[0].URL(), servers[1].URL()},
		DisableRestartQuarantine: true,
		Logger:                   slog.New(slog.DiscardHandler),
		sampling:                 clockParams{interval: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.samples(0) >= 3 })
	servers[1].Pause()
	defer servers[1].Resume()
	waitFor(t, func() bool { return e.samples(0) >= 6 }) // backend 1's TIME is in flight
	e.Close()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}
