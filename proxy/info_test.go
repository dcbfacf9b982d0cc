package proxy

import (
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
	"github.com/tidwall/redcon"
)

func TestInfo(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	for _, tc := range []struct {
		name     string
		args     []string
		has, not []string
	}{
		{"all", nil,
			[]string{"# Server\r\n", "redis_version:7.0.15\r\n", "lockproxy_version:", "redis_mode:standalone\r\n", "process_id:", "uptime_in_seconds:",
				"\r\n\r\n# Clients\r\n", "connected_clients:1\r\n", "\r\n\r\n# Persistence\r\n", "loading:0\r\n",
				"\r\n\r\n# Stats\r\n", "total_connections_received:1\r\n", "\r\n\r\n# Backends\r\n"}, nil},
		{"one section", []string{"persistence"}, []string{"# Persistence\r\nloading:0\r\n"}, []string{"# Server", "# Clients"}},
		{"two sections", []string{"SERVER", "clients"}, []string{"# Server\r\n", "# Clients\r\n"}, []string{"# Persistence", "# Stats"}},
		{"twice the same", []string{"clients", "CLIENTS"}, []string{"$130\r\n# Clients\r\nconnected_clients:1\r\ncluster_connections:0\r\nmaxclients:10000\r\nblocked_clients:0\r\ntracking_clients:0\r\npubsub_clients:0\r\n\r\n"}, nil},
		{"default", []string{"default"}, []string{"# Server\r\n", "# Stats\r\n", "# Backends\r\n"}, nil},
		{"everything", []string{"everything"}, []string{"# Server\r\n", "# Clients\r\n", "# Persistence\r\n", "# Stats\r\n"}, nil},
		{"known and unknown", []string{"keyspace", "stats"}, []string{"$", "# Stats\r\n"}, []string{"# Server", "keyspace", "Keyspace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(append([]string{"INFO"}, tc.args...)...)
			if !strings.HasPrefix(r, "$") {
				t.Fatalf("not a bulk reply: %q", r)
			}
			for _, s := range tc.has {
				if !strings.Contains(r, s) {
					t.Errorf("lacks %q: %q", s, r)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(r, s) {
					t.Errorf("has %q: %q", s, r)
				}
			}
		})
	}
	// Like Redis: sections end with their last line, and nothing for an
	// unknown one.
	if exp, got := "$0\r\n\r\n", w.do("INFO", "keyspace"); exp != got {
		t.Errorf("INFO keyspace: want %q, got %q", exp, got)
	}
}

// TestInfoStats: lock operations are counted by outcome, in all and per
// operation, from what the Locker answered.
func TestInfoStats(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	w.do("SET", "k", "t1", "NX", "PX", "1000")
	ts.fake.reset(fails(quorum.ErrNotAcquired))
	w.do("SET", "k", "t2", "NX", "PX", "1000")
	ts.fake.reset(fails(&quorum.NoQuorumError{Counted: 1, Total: 3, Needed: 2}))
	w.do("SET", "k", "t2", "NX", "PX", "1000")
	ts.fake.reset(fails(quorum.ErrNotHeld))
	w.do("DELIFEQ", "k", "t2")
	w.do("PING")

	r := w.do("INFO", "stats")
	for _, line := range []string{
		"total_connections_received:1", "total_commands_processed:6",
		"lock_ok:0", "lock_acquired:1", "lock_held_elsewhere:1", "lock_not_held:1", "lock_no_quorum:1", "lock_error:0",
		"lockop_acquire:calls=3,acquired=1,held_elsewhere=1,no_quorum=1,error=0",
		"lockop_release:calls=1,ok=0,not_held=1,no_quorum=0,error=0",
	} {
		if !strings.Contains(r, "\r\n"+line+"\r\n") {
			t.Errorf("lacks %q: %q", line, r)
		}
	}
	if strings.Contains(r, "lockop_get") {
		t.Errorf("shows an operation that never ran: %q", r)
	}
}

// reportingLocker is a fakeLocker that reports backends, in groups.
type reportingLocker struct {
	*fakeLocker
	groups []shard.GroupState
}

func (r *reportingLocker) States() []shard.GroupState { return r.groups }
func (r *reportingLocker) Quorum() int                { return r.groups[0].Quorum }
func (r *reportingLocker) BackendSet() string         { return "1:4:abcd" }

func TestInfoBackends(t *testing.T) {
	locks := &reportingLocker{fakeLocker: &fakeLocker{maxTTL: time.Minute}, groups: []shard.GroupState{{Quorum: 3, Backends: []quorum.BackendState{
		{Addr: "10.0.0.1:6379", State: quorum.StateUp, LastLatency: 210 * time.Microsecond, Replies: 7, ClockRate: 1.0000123,
			HorizonLeft: 7200 * time.Millisecond},
		{Addr: "10.0.0.2:6379", State: quorum.StateQuarantined, QuarantineLeft: 41200 * time.Millisecond, Reason: "restart",
			WaitFor: quorum.WaitFull, Witnesses: 1, WitnessesNeeded: 2,
			LastLatency: time.Millisecond, LastError: "quarantined", LastErrorAt: time.Now().Add(-3 * time.Second), Replies: 2,
			Failures: map[string]uint64{"quarantined": 4, "timeout": 1}, ClockRate: math.NaN()},
		{Addr: "10.0.0.3:6379", State: quorum.StateDown, LastLatency: 500 * time.Millisecond, LastError: "connection refused",
			LastErrorAt: time.Now(), Failures: map[string]uint64{"connection refused": 9}, ClockRate: 0.99998},
		{Addr: "10.0.0.4:6379", State: quorum.StateClock, LastLatency: 300 * time.Microsecond, LastError: "clock",
			LastErrorAt: time.Now(), Failures: map[string]uint64{"clock": 1}, ClockRate: 1.5},
		{Addr: "10.0.0.5:6379", State: quorum.StateQuarantined, QuarantineLeft: 7500 * time.Millisecond, Reason: "unmarked",
			WaitFor: quorum.WaitHorizon, Witnesses: 3, WitnessesNeeded: 2, HorizonLeft: 250 * time.Millisecond, ClockRate: 1},
		{Addr: "10.0.0.6:6379", State: quorum.StateQuarantined, QuarantineLeft: 50 * time.Second, Reason: "failover",
			WaitFor: quorum.WaitFloor, Witnesses: 2, WitnessesNeeded: 2, ClockRate: 1},
		{Addr: "10.0.0.7:6379", State: quorum.StateEpochWait, QuarantineLeft: 12 * time.Second, Reason: "epoch", ClockRate: 1},
		// A quarantine the engine names no wait for is max_ttl's.
		{Addr: "10.0.0.8:6379", State: quorum.StateQuarantined, QuarantineLeft: 60 * time.Second, Reason: "restart", ClockRate: 1},
	}}}}
	s, err := New(locks, withFakes(locks, Config{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	got := info(s, "backends")
	want := regexp.MustCompile(`^# Backends\r\n` +
		`backends:8\r\nquorum:3\r\nbackend_set:1:4:abcd\r\nbackends_up:1\r\nbackends_quarantined:4\r\nbackends_epoch_wait:1\r\nbackends_down:1\r\nbackends_idle:0\r\nbackends_unsupported:0\r\nbackends_duplicate:0\r\nbackends_replica:0\r\nbackends_other_set:0\r\nbackends_not_adopted:0\r\nbackends_adopting:0\r\nbackends_unrecorded:0\r\nbackends_clock:1\r\n` +
		`backend0:addr=10\.0\.0\.1:6379,state=up,latency_ms=0\.210,last_error=,last_error_age_s=,quarantine_left_s=0,wait_reason=,replies=7,failures=0,clock_rate=1\.000012,wait_for=,witnesses=,horizon_left_s=8\r\n` +
		`backend1:addr=10\.0\.0\.2:6379,state=quarantined,latency_ms=1\.000,last_error=quarantined,last_error_age_s=3,quarantine_left_s=42,wait_reason=restart,replies=2,failures=5,clock_rate=,wait_for=full,witnesses=1/2,horizon_left_s=0\r\n` +
		`backend2:addr=10\.0\.0\.3:6379,state=down,latency_ms=500\.000,last_error=connection_refused,last_error_age_s=0,quarantine_left_s=0,wait_reason=,replies=0,failures=9,clock_rate=0\.999980,wait_for=,witnesses=,horizon_left_s=0\r\n` +
		`backend3:addr=10\.0\.0\.4:6379,state=clock,latency_ms=0\.300,last_error=clock,last_error_age_s=0,quarantine_left_s=0,wait_reason=,replies=0,failures=1,clock_rate=1\.500000,wait_for=,witnesses=,horizon_left_s=0\r\n` +
		`backend4:addr=10\.0\.0\.5:6379,state=quarantined,latency_ms=0\.000,last_error=,last_error_age_s=,quarantine_left_s=8,wait_reason=unmarked,replies=0,failures=0,clock_rate=1\.000000,wait_for=horizon,witnesses=3/2,horizon_left_s=1\r\n` +
		`backend5:addr=10\.0\.0\.6:6379,state=quarantined,latency_ms=0\.000,last_error=,last_error_age_s=,quarantine_left_s=50,wait_reason=failover,replies=0,failures=0,clock_rate=1\.000000,wait_for=floor,witnesses=2/2,horizon_left_s=0\r\n` +
		`backend6:addr=10\.0\.0\.7:6379,state=epoch_wait,latency_ms=0\.000,last_error=,last_error_age_s=,quarantine_left_s=12,wait_reason=epoch,replies=0,failures=0,clock_rate=1\.000000,wait_for=epoch,witnesses=,horizon_left_s=0\r\n` +
		`backend7:addr=10\.0\.0\.8:6379,state=quarantined,latency_ms=0\.000,last_error=,last_error_age_s=,quarantine_left_s=60,wait_reason=restart,replies=0,failures=0,clock_rate=1\.000000,wait_for=full,witnesses=,horizon_left_s=0\r\n$`)
	if !want.MatchString(got) {
		t.Fatalf("INFO backends:\n%q\nwant to match\n%s", got, want)
	}

	// Two groups: each group's line, and each backend's group.
	up := func(addr string) quorum.BackendState {
		return quorum.BackendState{Addr: addr, State: quorum.StateUp, ClockRate: 1}
	}
	locks.groups = []shard.GroupState{
		{FirstSlot: 0, LastSlot: 8191, Quorum: 1, QuorumAvailable: true, BackendSet: "1:1:a", Backends: []quorum.BackendState{up("a:1")}},
		{FirstSlot: 8192, LastSlot: 16383, Quorum: 2, BackendSet: "1:2:b", Backends: []quorum.BackendState{up("b:1"), up("b:2")}},
	}
	got = info(s, "backends")
	for _, line := range []string{"\r\ngroups:2\r\n",
		"\r\ngroup0:slots=0-8191,backends=1,quorum=1,quorum_available=1,backend_set=1:1:a\r\n",
		"\r\ngroup1:slots=8192-16383,backends=2,quorum=2,quorum_available=0,backend_set=1:2:b\r\n",
		",group=0,wait_for=,witnesses=,horizon_left_s=0\r\nbackend1:addr=b:1,",
		",group=1,wait_for=,witnesses=,horizon_left_s=0\r\nbackend2:addr=b:2,", ",group=1,wait_for=,witnesses=,horizon_left_s=0\r\n"} {
		if !strings.Contains(got, line) {
			t.Errorf("INFO backends of two groups lacks %q:\n%s", line, got)
		}
	}
}

// info runs INFO with args on s and returns the text of its reply.
func info(s *Server, args ...string) string {
	cmd := redcon.Command{Args: [][]byte{[]byte("INFO")}}
	for _, a := range args {
		cmd.Args = append(cmd.Args, []byte(a))
	}
	rec := &replyBuffer{}
	s.handleInfo(rec, cmd)
	_, text, _ := strings.Cut(string(rec.out), "\r\n") // drop the bulk header
	return strings.TrimSuffix(text, "\r\n")
}

// TestInfoForTenants checks that a user with a key prefix sees neither the
// other tenants' activity nor the backends in INFO.
func TestInfoForTenants(t *testing.T) {
	ts := startServer(t, Config{Users: []User{
		{Name: "tenant", PasswordSHA256: sha256Hex("p"), KeyPrefix: "t:"},
		{Name: "admin", PasswordSHA256: sha256Hex("root")},
	}})
	tenant, admin := connect(t, ts.addr), connect(t, ts.addr)
	tenant.do("AUTH", "tenant", "p")
	admin.do("AUTH", "admin", "root")
	for _, args := range [][]string{{"INFO"}, {"INFO", "all"}, {"INFO", "stats", "backends", "clients"}} {
		r := tenant.do(args...)
		for _, hidden := range []string{"# Clients", "# Stats", "# Backends"} {
			if strings.Contains(r, hidden) {
				t.Errorf("%q for a tenant shows %s:\n%s", args, hidden, r)
			}
		}
	}
	if r := tenant.do("INFO"); !strings.Contains(r, "# Server") || !strings.Contains(r, "loading:0") {
		t.Errorf("INFO for a tenant lacks the server or persistence section:\n%s", r)
	}
	if r := admin.do("INFO"); !strings.Contains(r, "# Stats") || !strings.Contains(r, "# Backends") {
		t.Errorf("INFO for a user without a prefix lacks stats or backends:\n%s", r)
	}
}

// TestInfoEmbedded: on embedded backends the backends section says so
// after the quorum; otherwise it has no such line (TestInfoBackends).
func TestInfoEmbedded(t *testing.T) {
	locks := &reportingLocker{fakeLocker: &fakeLocker{maxTTL: time.Minute},
		groups: []shard.GroupState{{Quorum: 1, Backends: []quorum.BackendState{{Addr: "127.0.0.1:1", State: quorum.StateUp}}}}}
	s, err := New(locks, withFakes(locks, Config{Logger: slog.New(slog.DiscardHandler), Embedded: true}))
	if err != nil {
		t.Fatal(err)
	}
	if got := info(s, "backends"); !strings.HasPrefix(got, "# Backends\r\nbackends:1\r\nquorum:1\r\nbackend_set:1:4:abcd\r\nbackends_embedded:1\r\nbackends_up:1\r\n") {
		t.Fatalf("INFO backends on embedded backends:\n%q", got)
	}
}

// TestInfoHasRedisFields: INFO server, clients and replication carry every
// field a real redis-server shows there (redis-py's test harness reads
// arch_bits at start; monitoring reads run_id, tcp_port, role), but those
// that measure Redis's own buffers, which the proxy does not keep.
func TestInfoHasRedisFields(t *testing.T) {
	notKept := map[string]bool{
		"client_recent_max_input_buffer": true, "client_recent_max_output_buffer": true, "clients_in_timeout_table": true,
		"total_blocking_keys": true, "total_blocking_keys_on_nokey": true, "total_watched_keys": true, "watching_clients": true,
	}
	redis := dialRESP(t, redistest.Start(t).Addr())
	ts := startServer(t, Config{})
	proxy := connect(t, ts.addr)
	for _, section := range []string{"server", "clients", "replication"} {
		want, err := redis.do("INFO", section)
		if err != nil {
			t.Fatal(err)
		}
		got := infoFields(proxy.do("INFO", section))
		for name := range infoFields(want) {
			if _, ok := got[name]; !ok && !notKept[name] && !strings.HasPrefix(name, "listener") {
				t.Errorf("INFO %s lacks Redis's %s", section, name)
			}
		}
	}
	server := infoFields(proxy.do("INFO", "server"))
	_, port, _ := net.SplitHostPort(ts.addr)
	for name, want := range map[string]string{"arch_bits": strconv.Itoa(strconv.IntSize), "tcp_port": port, "redis_mode": "standalone"} {
		if server[name] != want {
			t.Errorf("%s:%s, want %s", name, server[name], want)
		}
	}
	if id := server["run_id"]; len(id) != 40 {
		t.Errorf("run_id:%s, want 40 hex digits", id)
	}
	if exe := server["executable"]; exe == "" {
		t.Error("executable is empty")
	}
	if role := infoFields(proxy.do("INFO", "replication"))["role"]; role != "master" {
		t.Errorf("role:%s, want master", role)
	}
}

// infoFields reads an INFO reply's field:value lines.
func infoFields(reply string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(reply, "\r\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "$") {
			out[name] = value
		}
	}
	return out
}
