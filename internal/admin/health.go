package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// backendState is one backend in the /readyz body.
type backendState struct {
	Addr string `json:"addr"`
	// State is one of quorum's states: up, quarantined, epoch_wait, down,
	// idle, unsupported, duplicate, replica, other_set, not_adopted,
	// adopting, unrecorded or clock.
	State string `json:"state"`
	// RunID names the redis-server process behind the address, as its INFO
	// server says: another one there is a restart or a failover.
	RunID     string  `json:"run_id,omitempty"`
	LatencyMS float64 `json:"latency_ms"`
	// Error is the kind of its failure when it did not answer the probe,
	// as lockproxy_backend_failures_total labels it.
	Error string `json:"error,omitempty"`
	// Detail says, for a mistake in the configuration (auth, not_redis),
	// what is wrong and what to check.
	Detail string `json:"detail,omitempty"`
	// QuarantineLeftS is, for quarantined and epoch_wait, how long until it
	// counts; Reason why it waits: restart, unmarked, failover or epoch.
	QuarantineLeftS float64 `json:"quarantine_left_s,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	// WaitFor is, for quarantined and epoch_wait, what the wait's end rests
	// on: horizon, full, floor or epoch, as INFO's wait_for; WaitingFor
	// says it in words, e.g. "the longest lease it may have held ends in
	// 8 s". Witnesses is, for quarantined, how many of the other backends
	// answered as witnesses of those needed: "1/3".
	WaitFor    string `json:"wait_for,omitempty"`
	WaitingFor string `json:"waiting_for,omitempty"`
	Witnesses  string `json:"witnesses,omitempty"`
	// HorizonLeftS is how long the longest lease recorded on it has left,
	// as last read.
	HorizonLeftS float64 `json:"horizon_left_s,omitempty"`
	// Group is its shard group, with several.
	Group *int `json:"group,omitempty"`
	// ClockRate is its clock's rate relative to the proxy's, for a backend
	// that does not count because of it.
	ClockRate float64 `json:"clock_rate,omitempty"`
}

// backendStates pings every backend: those that answer in time and are not
// quarantined count toward quorum.
func backendStates(ctx context.Context, e *quorum.Engine) (states []backendState, counting int) {
	probed := e.Probe(ctx)
	known := e.Backends() // after the probe, whose failures it recorded
	for i, s := range probed {
		st := probedState(s, known[i])
		if s.Err == nil {
			counting++
		}
		states = append(states, st)
	}
	return states, counting
}

// probedState is a backend as the probe found it (s), with what the engine
// knew of it (b) after the probe.
func probedState(s quorum.NodeStatus, b quorum.BackendState) backendState {
	st := backendState{Addr: s.Addr, State: quorum.StateUp.String(), RunID: b.RunID, LatencyMS: float64(s.Latency.Microseconds()) / 1000,
		HorizonLeftS: math.Ceil(b.HorizonLeft.Seconds())}
	var (
		q   *quorum.QuarantineError
		c   *quorum.ClockError
		set *quorum.SetError
	)
	switch {
	case s.Err == nil:
	case errors.As(s.Err, &q):
		st.State, st.Error, st.QuarantineLeftS, st.Reason = q.State().String(), quorum.KindQuarantined, math.Ceil(q.Left.Seconds()), q.Reason
		// The probe's verdict decides, the engine tells what the wait rests on.
		b.State, b.QuarantineLeft, b.Reason = q.State(), q.Left, q.Reason
		st.WaitFor, st.WaitingFor = proxy.WaitFor(b), waitingFor(b)
		if b.State == quorum.StateQuarantined && b.WitnessesNeeded > 0 {
			st.Witnesses = fmt.Sprintf("%d/%d", b.Witnesses, b.WitnessesNeeded)
		}
	case errors.As(s.Err, &set):
		st.State, st.Error, st.Detail = set.State.String(), quorum.KindOtherSet, set.Error()
	case errors.As(s.Err, &c):
		st.State, st.Error, st.ClockRate = quorum.StateClock.String(), quorum.KindClock, c.Rate
	default:
		st.State, st.Error = quorum.StateDown.String(), kindLabel(b.LastError)
		if k := b.LastError; k == quorum.KindAuth || k == quorum.KindNotRedis {
			st.Detail = s.Err.Error()
		}
		if st.Error == "" {
			st.Error = quorum.KindError
		}
		// Refused when connected: it answers, but must not count.
		if k := b.State; k == quorum.StateUnsupported || k == quorum.StateDuplicate || k == quorum.StateReplica {
			st.State = k.String()
		}
	}
	return st
}

// waitingFor says in words what b waits for before it counts, as /readyz
// and the status page show it; "" when it does not wait.
func waitingFor(b quorum.BackendState) string {
	switch proxy.WaitFor(b) {
	case quorum.WaitHorizon:
		return "the longest lease it may have held ends in " + seconds(b.QuarantineLeft)
	case quorum.WaitFull:
		if b.WitnessesNeeded == 0 {
			return "max_ttl"
		}
		only := ""
		if b.Witnesses < b.WitnessesNeeded {
			only = "only "
		}
		return fmt.Sprintf("max_ttl: %s%d of %d witnesses answered", only, b.Witnesses, b.WitnessesNeeded)
	case quorum.WaitFloor:
		return "a promoted replica's floor"
	case proxy.WaitEpoch:
		return "the leases of the backend set before the change"
	}
	return ""
}

// seconds writes d as whole seconds, rounded up as quarantine_left_s is:
// "8 s". A wait shown as "0 s" while it lasts would read as over.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.0f s", math.Ceil(d.Seconds()))
}

// groupState is one shard group in the /readyz body, with several.
type groupState struct {
	Slots      string `json:"slots"`
	Quorum     int    `json:"quorum"`
	Counting   int    `json:"counting"`
	BackendSet string `json:"backend_set"`
}

// groupStates pings every group's backends: the states of all of them,
// group after group, how many count, and whether every group has a quorum
// of its own; with several groups, each group's state.
func groupStates(ctx context.Context, g *shard.Groups) (states []backendState, counting int, ready bool, groups []groupState) {
	ready = true
	engines := g.Engines()
	for i, e := range engines {
		s, n := backendStates(ctx, e)
		if len(engines) > 1 {
			for j := range s {
				s[j].Group = &i
			}
			first, last := shard.Range(i, len(engines))
			groups = append(groups, groupState{Slots: fmt.Sprintf("%d-%d", first, last), Quorum: e.Quorum(), Counting: n, BackendSet: e.BackendSet()})
		}
		states, counting, ready = append(states, s...), counting+n, ready && n >= e.Quorum()
	}
	return states, counting, ready, groups
}

// Handler is the metrics address: the status page at /, /metrics (the
// default Prometheus registry), /healthz (the process answers), /readyz (a
// quorum of backends answers PING within the backend timeout), /locks (a
// page of the lock listing, for operators), and with withPprof Go's
// profiles, which are off by default: a CPU profile costs the proxy while
// it runs, and the address may be reachable by more than the operator. On embedded backends /readyz always answers 503:
// they answer every PING, yet locks on them die with the process and no other
// proxy shares them, so no orchestrator may take such a proxy for a ready one.
func Handler(g *shard.Groups, status http.Handler, withPprof, embedded bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /{$}", status)
	mux.Handle("/metrics", promhttp.Handler())
	mux.Handle("GET /locks", locksHandler(g))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		states, counting, ready, groups := groupStates(ctx, g)
		status, code := "ready", http.StatusOK
		switch {
		case embedded:
			status, code = "embedded in-memory backends", http.StatusServiceUnavailable
		case !ready:
			status, code = "no quorum", http.StatusServiceUnavailable
		}
		body := map[string]any{"status": status, "embedded": embedded, "backend_set": g.BackendSet(),
			"quorum": g.Quorum(), "counting": counting, "backends": states}
		if groups != nil {
			body["groups"] = groups
		}
		writeJSON(w, code, body)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(body)
}

// kindLabel writes a quorum failure kind ("connection refused") as the
// metrics label it (connection_refused).
func kindLabel(kind string) string { return strings.ReplaceAll(kind, " ", "_") }
