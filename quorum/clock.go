package quorum

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
	"github.com/lockproxy/lockproxy/quorum/internal/clockrate"
)

// Sampling each backend's clock, for the judge of its rate
// (internal/clockrate, whose comment says why a backend whose clock runs
// off the proxy's rate must not count, and how the rate is bounded). Every
// interval the engine sends TIME on each backend's connection (behind
// whatever lock commands are queued there: no connection of its own) and
// notes the engine's clock before sending and on the reply.

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

// nodeClock is what the engine knows of one backend's clock.
type nodeClock struct {
	judge clockrate.Judge
	// off is set while the backend does not count, and read on every vote.
	off     atomic.Pointer[ClockError]
	refusal atomic.Bool // the server refused TIME, and that was logged
	// short is a hold shorter than max_ttl for one run within bounds,
	// which the witnesses' horizons proved (settle.go); nil when none.
	short atomic.Pointer[shortHold]
}

// shortHold is how long the run within bounds that started at run must
// last before the backend counts again: until every lease that its fast
// clock may have expired early is gone.
type shortHold struct{ run, hold time.Duration }

// clocks samples every backend's clock and judges it; its zero value
// samples nothing.
type clocks struct {
	p      clockParams
	f      float64       // drift_factor
	hold   time.Duration // max_ttl
	clock  clockwork.Clock
	epoch  time.Time
	judges []nodeClock // one per node

	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// prepare makes a judge for each of n nodes. It comes before the nodes
// connect: a reply delivered from then on asks its node's judge (err).
func (c *clocks) prepare(n int, p clockParams, clock clockwork.Clock, f float64, hold time.Duration) {
	c.p, c.f, c.hold, c.clock, c.epoch = p, f, hold, clock, clock.Now()
	c.judges = make([]nodeClock, n)
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

// runSince reports, while node i does not count for its clock, since when
// its rate has been within bounds, by the engine's clock.
func (c *clocks) runSince(i int) (time.Time, bool) {
	if i >= len(c.judges) {
		return time.Time{}, false
	}
	since, ok := c.judges[i].judge.Run()
	return c.epoch.Add(since), ok
}

// shorten lets node i count once its run within bounds that started at
// since has lasted hold, or the window if that is longer: the leases that
// its clock may have expired early are gone by then.
func (c *clocks) shorten(i int, since time.Time, hold time.Duration) {
	h := &shortHold{run: since.Sub(c.epoch), hold: max(hold, c.p.window)}
	if old := c.judges[i].short.Load(); old == nil || old.run != h.run || old.hold > h.hold {
		c.judges[i].short.Store(h)
	}
}

// rate is node i's clock rate as last estimated, NaN until known.
func (c *clocks) rate(i int) float64 {
	if i < len(c.judges) {
		return c.judges[i].judge.Rate()
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
		if !j.refusal.Swap(true) {
			n.log.Warn("backend does not answer TIME: its clock rate is not checked, and it counts toward quorum whatever the rate; allow TIME to lockproxy's user", "err", err)
		}
		return
	default:
		return // the connection failed: no sample this time
	}
	n.mu.Lock()
	server := n.serverID
	n.mu.Unlock()
	s := clockrate.Sample{Sent: sent.Sub(c.epoch), Recv: r.recv.Sub(c.epoch), At: at}
	f := c.f
	if c.p.ignore {
		f = math.Inf(1) // measured, never judged
	}
	hold := c.hold
	if run, ok := j.judge.Run(); ok {
		if short := j.short.Load(); short != nil && short.run == run {
			hold = min(hold, short.hold)
		}
	}
	change := j.judge.Add(s, server, c.p.window, f, hold)
	est, off := j.judge.Off()
	if off {
		j.off.Store(&ClockError{Rate: est.Rate, Bound: c.f})
	} else {
		j.off.Store(nil)
	}
	if change != clockrate.Same {
		defer n.changed() // whether a quorum counts may have changed
	}
	switch change {
	case clockrate.Off:
		n.log.Error("backend's clock runs at a rate outside the drift allowance: its keys expire early or late, so its replies do not count toward quorum until its rate has been within bounds for a window and the leases it may have lost are gone (max_ttl where the other backends' horizons cannot tell)",
			"clock_rate", est.Rate, "clock_rate_low", est.Low, "clock_rate_high", est.High, "drift_factor", c.f)
	case clockrate.Back:
		n.log.Info("backend's clock rate has been within the drift allowance long enough: its replies count toward quorum again",
			"clock_rate", est.Rate, "drift_factor", c.f)
	}
}
