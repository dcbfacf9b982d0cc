package quorum

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/jonboulle/clockwork"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Config configures an Engine. The zero value of every field but Backends
// means its default.
type Config struct {
	// Backends are go-redis URLs (redis://, rediss://, unix://) of the N
	// independent masters. Required.
	Backends []string
	// NodeTimeout bounds each request to one backend. Default: 50ms.
	NodeTimeout time.Duration
	// DriftFactor is the share of the TTL allowed for clock drift between
	// backends; drift = TTL × DriftFactor + 2ms. It must be in (0, 0.5): at
	// half the TTL or more the allowance is a misconfiguration, not drift.
	// Default: 0.01.
	DriftFactor float64
	// MaxTTL is the longest lock TTL accepted, and how long a restarted
	// backend stays in quarantine. Default: 60s.
	MaxTTL time.Duration
	// DisableRestartQuarantine lets a backend count toward quorums as soon as
	// it answers, even right after a restart. Safe only when the backends
	// persist every write (appendfsync always). A failover to a replica is
	// quarantined all the same. Default: false.
	DisableRestartQuarantine bool
	// Fencing mints a fencing token for every acquisition (fence.go), at
	// the cost of two more writes in its script on every backend.
	// Default: false.
	Fencing bool
	// BackendSetEpoch numbers the backend set: every proxy of an epoch must
	// have the same Backends, and a change of them raises it and is written
	// to the backends by Adopt, from when the proxies of the older epoch
	// are refused by them (members.go). At least 1. Default: 1.
	BackendSetEpoch int
	// SetLabel names what the backend set serves beyond its members, such
	// as a shard group's range of hash slots. It is part of the set's
	// fingerprint, so that proxies that give the same backends different
	// ranges count different sets, and each is refused where the other's
	// record is (members.go). Default: none.
	SetLabel string
	// TLSConfig, when set, is used for the rediss:// backends in place of
	// go-redis's default (the system's CAs, no client certificate): its CAs,
	// client certificate and minimum version. Its ServerName, when empty,
	// is each backend's host, and a URL's skip_verify=true still applies.
	// It has no effect on redis:// and unix:// backends. Default: none.
	TLSConfig *tls.Config
	// Logger receives one line per backend state change. Default: slog.Default().
	Logger *slog.Logger
	// Observer, if set, hears of every backend vote (metrics).
	Observer Observer

	// skipIdentity turns the identity checks of admit.go off: the tests'
	// control run, which shows what they prevent.
	skipIdentity bool
	// skipReseed lets a backend that may have lost its fencing counter
	// count without a re-seed (seed.go): the tests' control.
	skipReseed bool
	// sampling is how the backends' clocks are sampled; tests shorten it.
	// Default: defaultClockParams.
	sampling clockParams
	// clock is the engine's time: every wait it schedules (quarantines,
	// clock samples, record rounds, re-seeds, renewal and top-up times,
	// waiters' retries) and every time a lock's validity is measured by.
	// Only what bounds or measures one exchange on the wire (the backend
	// timeout, Probe's round trip) runs on the real clock, so that a hung
	// backend still times out.
	// Tests step a fake one, with the backends' clocks stepped alike
	// (redistest.SteppedClock). Default: the real clock.
	clock clockwork.Clock
}

const (
	defaultNodeTimeout = 50 * time.Millisecond
	defaultDriftFactor = 0.01
	defaultMaxTTL      = 60 * time.Second
)

func (c Config) withDefaults() Config {
	if c.NodeTimeout == 0 {
		c.NodeTimeout = defaultNodeTimeout
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = defaultDriftFactor
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = defaultMaxTTL
	}
	if c.BackendSetEpoch == 0 {
		c.BackendSetEpoch = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.sampling.interval == 0 {
		c.sampling.interval = defaultClockParams.interval
	}
	if c.sampling.window == 0 {
		c.sampling.window = defaultClockParams.window
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case len(c.Backends) == 0:
		return errors.New("quorum: no backends")
	case c.NodeTimeout < 0:
		return fmt.Errorf("quorum: backend timeout %s is negative", c.NodeTimeout)
	// At 0.5 or more the allowance would take half of every TTL or more,
	// leaving clients a fraction of the lock they asked for: a factor
	// meant as a percentage, not a drift. Written so that NaN, which every
	// comparison fails, is outside too.
	case !(c.DriftFactor > 0 && c.DriftFactor < 0.5):
		return fmt.Errorf("quorum: drift factor %g is outside (0, 0.5)", c.DriftFactor)
	case c.MaxTTL < 0:
		return fmt.Errorf("quorum: max ttl %s is negative", c.MaxTTL)
	case c.BackendSetEpoch < 0:
		return fmt.Errorf("quorum: backend set epoch %d is negative", c.BackendSetEpoch)
	}
	return nil
}

// Result describes a lock that a Lock took or extended, or what an
// Unlock left.
type Result struct {
	// Validity is how long the lock is known held from now on:
	// TTL − elapsed − drift.
	Validity time.Duration
	// Fence is the lock's fencing token, for an acquisition that mints one
	// (fence.go); 0 otherwise.
	Fence int64
	// HolderTTL is, for an OpHashAcquire refused or undecided, the least
	// positive PTTL among the backends that refused it: the most its
	// holder has left, which Redisson's client waits at most; 0 when none
	// told.
	HolderTTL time.Duration
	// Split is, for a Lock that failed, whether some backends refused it
	// but those, with the ones that had not answered, were too few to be
	// a quorum of another holder's: the attempt lost a race between
	// contenders that may all have failed (votes split while a backend
	// was down, or three ways), and once their rollbacks land the lock
	// may be free. Nobody's release will tell the waiters so: a
	// contender should try again soon, rather than wait for a release
	// or sleep out HolderTTL. Lock has tried once more already
	// (retrySplit).
	Split bool
	// Released is, for an OpHashRelease, whether the lock was released
	// (its last hold); false when the owner still holds it.
	Released bool
	// HoldCount is, for an OpHashRelease that left the lock held, how many
	// holds the owner still has: the count a quorum has at least.
	HoldCount int64
	// Emptied is, for an OpReadRelease or OpWriteRelease that released,
	// whether a quorum answered that the whole lock went with the owner's
	// hold: no other reader, nor the owner's read hold, was left.
	Emptied bool
}

// Engine runs Redlock operations over its backends. It keeps no lock state
// of its own, so any number of engines (proxy instances) may share the same
// backends. It is safe for concurrent use.
type Engine struct {
	cfg       Config
	clock     clockwork.Clock // cfg.clock
	nodes     []*node
	quorum    int
	rollbacks rollbacks
	servers   servers
	clocks    clocks          // each backend's clock rate (clock.go)
	order     [64]orderStripe // fanout's send order, striped by key
	topUps    topUpCounts     // locks granted on a bare quorum, topped up (topup.go)
	splits    splitCounts     // split acquisitions tried again (split.go)
	set       admit.Set       // the backend set the engine counts (members.go)
	setToken  string          // set.Token(), which every lease script is sent
	values    *valueScripts   // the scripts that read locks' values, fenced or not
	fences    fenceCounts
	waits     waits      // callers waiting for held keys (waits.go)
	clockMu   sync.Mutex // sendClocked's order
	lastClock int64      // the last clock floor it sent, in µs
	hooks     hooks
	startLog  *startLog // the backends' lines until New has returned

	closed      chan struct{} // closed by Close: background work ends
	closeOnce   sync.Once
	running     sync.WaitGroup // the background work
	recordsNews chan struct{}  // askRecords
	// superseded is set once the records showed another set's final
	// record (admit.Claims); only readRecords, one at a time, uses it.
	superseded      bool
	unrecordedNoted string        // the last noteUnrecorded logged
	seedNews        chan struct{} // a re-seed ended (seed.go)

	// Whether a quorum of backends counts, as last logged (quorum.go).
	built         atomic.Bool // New has returned: the nodes are all there
	countingMu    sync.Mutex
	hasQuorum     atomic.Bool
	noted         bool
	countedBefore []bool // which backends counted, as last noted
}

// New validates cfg, connects to every backend at once and returns an
// Engine. It fails on a bad URL or an invalid setting, and when two
// backends are the same redis-server (the same run_id, under two names or
// twice under one), which would count twice toward quorum. It waits for
// each backend at most about the backend timeout; one that cannot be
// reached then is connected to, and checked, when a request needs it.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, clock: cfg.clock, quorum: admit.Majority(len(cfg.Backends)), hooks: negativeControl, closed: make(chan struct{}), seedNews: make(chan struct{}, 1), recordsNews: make(chan struct{}, 1)}
	where := make([]string, len(cfg.Backends))
	for i, u := range cfg.Backends {
		var err error
		if where[i], err = backend.Where(u); err != nil {
			return nil, fmt.Errorf("backend %d: %w", i, err)
		}
	}
	e.startLog = &startLog{next: cfg.Logger.Handler()}
	if len(measureOff) > 0 {
		cfg.Logger.Warn("this build is made for measuring: it leaves out what these features keep safe; do not run it for locks", "without", measureOff.String())
	}
	defer e.startLog.flush(0) // those of a failed start too
	e.values = valuesOf(cfg.Fencing)
	e.set = newBackendSet(cfg.BackendSetEpoch, where, cfg.SetLabel)
	e.setToken = e.set.Token()
	for i, u := range cfg.Backends {
		n, err := newNode(i, u, e)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.nodes = append(e.nodes, n)
	}
	e.servers.nodes = e.nodes
	e.clocks.prepare(len(e.nodes), cfg.sampling, cfg.clock, cfg.DriftFactor, cfg.MaxTTL)
	if err := e.connectAll(); err != nil {
		e.Close()
		return nil, err
	}
	e.clocks.start(e.nodes)
	// A first start records the set on backends that have none, before
	// the engine serves: then its first lock is as quick as any.
	if !e.recordsSettled() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.NodeTimeout)
		e.readRecords(ctx)
		cancel()
	}
	e.running.Add(1)
	go e.watchRecords()
	e.subscribe()
	e.awaitSeeds(2 * cfg.NodeTimeout)
	e.startLog.flush(len(e.nodes))
	e.built.Store(true)
	e.noteCounting()
	return e, nil
}

// connectAll connects to every backend and returns an error naming both
// backends of the first pair that are one server.
func (e *Engine) connectAll() error {
	errs := make([]error, len(e.nodes))
	var wg sync.WaitGroup
	for i, n := range e.nodes {
		wg.Go(func() {
			// The dial and greeting take at most one backend timeout, and a
			// connection that owes replies longer is cut.
			ctx, cancel := context.WithTimeout(context.Background(), 3*e.cfg.NodeTimeout)
			defer cancel()
			_, errs[i] = n.pipe.Do(ctx, backend.KeylessCommand("PING"))
		})
	}
	wg.Wait()
	for i, err := range errs {
		var dup *DuplicateError
		if errors.As(err, &dup) {
			// In the order of the configuration, whichever connected first.
			first, second := dup.Addr, e.nodes[i].addr
			if slices.IndexFunc(e.nodes, func(n *node) bool { return n.addr == first }) > i {
				first, second = second, first
			}
			return fmt.Errorf("quorum: backends %s and %s are the same redis-server (run_id %s): it would have two votes", first, second, dup.RunID)
		}
	}
	return nil
}

// Close stops sampling the backends' clocks and closes every backend
// connection.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() { close(e.closed) })
	e.running.Wait()
	e.clocks.close()
	e.waits.close()
	e.startLog.close()
	// Concurrently: a backend being dialled holds its close for up to the
	// backend timeout, and one should not add to another.
	var (
		mu   sync.Mutex
		errs *multierror.Error
		wg   sync.WaitGroup
	)
	for _, n := range e.nodes {
		wg.Go(func() {
			if err := n.pipe.Close(); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("backend %s: %w", n.addr, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs.ErrorOrNil()
}

// MaxTTL returns the longest TTL the engine accepts.
func (e *Engine) MaxTTL() time.Duration { return e.cfg.MaxTTL }

// BackendSet names the backend set the engine counts, as the set records
// on the backends name it: "epoch:N:fingerprint", the fingerprint being
// of the members' host:port/db, in any order. Every proxy of one
// deployment shows the same.
func (e *Engine) BackendSet() string { return e.set.Name() }

// Quorum returns how many backends must agree: N/2+1.
func (e *Engine) Quorum() int { return e.quorum }

func (e *Engine) checkTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > e.cfg.MaxTTL {
		return &TTLError{TTL: ttl, Max: e.cfg.MaxTTL}
	}
	return nil
}
