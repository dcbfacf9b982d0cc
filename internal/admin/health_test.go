package admin

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// waitCases are backends as a probe finds them (err) and as the engine
// knows them (known), with their /readyz entry and their status page row.
var waitCases = []struct {
	name  string
	err   error
	known quorum.BackendState
	json  string
	row   string
}{
	{"horizon", &quorum.QuarantineError{Left: 7200 * time.Millisecond, Reason: "restart"},
		quorum.BackendState{RunID: "0123456789abcdef", WaitFor: quorum.WaitHorizon, Witnesses: 2, WitnessesNeeded: 2, HorizonLeft: 9500 * time.Millisecond},
		`{"addr":"10.0.0.1:6379","state":"quarantined","run_id":"0123456789abcdef","latency_ms":1.2,"error":"quarantined","quarantine_left_s":8,"reason":"restart","wait_for":"horizon","waiting_for":"the longest lease it may have held ends in 8 s","witnesses":"2/2","horizon_left_s":10}`,
		`<tr data-backend="10.0.0.1:6379" data-state="quarantined"><td class="dim">0</td><td class="mono">10.0.0.1:6379</td><td class="mono dim" data-run-id="0123456789abcdef" title="run_id 0123456789abcdef">01234567…</td><td><span class="badge s-quarantined">quarantined</span></td><td class="num">1.20 ms</td><td>quarantined</td><td class="num">8 s (restart)</td><td>the longest lease it may have held ends in 8 s</td><td class="num">not measured</td></tr>`},
	{"too few witnesses", &quorum.QuarantineError{Left: 59 * time.Second, Reason: "unmarked"},
		quorum.BackendState{WaitFor: quorum.WaitFull, Witnesses: 1, WitnessesNeeded: 3},
		`{"addr":"10.0.0.1:6379","state":"quarantined","latency_ms":1.2,"error":"quarantined","quarantine_left_s":59,"reason":"unmarked","wait_for":"full","waiting_for":"max_ttl: only 1 of 3 witnesses answered","witnesses":"1/3"}`,
		`<tr data-backend="10.0.0.1:6379" data-state="quarantined"><td class="dim">0</td><td class="mono">10.0.0.1:6379</td><td class="mono dim" data-run-id="" title="run_id ">—</td><td><span class="badge s-quarantined">quarantined</span></td><td class="num">1.20 ms</td><td>quarantined</td><td class="num">59 s (unmarked)</td><td>max_ttl: only 1 of 3 witnesses answered</td><td class="num">not measured</td></tr>`},
	// Enough answered, but their read does not bound the wait yet.
	{"witnesses not read yet", &quorum.QuarantineError{Left: 60 * time.Second, Reason: "restart"},
		quorum.BackendState{WaitFor: quorum.WaitFull, Witnesses: 3, WitnessesNeeded: 3},
		`{"addr":"10.0.0.1:6379","state":"quarantined","latency_ms":1.2,"error":"quarantined","quarantine_left_s":60,"reason":"restart","wait_for":"full","waiting_for":"max_ttl: 3 of 3 witnesses answered","witnesses":"3/3"}`,
		`<td>max_ttl: 3 of 3 witnesses answered</td>`},
	{"floor", &quorum.QuarantineError{Left: 41 * time.Second, Reason: "failover"},
		quorum.BackendState{WaitFor: quorum.WaitFloor, Witnesses: 2, WitnessesNeeded: 2, HorizonLeft: time.Second},
		`{"addr":"10.0.0.1:6379","state":"quarantined","latency_ms":1.2,"error":"quarantined","quarantine_left_s":41,"reason":"failover","wait_for":"floor","waiting_for":"a promoted replica's floor","witnesses":"2/2","horizon_left_s":1}`,
		`<td class="num">41 s (failover)</td><td>a promoted replica&#39;s floor</td>`},
	{"epoch", &quorum.QuarantineError{Left: 12 * time.Second, Reason: "epoch"},
		quorum.BackendState{},
		`{"addr":"10.0.0.1:6379","state":"epoch_wait","latency_ms":1.2,"error":"quarantined","quarantine_left_s":12,"reason":"epoch","wait_for":"epoch","waiting_for":"the leases of the backend set before the change"}`,
		`<span class="badge s-epoch_wait">epoch_wait</span></td><td class="num">1.20 ms</td><td>quarantined</td><td class="num">12 s (epoch)</td><td>the leases of the backend set before the change</td>`},
	// A quarantine the engine names no ground for is max_ttl's.
	{"unnamed", &quorum.QuarantineError{Left: 30 * time.Second, Reason: "restart"},
		quorum.BackendState{},
		`{"addr":"10.0.0.1:6379","state":"quarantined","latency_ms":1.2,"error":"quarantined","quarantine_left_s":30,"reason":"restart","wait_for":"full","waiting_for":"max_ttl"}`,
		`<td class="num">30 s (restart)</td><td>max_ttl</td>`},
	{"up", nil,
		quorum.BackendState{State: quorum.StateUp, HorizonLeft: 2100 * time.Millisecond, ClockRate: 1.00002},
		`{"addr":"10.0.0.1:6379","state":"up","latency_ms":1.2,"horizon_left_s":3}`,
		`<td class="num">1.20 ms</td><td></td><td class="num"></td><td></td><td class="num">1.00002</td></tr>`},
	// The engine's last word on the wait does not outlive the probe's.
	{"down", errors.New("dial tcp: connection refused"),
		quorum.BackendState{State: quorum.StateDown, LastError: quorum.KindRefused, WaitFor: quorum.WaitHorizon, Witnesses: 2, WitnessesNeeded: 2},
		`{"addr":"10.0.0.1:6379","state":"down","latency_ms":1.2,"error":"connection_refused"}`,
		`<td class="num">1.20 ms</td><td>connection_refused</td><td class="num"></td><td></td><td class="num">not measured</td></tr>`},
}

// TestReadyzWaits: a waiting backend's /readyz entry says what its wait
// rests on, in a word and in words, with its witnesses; every backend's
// the horizon left.
func TestReadyzWaits(t *testing.T) {
	for _, tc := range waitCases {
		t.Run(tc.name, func(t *testing.T) {
			st := probedState(quorum.NodeStatus{Addr: "10.0.0.1:6379", Latency: 1200 * time.Microsecond, Err: tc.err}, tc.known)
			got, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			if exp := tc.json; exp != string(got) {
				t.Errorf("/readyz entry:\nwant %s\ngot  %s", exp, got)
			}
		})
	}
	if exp, got := "", waitingFor(quorum.BackendState{State: quorum.StateUp, WaitFor: quorum.WaitHorizon, QuarantineLeft: time.Second}); exp != got {
		t.Errorf("an up backend waits for %q", got)
	}
}
