package admin

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// latencyBuckets spans a lock operation on loopback (0.1 ms) to one stuck
// behind a backend timeout (seconds), in seconds.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// Series read at scrape time from the Server's counters and the Engine's
// backend states: nothing is counted twice.
var (
	descOperations = prometheus.NewDesc("lockproxy_operations_total",
		"Lock operations (Locker calls) by operation and outcome.", []string{"operation", "outcome"}, nil)
	descCommands = prometheus.NewDesc("lockproxy_commands_total",
		"RESP commands received, refused ones included.", nil, nil)
	descClients = prometheus.NewDesc("lockproxy_connected_clients",
		"Client connections open now.", nil, nil)
	descConnections = prometheus.NewDesc("lockproxy_connections_received_total",
		"Client connections accepted.", nil, nil)
	descQuorum = prometheus.NewDesc("lockproxy_quorum_size",
		"Backends that must agree on a decision.", nil, nil)
	descQuorumAvailable = prometheus.NewDesc("lockproxy_quorum_available",
		"1 when enough backends count toward quorum for lock commands to be decided (of every group, with shard groups).", nil, nil)
	descGroupQuorumAvailable = prometheus.NewDesc("lockproxy_group_quorum_available",
		"1 when enough backends of the group count toward its quorum for lock commands on its slots to be decided.", []string{"group", "slots"}, nil)
	descUp = prometheus.NewDesc("lockproxy_backend_up",
		"1 when the proxy is connected to the backend and its replies count toward quorum.", []string{"backend"}, nil)
	descQuarantined = prometheus.NewDesc("lockproxy_backend_quarantined",
		"1 when the backend answers but is in quarantine (a restart, a failover or an unmarked data set, less than max_ttl ago), so its replies do not count.", []string{"backend"}, nil)
	descState = prometheus.NewDesc("lockproxy_backend_state",
		"1 for the backend's state now, 0 for the others: up, quarantined, epoch_wait, down, idle, unsupported, duplicate, replica, other_set, not_adopted, adopting, unrecorded, clock.", []string{"backend", "state"}, nil)
	descWaitSeconds = prometheus.NewDesc("lockproxy_backend_wait_seconds",
		"Seconds until a backend that answers counts toward quorum, by what the wait's end rests on: horizon (the longest lease it may have held, as its witnesses' horizons bound it), full (max_ttl: too few witnesses answered), floor (a promoted replica's floor), epoch (the epoch wait after a change of the backend set); 0 for the others, and for all when it does not wait.",
		[]string{"backend", "wait_for"}, nil)
	descHorizon = prometheus.NewDesc("lockproxy_backend_horizon_seconds",
		"Seconds the longest lease recorded on the backend has left (its lease horizon), as last read; 0 when none.", []string{"backend"}, nil)
	descReplies = prometheus.NewDesc("lockproxy_backend_replies_total",
		"Backend votes that counted toward quorum.", []string{"backend"}, nil)
	descFailures = prometheus.NewDesc("lockproxy_backend_failures_total",
		"Backend votes that did not count, by kind: timeout, connection_refused, connection_closed, quarantined, unsupported, duplicate, replica, other_set, clock, auth, not_redis, error.",
		[]string{"backend", "kind"}, nil)
	descChanges = prometheus.NewDesc("lockproxy_backend_server_changes_total",
		"Changes of the server behind a backend, by reason: restart, failover (a promoted replica), unmarked (a data set lockproxy never marked), replica.",
		[]string{"backend", "reason"}, nil)
	descClockRate = prometheus.NewDesc("lockproxy_backend_clock_rate",
		"Rate of the backend's clock (TIME) relative to the proxy's monotonic clock over the last 10 s: 1 is the same; NaN until measured.", []string{"backend"}, nil)
	descFencesMinted = prometheus.NewDesc("lockproxy_fencing_tokens_total",
		"Fencing tokens of granted acquisitions.", nil, nil)
	descFenceWriteBacks = prometheus.NewDesc("lockproxy_fencing_write_backs_total",
		"Fencing tokens that a quorum of the backends carried only after a write-back round trip.", nil, nil)
	descFenceReseeds = prometheus.NewDesc("lockproxy_fencing_reseeds_total",
		"Backends whose fencing counter was re-seeded from the other backends before they counted again (after a restart, a failover, or a first start).", nil, nil)
	descTopUps = prometheus.NewDesc("lockproxy_top_ups_total",
		"Locks granted while some backends refused them (a contender's rollback, a release on its way) or, Redisson's, counted fewer holds: then asked of those backends again.", nil, nil)
	descTopUpCopies = prometheus.NewDesc("lockproxy_top_up_copies_total",
		"Backends that took a lock, or the quorum's hold count, in a top-up.", nil, nil)
	descSplitRetries = prometheus.NewDesc("lockproxy_split_retries_total",
		"Acquisitions whose votes split between contenders that all failed (none refused by a quorum), tried once more after a random pause.", nil, nil)
	descSplitRetriesGranted = prometheus.NewDesc("lockproxy_split_retries_granted_total",
		"Split acquisitions granted on the second try.", nil, nil)
	descWaiters = prometheus.NewDesc("lockproxy_waiters",
		"Callers waiting for a held lock now (LOCK.ACQUIRE ... WAIT).", nil, nil)
	descReleaseNotices = prometheus.NewDesc("lockproxy_release_notices_total",
		"Release notices received from the backends for keys with waiters, every backend's copy.", nil, nil)
	descWaitReleases = prometheus.NewDesc("lockproxy_wait_releases_total",
		"Distinct releases of keys with waiters, heard from a notice or made through this proxy.", nil, nil)
	descWakeUps = prometheus.NewDesc("lockproxy_wait_wake_ups_total",
		"Waiters woken by a release to try again (one per release, the first in line).", nil, nil)
	descSessionLocks = prometheus.NewDesc("lockproxy_session_locks",
		"Session-bound locks held now (a lock taken without a TTL, renewed while its connection is open).", nil, nil)
	descSessionRenewals = prometheus.NewDesc("lockproxy_session_renewals_total",
		"Renewals of session-bound locks, one per lock renewed (the backends get them in batches).", nil, nil)
	descSessionLost = prometheus.NewDesc("lockproxy_session_lost_total",
		"Session-bound locks lost, their holders told (-LOCKLOST), by cause: no_quorum (renewals reached no quorum before the validity ran out), not_held, max_hold, idle.",
		[]string{"cause"}, nil)
	descBuildInfo = prometheus.NewDesc("lockproxy_build_info",
		"Always 1: the running binary's version (as -version and INFO print it), commit and Go version.",
		[]string{"version", "revision", "goversion"}, nil)
)

// Metrics exports the proxy's and the engine's state to Prometheus. It is
// the proxy's Observer (latency per operation) and the engine's (latency
// per backend vote), and a Collector of everything else at scrape time.
type Metrics struct {
	opDuration   *prometheus.HistogramVec
	ops          [quorum.NumOps]prometheus.Observer // opDuration's children
	voteDuration *prometheus.HistogramVec
	votes        atomic.Pointer[map[string]prometheus.Observer] // voteDuration's, by backend
	waitDuration *prometheus.HistogramVec
	renewalLag   prometheus.Histogram

	build  prometheus.Metric // lockproxy_build_info, constant
	groups *shard.Groups
	server *proxy.Server
}

var (
	_ proxy.Observer       = (*Metrics)(nil)
	_ quorum.Observer      = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// NewMetrics returns the metrics of a binary of version, built from
// revision by goVersion (lockproxy_build_info).
func NewMetrics(version, revision, goVersion string) *Metrics {
	m := &Metrics{
		build: prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, version, revision, goVersion),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockproxy_operation_duration_seconds",
			Help:    "Time from a lock operation's start to its decision, by operation.",
			Buckets: latencyBuckets,
		}, []string{"operation"}),
		voteDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockproxy_backend_vote_duration_seconds",
			Help:    "Time from an operation's start to a backend's answer, for answers (failures to answer are in lockproxy_backend_failures_total).",
			Buckets: latencyBuckets,
		}, []string{"backend"}),
		waitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockproxy_wait_duration_seconds",
			Help: "Time callers waited for a held lock (LOCK.ACQUIRE ... WAIT), by outcome: granted, timeout, gone (the client went away).",
			// From a wake-up's milliseconds to a lease's minutes.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"outcome"}),
		renewalLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockproxy_session_renewal_lag_seconds",
			Help: "How late each session-bound lock's renewal started after it was due: the proxy's own pauses, which session_lease must outlast.",
			// From the renewal loop's tick to a lease.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
	}
	for op := range quorum.Op(quorum.NumOps) {
		m.ops[op] = m.opDuration.WithLabelValues(op.String())
	}
	for _, outcome := range []string{"granted", "timeout", "gone"} {
		m.waitDuration.WithLabelValues(outcome) // shown before the first wait ends
	}
	return m
}

// Register makes the metrics of g and s collectable from reg.
func (m *Metrics) Register(reg prometheus.Registerer, g *shard.Groups, s *proxy.Server) error {
	m.groups, m.server = g, s
	votes := map[string]prometheus.Observer{}
	for _, e := range g.Engines() {
		for _, b := range e.Backends() {
			votes[b.Addr] = m.voteDuration.WithLabelValues(b.Addr)
		}
	}
	m.votes.Store(&votes)
	return reg.Register(m)
}

// Operation observes a lock operation's latency (proxy.Observer).
func (m *Metrics) Operation(op quorum.Op, _ proxy.Outcome, d time.Duration) {
	m.ops[op].Observe(d.Seconds())
}

// SessionRenewalLag observes how late a session lock's renewal started
// (proxy.Observer).
func (m *Metrics) SessionRenewalLag(d time.Duration) { m.renewalLag.Observe(d.Seconds()) }

// Vote observes a backend's answer (quorum.Observer). A timeout, refused
// or closed connection measures the proxy's wait, not the backend: those
// are counted in failures only.
// Waited observes one wait for a held lock as it ends.
func (m *Metrics) Waited(d time.Duration, outcome string) {
	m.waitDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

func (m *Metrics) Vote(backend string, latency time.Duration, kind string) {
	switch kind {
	case quorum.KindTimeout, quorum.KindRefused, quorum.KindClosed:
		return
	}
	if votes := m.votes.Load(); votes != nil {
		if h := (*votes)[backend]; h != nil {
			h.Observe(latency.Seconds())
			return
		}
	}
	m.voteDuration.WithLabelValues(backend).Observe(latency.Seconds())
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.opDuration.Describe(ch)
	m.voteDuration.Describe(ch)
	m.waitDuration.Describe(ch)
	for _, d := range []*prometheus.Desc{descOperations, descCommands, descClients, descConnections,
		descQuorum, descQuorumAvailable, descGroupQuorumAvailable, descUp, descQuarantined, descState, descWaitSeconds, descHorizon, descReplies, descFailures, descChanges, descClockRate,
		descFencesMinted, descFenceWriteBacks, descFenceReseeds, descTopUps, descTopUpCopies, descSplitRetries, descSplitRetriesGranted, descWaiters, descReleaseNotices, descWaitReleases, descWakeUps, descSessionLocks, descSessionRenewals, descSessionLost, descBuildInfo} {
		ch <- d
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.opDuration.Collect(ch)
	m.voteDuration.Collect(ch)
	m.waitDuration.Collect(ch)
	m.renewalLag.Collect(ch)
	ch <- m.build
	if m.server != nil {
		st := m.server.Stats()
		for op := range quorum.Op(quorum.NumOps) {
			for _, o := range proxy.Outcomes(op) {
				ch <- prometheus.MustNewConstMetric(descOperations, prometheus.CounterValue,
					float64(st.Operations[op][o]), op.String(), o.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(descCommands, prometheus.CounterValue, float64(st.Commands))
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(st.Clients))
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.CounterValue, float64(st.ConnectionsReceived))
		ss := m.server.SessionStats()
		ch <- prometheus.MustNewConstMetric(descSessionLocks, prometheus.GaugeValue, float64(ss.Held))
		ch <- prometheus.MustNewConstMetric(descSessionRenewals, prometheus.CounterValue, float64(ss.Renewals))
		for _, cause := range proxy.SessionLostCauses() {
			ch <- prometheus.MustNewConstMetric(descSessionLost, prometheus.CounterValue, float64(ss.Lost[cause]), cause)
		}
	}
	if m.groups == nil {
		return
	}
	engines := m.groups.Engines()
	ch <- prometheus.MustNewConstMetric(descQuorum, prometheus.GaugeValue, float64(m.groups.Quorum()))
	ch <- prometheus.MustNewConstMetric(descQuorumAvailable, prometheus.GaugeValue, boolValue(m.groups.QuorumAvailable()))
	for i, e := range engines {
		first, last := shard.Range(i, len(engines))
		ch <- prometheus.MustNewConstMetric(descGroupQuorumAvailable, prometheus.GaugeValue, boolValue(e.QuorumAvailable()),
			strconv.Itoa(i), fmt.Sprintf("%d-%d", first, last))
	}
	fences := m.groups.Fences()
	ch <- prometheus.MustNewConstMetric(descFencesMinted, prometheus.CounterValue, float64(fences.Minted))
	ch <- prometheus.MustNewConstMetric(descFenceWriteBacks, prometheus.CounterValue, float64(fences.WriteBacks))
	ch <- prometheus.MustNewConstMetric(descFenceReseeds, prometheus.CounterValue, float64(fences.Reseeds))
	topUps := m.groups.TopUps()
	ch <- prometheus.MustNewConstMetric(descTopUps, prometheus.CounterValue, float64(topUps.Started))
	ch <- prometheus.MustNewConstMetric(descTopUpCopies, prometheus.CounterValue, float64(topUps.Copies))
	splits := m.groups.Splits()
	ch <- prometheus.MustNewConstMetric(descSplitRetries, prometheus.CounterValue, float64(splits.Retried))
	ch <- prometheus.MustNewConstMetric(descSplitRetriesGranted, prometheus.CounterValue, float64(splits.Granted))
	waits := m.groups.Waits()
	ch <- prometheus.MustNewConstMetric(descWaiters, prometheus.GaugeValue, float64(waits.Waiting))
	ch <- prometheus.MustNewConstMetric(descReleaseNotices, prometheus.CounterValue, float64(waits.Notices))
	ch <- prometheus.MustNewConstMetric(descWaitReleases, prometheus.CounterValue, float64(waits.Releases))
	ch <- prometheus.MustNewConstMetric(descWakeUps, prometheus.CounterValue, float64(waits.WakeUps))
	for _, b := range m.groups.Backends() {
		collectBackend(ch, b)
	}
}

// collectBackend sends the series of backend b.
func collectBackend(ch chan<- prometheus.Metric, b quorum.BackendState) {
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, boolValue(b.State == quorum.StateUp), b.Addr)
	ch <- prometheus.MustNewConstMetric(descQuarantined, prometheus.GaugeValue, boolValue(b.State == quorum.StateQuarantined), b.Addr)
	for st := range quorum.State(quorum.NumStates) {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, boolValue(b.State == st), b.Addr, st.String())
	}
	// Every ground a wait can rest on, as lockproxy_backend_state has every
	// state: no series vanishes when the ground changes.
	waitFor := proxy.WaitFor(b)
	for _, w := range proxy.WaitsFor() {
		left := 0.0
		if w == waitFor {
			left = math.Ceil(b.QuarantineLeft.Seconds())
		}
		ch <- prometheus.MustNewConstMetric(descWaitSeconds, prometheus.GaugeValue, left, b.Addr, w)
	}
	ch <- prometheus.MustNewConstMetric(descHorizon, prometheus.GaugeValue, b.HorizonLeft.Seconds(), b.Addr)
	ch <- prometheus.MustNewConstMetric(descReplies, prometheus.CounterValue, float64(b.Replies), b.Addr)
	for kind, n := range b.Failures {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(n), b.Addr, kindLabel(kind))
	}
	for reason, n := range b.Changes {
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(n), b.Addr, reason)
	}
	ch <- prometheus.MustNewConstMetric(descClockRate, prometheus.GaugeValue, b.ClockRate, b.Addr)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
