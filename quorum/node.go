package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// node is one backend master and what the engine knows of its restarts.
type node struct {
	index int
	addr  string
	pipe  *backend.Pipe
	log   *slog.Logger
	// startLog is the engine's, told when the backend connects.
	startLog *startLog
	stats    nodeStats
	servers  *servers  // the engine's: which backend counts which server
	set      admit.Set // the engine's backend set
	clock    clockwork.Clock

	// quarantine is off when the backends persist every write. A failover
	// is quarantined for max_ttl all the same (lua/identity.lua's ARGV):
	// failoverWait.
	quarantine, failoverWait time.Duration
	// changes counts the server changes seen, by changeReasons.
	changes [len(changeReasons)]atomic.Uint64
	// changed tells the engine that what counts may have changed;
	// readRecords asks it to read every member's record again now.
	changed, readRecords func()
	// skipIdentity is Config.skipIdentity.
	skipIdentity bool
	// fencing is Config.Fencing: a server whose data set may have lost the
	// fencing counter counts only once it is re-seeded (seed.go), which
	// reseed starts.
	fencing bool
	reseed  func(*node)

	mu    sync.Mutex
	runID string // the backend process last seen
	// upSince is when that process started, by the proxy's monotonic
	// clock (its uptime at the greeting); markerUntil when its marker's
	// quarantine ends, and reason why it was written (admit.Reason...).
	upSince, markerUntil time.Time
	reason               string
	eligibleAt           time.Time       // when both are over: its replies count from then on
	countTimer           clockwork.Timer // logs when it counts again, after a quarantine
	values               *valueScripts
	// record is its backend set record as last read, relation how that
	// stands to the engine's set; noted, the relation last logged.
	record    admit.Record
	recordRaw string
	relation  admit.Relation
	noted     admit.Relation
	refusal   string // why the last greeting refused the backend, as logged
	serverID  string // the run_id of the server connected to; "" if it gave none
	eviction  string // the server's maxmemory-policy, when it may evict locks (logged once)
	// unseeded is set while the fencing counter of the server runID must be
	// re-seeded before its replies count; seeding while that is under way.
	unseeded bool
	seeding  bool
	// marked is set when its identity script told its marker: the marker
	// then says when its waits end, and its uptime is not asked.
	marked bool
	// marker is its marker as the last identity script left it, which a
	// proof of its horizon (settle.go) may lower only while it stands.
	marker admit.Marker
	// What the last records read told for status (settle.go): what its
	// wait rests on (WaitHorizon...; "" when none), how many witnesses
	// answered and are needed, and how long the longest lease recorded
	// on it had left.
	waitFor     string
	witnesses   int
	needed      int
	horizonLeft time.Duration
}

func newNode(index int, rawURL string, e *Engine) (*node, error) {
	cfg := e.cfg
	n := &node{index: index, values: valuesOf(cfg.Fencing), servers: &e.servers, set: e.set, clock: e.clock, changed: e.noteCounting,
		readRecords: e.askRecords, fencing: cfg.Fencing && !cfg.skipReseed, reseed: e.seed, quarantine: e.quarantine(), failoverWait: cfg.MaxTTL}
	hello := []*backend.Command{e.identityCommand()}
	if cfg.skipIdentity {
		hello = nil
	}
	n.skipIdentity = cfg.skipIdentity
	p, err := backend.New(backend.Config{
		URL:      rawURL,
		TLS:      cfg.TLSConfig,
		Timeout:  cfg.NodeTimeout,
		Scripts:  []*backend.Script{identityScript},
		Commands: []string{"PEXPIRETIME"},
		Check:    n.check,
		Hello:    hello,
		Admit:    n.admit,
		Refused:  redialSlowly,
		OnState:  n.logState,
	})
	if err != nil {
		return nil, fmt.Errorf("backend %d: %w", index, err)
	}
	n.pipe, n.addr = p, p.Addr()
	n.startLog, n.log = e.startLog, slog.New(e.startLog.handler(index, n.addr))
	return n, nil
}

// redialSlowly reports whether a failed greeting will fail the same way
// until someone changes the server or the configuration: a refusal, our
// credentials refused, another protocol at the address. Such a backend is
// dialled again every second, not every backend timeout.
func redialSlowly(err error) bool {
	var (
		auth     *backend.AuthError
		notRedis *backend.NotRedisError
	)
	return isRefusal(err) || errors.As(err, &auth) || errors.As(err, &notRedis)
}

// logState logs each change of the backend's connection, once: a dead
// backend is redialled every timeout, and only the first failure is news.
// admit has logged its refusals already.
func (n *node) logState(up bool, err error) {
	defer n.changed()
	if up {
		n.mu.Lock()
		id := n.serverID
		n.mu.Unlock()
		if id == "" {
			id = "unknown (no INFO server): not checked against the other backends"
		}
		n.log.Info("backend connected", "run_id", id)
		n.startLog.connected(n.index)
		return
	}
	var (
		auth     *backend.AuthError
		notRedis *backend.NotRedisError
	)
	switch {
	case isRefusal(err):
	case errors.As(err, &auth), errors.As(err, &notRedis):
		// A mistake in the configuration, not an outage: the sentence names
		// the backend and what to check.
		n.log.Error(err.Error()+"; it does not count toward quorum until this is fixed", "kind", failureKind(err))
	default:
		n.log.Warn("backend unreachable; its votes count as failures until it answers again", "err", err)
	}
}

// run runs a script on the backend and waits for its reply until ctx is
// done. The script is not withdrawn then: its late reply is dropped, and
// the caller must treat its effect as unknown.
func (n *node) run(ctx context.Context, s *backend.Script, keys []string, args ...any) (backend.Reply, error) {
	return n.pipe.Do(ctx, backend.ScriptCommand(s, keys, args...))
}
