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

// newClockCluster starts one backend per rate, its clock running at that
// rate (0: the real clock), and an engine over them.
func newClockCluster(t *testing.T, rates []float64, cfg Config) *cluster {
	t.Helper()
	return newSteppedCluster(t, rates, cfg)
}

// samples is how many samples the estimate of backend i spans now.
func (e *Engine) samples(i int) int {
	return len(e.clocks.judges[i].judge.Samples())
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
	// The line follows the change that QuorumAvailable reads.
	waitFor(t, func() bool { return strings.Contains(logged.String(), "quorum lost") })
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
	est, _ := c.engine.clocks.judges[0].judge.Off()
	if f := c.engine.cfg.DriftFactor; est.Low < 1-f || est.High > 1+f || math.Abs(est.Rate-1.001) > 1e-6 {
		t.Errorf("estimate %+v, expected 1.001, proved within bounds", est)
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
