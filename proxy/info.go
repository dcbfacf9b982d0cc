package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
	"github.com/tidwall/redcon"
)

// BackendReporter is what INFO shows of the lock engine's backends
// (shard.Groups), from what the engine knows already: no method waits on
// a backend.
type BackendReporter interface {
	// States reports every group of backends, in slot order (one when
	// the backends are not sharded), each with its backends in
	// configuration order.
	States() []shard.GroupState
	// Quorum is how many backends must agree on a decision (the smallest
	// group's).
	Quorum() int
	// BackendSet names the backend sets counted ("epoch:N:fingerprint",
	// each group's, comma-separated), so that an operator can compare
	// proxies.
	BackendSet() string
	// Fences counts, with fencing on, the fencing tokens minted, those
	// that took a write-back, and the backends' counters re-seeded.
	Fences() quorum.FenceStats
	// Waits counts the callers that wait for locks, and what the waiting
	// did.
	Waits() quorum.WaitStats
}

var _ BackendReporter = (*shard.Groups)(nil)

// infoSection is one section of INFO: its name as shown, and its
// "field:value\r\n" lines. A shared section tells of every user's
// activity or of the backends, and is left out for users with a key
// prefix: tenants of one proxy see only their own locks.
type infoSection struct {
	name   string
	write  func(*strings.Builder)
	shared bool
}

// handleInfo serves INFO [section ...] in Redis's format: "# Name" then
// field:value lines, sections apart by a blank line. No section, default,
// all or everything mean every one; an unknown section adds nothing, so
// asking only for unknown ones gets an empty reply, as from Redis.
// ioredis's ready check needs loading absent or 0.
func (s *Server) handleInfo(conn redcon.Conn, cmd redcon.Command) {
	want := make(map[string]bool, len(cmd.Args)-1)
	for _, a := range cmd.Args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["default"] || want["all"] || want["everything"]
	tenant := space(conn).prefix != ""
	var b strings.Builder
	for _, sec := range s.infoSections() {
		if !all && !want[strings.ToLower(sec.name)] || tenant && sec.shared {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + sec.name + "\r\n")
		sec.write(&b)
	}
	conn.WriteBulkString(b.String())
}

func (s *Server) infoSections() []infoSection {
	return []infoSection{
		{"Server", s.infoServer, false},
		{"Clients", s.infoClients, true},
		{"Replication", s.infoReplication, false},
		{"Persistence", func(b *strings.Builder) { b.WriteString("loading:0\r\nasync_loading:0\r\n") }, false},
		{"Stats", s.infoStats, true},
		{"Backends", s.infoBackends, true},
		{"Waits", s.infoWaits, true},
		{"Sessions", s.infoSessions, true},
		{"Pubsub", s.infoPubsub, true},
		{"Cluster", s.infoCluster, false},
	}
}

// infoPubsub shows the subscribed connections, their channels and
// patterns, and the messages written to them (pubsub.go).
func (s *Server) infoPubsub(b *strings.Builder) {
	clients, channels, patterns := s.hub.counts()
	fmt.Fprintf(b, "pubsub_clients:%d\r\npubsub_channels:%d\r\npubsub_patterns:%d\r\npubsub_messages_delivered:%d\r\n",
		clients, channels, patterns, s.hub.delivered.Load())
}

// infoWaits shows the callers waiting for held locks, and what the
// waiting did (wait.go).
func (s *Server) infoWaits(b *strings.Builder) {
	w := s.backends.Waits()
	fmt.Fprintf(b, "waiters:%d\r\nwait_grants:%d\r\nwait_timeouts:%d\r\nwait_gone:%d\r\nwait_wake_ups:%d\r\nrelease_notices:%d\r\nwait_releases:%d\r\n",
		w.Waiting, w.Grants, w.Timeouts, w.Gone, w.WakeUps, w.Notices, w.Releases)
}

// infoSessions shows the session-bound locks (session.go): how many are
// held, renewed, renewed late, and lost, by cause.
func (s *Server) infoSessions(b *strings.Builder) {
	st := s.SessionStats()
	fmt.Fprintf(b, "session_lease_ms:%d\r\nsession_locks:%d\r\nsession_renewals:%d\r\nsession_late_renewals:%d\r\n",
		s.sessions.cfg.Lease.Milliseconds(), st.Held, st.Renewals, st.LateRenewals)
	for _, cause := range SessionLostCauses() {
		fmt.Fprintf(b, "session_lost_%s:%d\r\n", cause, st.Lost[cause])
	}
}

// infoCluster says whether the proxy answers as a cluster node, which
// clients read as Redis's cluster_enabled.
func (s *Server) infoCluster(b *strings.Builder) {
	fmt.Fprintf(b, "cluster_enabled:%d\r\n", boolDigit(s.cluster != nil))
}

// infoServer shows Redis's fields, with lockproxy's values where Redis's
// describe its build (no gcc, Go's netpoller and atomics), and
// lockproxy_version beside them: test harnesses and monitoring read
// arch_bits, os, run_id, tcp_port and the rest.
func (s *Server) infoServer(b *strings.Builder) {
	now := time.Now()
	up := int64(now.Sub(s.started) / time.Second)
	exe, _ := os.Executable()
	port := s.tcpPort.Load()
	fmt.Fprintf(b, "redis_version:%s\r\nlockproxy_version:%s\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\n"+
		"redis_mode:%s\r\nos:%s %s\r\narch_bits:%d\r\nmonotonic_clock:Go runtime\r\nmultiplexing_api:Go netpoller\r\n"+
		"atomicvar_api:Go sync/atomic\r\ngcc_version:0.0.0\r\ngo_version:%s\r\nprocess_id:%d\r\nprocess_supervised:no\r\nrun_id:%s\r\n"+
		"tcp_port:%d\r\nserver_time_usec:%d\r\nuptime_in_seconds:%d\r\nuptime_in_days:%d\r\nhz:10\r\nconfigured_hz:10\r\n"+
		"lru_clock:%d\r\nexecutable:%s\r\nconfig_file:%s\r\nio_threads_active:0\r\nlistener0:name=tcp,bind=*,port=%d\r\n",
		compatVersion, s.version, s.mode(), runtime.GOOS, runtime.GOARCH, strconv.IntSize, runtime.Version(), os.Getpid(), s.runID,
		port, now.UnixMicro(), up, up/86400, now.Unix()&(1<<24-1), exe, s.confFile, port)
}

// infoReplication: the proxy is nobody's replica and has none.
func (s *Server) infoReplication(b *strings.Builder) {
	fmt.Fprintf(b, "role:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\nmaster_replid:%s\r\n"+
		"master_replid2:%s\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:0\r\n"+
		"repl_backlog_size:1048576\r\nrepl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\n",
		s.runID, strings.Repeat("0", 40))
}

// newRunID is a random 40-hex-digit id, as Redis's run_id.
func newRunID() string {
	var b [20]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mode is INFO's redis_mode.
func (s *Server) mode() string {
	if s.cluster != nil {
		return "cluster"
	}
	return "standalone"
}

func (s *Server) infoClients(b *strings.Builder) {
	pubsub, _, _ := s.hub.counts()
	blocked := s.backends.Waits().Waiting
	fmt.Fprintf(b, "connected_clients:%d\r\ncluster_connections:0\r\nmaxclients:%d\r\nblocked_clients:%d\r\n"+
		"tracking_clients:0\r\npubsub_clients:%d\r\n",
		s.clients.Load(), s.settings().cfg.MaxClients, blocked, pubsub)
}

// infoStats shows Redis's totals, then lock operations by outcome, in all
// (lock_<outcome>) and per operation that happened (lockop_<op>).
func (s *Server) infoStats(b *strings.Builder) {
	st := s.Stats()
	fmt.Fprintf(b, "total_connections_received:%d\r\ntotal_commands_processed:%d\r\n", st.ConnectionsReceived, st.Commands)
	var sum [NumOutcomes]uint64
	for _, counts := range st.Operations {
		for o, n := range counts {
			sum[o] += n
		}
	}
	for o, n := range sum {
		fmt.Fprintf(b, "lock_%s:%d\r\n", Outcome(o), n)
	}
	for op, counts := range st.Operations {
		var total uint64
		for _, n := range counts {
			total += n
		}
		if total == 0 {
			continue
		}
		fmt.Fprintf(b, "lockop_%s:calls=%d", quorum.Op(op), total)
		for _, o := range Outcomes(quorum.Op(op)) {
			fmt.Fprintf(b, ",%s=%d", o, counts[o])
		}
		b.WriteString("\r\n")
	}
}

// infoBackends shows the quorum, how many backends are in each state, then
// one line per backend in the field=value,... form of Redis's slave0 lines.
func (s *Server) infoBackends(b *strings.Builder) {
	groups := s.backends.States()
	var backends []quorum.BackendState
	var count [quorum.NumStates]int
	for _, g := range groups {
		for _, be := range g.Backends {
			backends = append(backends, be)
			count[be.State]++
		}
	}
	fmt.Fprintf(b, "backends:%d\r\nquorum:%d\r\nbackend_set:%s\r\n", len(backends), s.backends.Quorum(), s.backends.BackendSet())
	if s.fencing {
		f := s.backends.Fences()
		fmt.Fprintf(b, "fencing_tokens:%d\r\nfencing_write_backs:%d\r\nfencing_reseeds:%d\r\n", f.Minted, f.WriteBacks, f.Reseeds)
	}
	if s.embedded {
		b.WriteString("backends_embedded:1\r\n") // only then, as Redis shows some fields only when they apply
	}
	for state := range quorum.State(quorum.NumStates) {
		fmt.Fprintf(b, "backends_%s:%d\r\n", state, count[state])
	}
	var groupOf []int // the group of each backend, when there are several
	if len(groups) > 1 {
		fmt.Fprintf(b, "groups:%d\r\n", len(groups))
		for i, g := range groups {
			fmt.Fprintf(b, "group%d:slots=%d-%d,backends=%d,quorum=%d,quorum_available=%d,backend_set=%s\r\n",
				i, g.FirstSlot, g.LastSlot, len(g.Backends), g.Quorum, boolDigit(g.QuorumAvailable), g.BackendSet)
			for range g.Backends {
				groupOf = append(groupOf, i)
			}
		}
	}
	now := time.Now()
	for i, be := range backends {
		age := ""
		if !be.LastErrorAt.IsZero() {
			age = fmt.Sprintf("%.0f", now.Sub(be.LastErrorAt).Seconds())
		}
		rate := ""
		if !math.IsNaN(be.ClockRate) {
			rate = fmt.Sprintf("%.6f", be.ClockRate)
		}
		witnesses := "" // answered/needed, as far as the engine counts them
		if be.State == quorum.StateQuarantined && be.WitnessesNeeded > 0 {
			witnesses = fmt.Sprintf("%d/%d", be.Witnesses, be.WitnessesNeeded)
		}
		var failures uint64
		for _, n := range be.Failures {
			failures += n
		}
		// A kind ("connection refused") as one word, as the metrics label it.
		lastError := strings.ReplaceAll(be.LastError, " ", "_")
		fmt.Fprintf(b, "backend%d:addr=%s,state=%s,latency_ms=%.3f,last_error=%s,last_error_age_s=%s,quarantine_left_s=%.0f,wait_reason=%s,replies=%d,failures=%d,clock_rate=%s",
			i, be.Addr, be.State, float64(be.LastLatency.Microseconds())/1000, lastError, age,
			math.Ceil(be.QuarantineLeft.Seconds()), be.Reason, be.Replies, failures, rate)
		if i < len(groupOf) { // after the fields above, so that their readers are unchanged
			fmt.Fprintf(b, ",group=%d", groupOf[i])
		}
		// Fields added later go last, for the same reason.
		fmt.Fprintf(b, ",wait_for=%s,witnesses=%s,horizon_left_s=%.0f", WaitFor(be), witnesses, math.Ceil(be.HorizonLeft.Seconds()))
		b.WriteString("\r\n")
	}
}

// WaitEpoch is what WaitFor names the epoch wait's end: the leases of the
// backend set before the change.
const WaitEpoch = "epoch"

// WaitsFor lists every name WaitFor gives a wait, in the order the
// metrics label them.
func WaitsFor() []string {
	return []string{quorum.WaitHorizon, quorum.WaitFull, quorum.WaitFloor, WaitEpoch}
}

// WaitFor is what b's wait rests on, as INFO, /readyz and the metrics
// name it: the engine's WaitFor for a quarantined backend, WaitFull where
// the engine names none (max_ttl bounds every quarantine), WaitEpoch for
// the epoch wait, and "" for a backend that does not wait.
func WaitFor(b quorum.BackendState) string {
	switch {
	case b.State == quorum.StateEpochWait:
		return WaitEpoch
	case b.State != quorum.StateQuarantined:
		return ""
	case b.WaitFor == "":
		return quorum.WaitFull
	}
	return b.WaitFor
}

func boolDigit(v bool) int {
	if v {
		return 1
	}
	return 0
}
