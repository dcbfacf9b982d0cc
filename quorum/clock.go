package quorum

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Whose clock runs at the proxy's rate. Redis expires a key by its own wall
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

// clockParams are how the backends' clocks are sampled and judged.
type clockParams struct {
	// interval is the time between two TIME requests to one backend: at 1 s
	// a sample costs each backend one cheap command a second.
	interval time.Duration
	// window is the span a rate is estimated over. The bounds narrow as it
	// grows: over 10 s, round trips of 1 ms leave ±0.0002, and even two at
	// the default 50 ms backend timeout leave ±0.01; a longer window would
	// only be slower to show a change of rate. Before it fills, the span is
	// shorter (one interval at first), which a rate of 1.5 outruns by far.
	window time.Duration
	// ignore measures but judges nothing: every backend counts whatever its
	// rate, as before this check existed (the negative control of tests).
	ignore bool
}

var defaultClockParams = clockParams{interval: time.Second, window: 10 * time.Second}

// timeCommand asks a backend for its clock.
var timeCommand = backend.KeylessCommand("TIME")

// clockSample is one TIME: the proxy's monotonic clock when the request was
// sent and when its reply came (since the engine's epoch), and the
// backend's clock, read somewhere in between (since the Unix epoch).
type clockSample struct {
	sent, recv time.Duration
	at         time.Duration
}

// rateEstimate is a backend clock's mean rate between two samples,
// relative to the proxy's monotonic clock: rate from the midpoints of the
// round trips, and low and high bounds that hold whatever part of each
// round trip the server read its clock in.
type rateEstimate struct {
	rate, low, high float64
}

// timeResolution is TIME's: microseconds, truncated, at each end.
const timeResolution = float64(time.Microsecond)

// estimate bounds the mean rate of the backend's clock between samples a
// and b (a first); false when their round trips overlap, which bounds
// nothing.
func estimate(a, b clockSample) (rateEstimate, bool) {
	shortest := float64(b.sent - a.recv)
	if shortest <= 0 {
		return rateEstimate{}, false
	}
	longest := float64(b.recv - a.sent)
	passed := float64(b.at - a.at)
	mid := float64(b.sent+b.recv-a.sent-a.recv) / 2
	return rateEstimate{
		rate: passed / mid,
		low:  (passed - timeResolution) / longest,
		high: (passed + timeResolution) / shortest,
	}, true
}

// verdict is what an estimate proves of a rate, against drift_factor.
type verdict uint8

const (
	undecided verdict = iota // the bounds straddle a limit
	within                   // certainly within 1 ± f
	outside                  // certainly outside
)

func (r rateEstimate) verdict(f float64) verdict {
	switch {
	case r.low >= 1-f && r.high <= 1+f:
		return within
	case r.high < 1-f || r.low > 1+f:
		return outside
	}
	return undecided
}

// clockChange is news of a judgement: the backend stopped counting, or
// counts again.
type clockChange uint8

const (
	clockSame clockChange = iota
	clockOff
	clockBack
)

// clockJudge is what the engine knows of one backend's clock.
type clockJudge struct {
	// off is set while the backend does not count, and read on every vote.
	off atomic.Pointer[ClockError]

	mu      sync.Mutex
	server  string        // the server (run_id) the samples are of
	samples []clockSample // oldest first, spanning about the window
	est     rateEstimate
	known   bool // est is of the current samples
	// While off: since when (recv of a sample) every verdict has been
	// within bounds, if the last one was.
	withinSince time.Duration
	inRun       bool
	refusal     bool // the server refused TIME, and that was logged
}

// add records sample s of server's clock and judges the backend against
// drift_factor f; it counts again once within bounds for hold. It reports
// a change of verdict, so that each is logged once.
func (j *clockJudge) add(s clockSample, server string, p clockParams, f float64, hold time.Duration) clockChange {
	j.mu.Lock()
	defer j.mu.Unlock()
	if server != j.server {
		// Another server has another clock, which the samples of the last
		// one say nothing of; one that does not count must show a rate in
		// bounds for hold all over again.
		j.server, j.samples, j.known, j.inRun = server, j.samples[:0], false, false
	}
	j.samples = append(j.samples, s)
	for len(j.samples) > 2 && s.sent-j.samples[1].sent >= p.window {
		j.samples = append(j.samples[:0], j.samples[1:]...)
	}
	if len(j.samples) < 2 {
		return clockSame
	}
	est, ok := estimate(j.samples[0], s)
	if !ok {
		return clockSame
	}
	j.est, j.known = est, true
	if p.ignore {
		return clockSame
	}
	off := j.off.Load() != nil
	switch est.verdict(f) {
	case outside:
		j.inRun = false
		j.off.Store(&ClockError{Rate: est.rate, Bound: f})
		if !off {
			return clockOff
		}
	case within:
		if !off {
			return clockSame
		}
		if !j.inRun {
			j.inRun, j.withinSince = true, s.recv
		}
		if s.recv-j.withinSince >= hold {
			j.inRun = false
			j.off.Store(nil)
			return clockBack
		}
		j.off.Store(&ClockError{Rate: est.rate, Bound: f})
	default:
		j.inRun = false
	}
	return clockSame
}

// rate is the last estimate of the backend's clock rate, NaN until there
// is one for its current server.
func (j *clockJudge) rate() float64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.known {
		return math.NaN()
	}
	return j.est.rate
}

// clocks samples every backend's clock and judges it; its zero value
// samples nothing.
type clocks struct {
	p      clockParams
	f      float64       // drift_factor
	hold   time.Duration // max_ttl
	clock  clockwork.Clock
	epoch  time.Time
	judges []clockJudge // one per node

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// prepare makes a judge for each of n nodes. It comes before the nodes
// connect: a reply delivered from then on asks its node's judge (err).
func (c *clocks) prepare(n int, p clockParams, clock clockwork.Clock, f float64, hold time.Duration) {
	c.p, c.f, c.hold, c.clock, c.epoch = p, f, hold, clock, clock.Now()
	c.judges = make([]clockJudge, n)
}

// start begins sampling the nodes' clocks, until close.
func (c *clocks) start(nodes []*node) {
	c.stop = make(chan struct{})
	c.done.Add(1)
	go c.run(nodes)
}

// close stops the sampling and waits for it to end. Requests still in
// flight complete into a buffer that nobody reads.
func (c *clocks) close() {
	if c.stop == nil {
		return
	}
	c.stopOnce.Do(func() { close(c.stop) })
	c.done.Wait()
}

// err is a *ClockError while node i's clock runs outside the drift
// allowance, and nil otherwise.
func (c *clocks) err(i int) error {
	if i < len(c.judges) {
		if ce := c.judges[i].off.Load(); ce != nil {
			return ce
		}
	}
	return nil
}

// rate is node i's clock rate as last estimated, NaN until known.
func (c *clocks) rate(i int) float64 {
	if i < len(c.judges) {
		return c.judges[i].rate()
	}
	return math.NaN()
}

// clockReply is the outcome of a TIME request, and when it came.
type clockReply struct {
	node  int
	recv  time.Time
	reply backend.Reply
	err   error
}

// clockReplies hears the TIME replies, stamped by the engine's clock. Its
// channel is buffered for one per node, the most that are ever in flight,
// so Complete never blocks a Pipe's reader.
type clockReplies struct {
	c     chan clockReply
	clock clockwork.Clock
}

func (c clockReplies) Complete(i int, r backend.Reply, err error) {
	c.c <- clockReply{node: i, recv: c.clock.Now(), reply: r, err: err}
}

// run sends TIME to every connected backend each interval, one request in
// flight per backend at most, and judges each sample as it comes. A
// backend without a connection is not sampled: a sample is not worth a
// dial, and its clock will be judged once it is connected again.
func (c *clocks) run(nodes []*node) {
	defer c.done.Done()
	replies := clockReplies{c: make(chan clockReply, len(nodes)), clock: c.clock}
	reqs := make([]backend.Request, len(nodes))
	sent := make([]time.Time, len(nodes))
	busy := make([]bool, len(nodes))
	tick := c.clock.NewTicker(c.p.interval)
	defer tick.Stop()
	for {
		for i, n := range nodes {
			if status, _ := n.pipe.Status(); busy[i] || status != backend.StatusUp {
				continue
			}
			busy[i], sent[i] = true, c.clock.Now()
			reqs[i] = backend.Request{To: replies, ID: i, Cmd: timeCommand}
			n.pipe.Send(&reqs[i])
		}
	wait:
		for {
			select {
			case <-c.stop:
				return
			case <-tick.Chan():
				break wait
			case r := <-replies.c:
				busy[r.node] = false
				c.record(nodes[r.node], sent[r.node], r)
			}
		}
	}
}

// record judges the backend on a TIME reply and logs a change of verdict.
func (c *clocks) record(n *node, sent time.Time, r clockReply) {
	j := &c.judges[n.index]
	at, err := r.reply.Time()
	if r.err != nil {
		err = r.err
	}
	switch {
	case err == nil:
	case r.err == nil || backend.IsServerError(err):
		// Its ACL denies TIME, or it is not Redis: its clock cannot be
		// checked, and it counts as it did before the check existed.
		j.mu.Lock()
		news := !j.refusal
		j.refusal = true
		j.mu.Unlock()
		if news {
			n.log.Warn("backend does not answer TIME: its clock rate is not checked, and it counts toward quorum whatever the rate; allow TIME to lockproxy's user", "err", err)
		}
		return
	default:
		return // the connection failed: no sample this time
	}
	n.mu.Lock()
	server := n.serverID
	n.mu.Unlock()
	s := clockSample{sent: sent.Sub(c.epoch), recv: r.recv.Sub(c.epoch), at: at}
	change := j.add(s, server, c.p, c.f, c.hold)
	if change != clockSame {
		defer n.changed() // whether a quorum counts may have changed
	}
	switch change {
	case clockOff:
		j.mu.Lock()
		est := j.est
		j.mu.Unlock()
		n.log.Error("backend's clock runs at a rate outside the drift allowance: its keys expire early or late, so its replies do not count toward quorum until its rate has been within bounds for max_ttl",
			"clock_rate", est.rate, "clock_rate_low", est.low, "clock_rate_high", est.high, "drift_factor", c.f)
	case clockBack:
		n.log.Info("backend's clock rate has been within the drift allowance for max_ttl: its replies count toward quorum again",
			"clock_rate", j.rate(), "drift_factor", c.f)
	}
}
