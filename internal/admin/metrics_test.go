package admin

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"sigs.k8s.io/yaml"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// testProxy is a proxy over the embedded backends with its metrics
// registered on a registry of its own.
type testProxy struct {
	reg    *prometheus.Registry
	client *redis.Client
	engine *quorum.Engine
	groups *shard.Groups // the engine, as main wires it
	server *proxy.Server
}

// The build startTestProxy's proxy says it is.
const testVersion = "v9.8.7-test"

func startTestProxy(t *testing.T) *testProxy {
	t.Helper()
	var urls []string
	for _, s := range redistest.StartN(t, 5) {
		urls = append(urls, s.URL())
	}
	return startTestProxyOver(t, urls)
}

// startTestProxyOver is startTestProxy over the backends at urls.
func startTestProxyOver(t *testing.T, urls []string) *testProxy {
	t.Helper()
	obs := NewMetrics(testVersion, "0123456789ab-dirty", "go1.99")
	groups, srv, addr := startProxy(t, urls, obs)
	reg := prometheus.NewRegistry()
	if err := obs.Register(reg, groups, srv); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	return &testProxy{reg: reg, client: client, engine: groups.Engines()[0], groups: groups, server: srv}
}

// lockCycle takes key and releases it.
func (p *testProxy) lockCycle(t *testing.T, key string) {
	t.Helper()
	ctx := t.Context()
	if ok, err := p.client.SetNX(ctx, key, "me", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if ok, err := p.client.SetNX(ctx, key, "you", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX of a held lock: %v %v", ok, err)
	}
	release := `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	for want := range []int64{1, 0} {
		if n, err := p.client.Eval(ctx, release, []string{key}, "me").Int64(); n != int64(1-want) || err != nil {
			t.Fatalf("release: %v %v", n, err)
		}
	}
}

// series returns the value of the metric name with labels (name=value, in
// order), and whether there is one.
func series(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, lp := range m.GetLabel() {
				got = append(got, lp.GetName()+"="+lp.GetValue())
			}
			if !slices.Equal(got, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestMetricsAfterLockCycle(t *testing.T) {
	p := startTestProxy(t)
	p.lockCycle(t, "k")
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lockproxy_operations_total", []string{"operation=acquire", "outcome=acquired"}, 1},
		{"lockproxy_operations_total", []string{"operation=acquire", "outcome=held_elsewhere"}, 1},
		{"lockproxy_operations_total", []string{"operation=acquire", "outcome=no_quorum"}, 0},
		{"lockproxy_operations_total", []string{"operation=release", "outcome=ok"}, 1},
		{"lockproxy_operations_total", []string{"operation=release", "outcome=not_held"}, 1},
		{"lockproxy_operation_duration_seconds", []string{"operation=acquire"}, 2},
		{"lockproxy_operation_duration_seconds", []string{"operation=get"}, 0},
		{"lockproxy_connected_clients", nil, 1},
		{"lockproxy_connections_received_total", nil, 1},
		{"lockproxy_quorum_size", nil, 3},
		{"lockproxy_build_info", []string{"goversion=go1.99", "revision=0123456789ab-dirty", "version=v9.8.7-test"}, 1},
	} {
		got, ok := series(t, p.reg, tc.name, tc.labels...)
		if !ok || got != tc.want {
			t.Errorf("%s%v: want %v, got %v (present: %v)", tc.name, tc.labels, tc.want, got, ok)
		}
	}
	// go-redis sends HELLO and CLIENT SETINFO before the commands.
	if got, _ := series(t, p.reg, "lockproxy_commands_total"); got < 4 {
		t.Errorf("lockproxy_commands_total: %v", got)
	}
	for _, b := range p.engine.Backends() {
		addr := "backend=" + b.Addr
		if got, _ := series(t, p.reg, "lockproxy_backend_up", addr); got != 1 {
			t.Errorf("lockproxy_backend_up{%s}: %v", addr, got)
		}
		if got, _ := series(t, p.reg, "lockproxy_backend_quarantined", addr); got != 0 {
			t.Errorf("lockproxy_backend_quarantined{%s}: %v", addr, got)
		}
		// The engine stops listening once decided, yet every backend answers.
		if got, _ := series(t, p.reg, "lockproxy_backend_replies_total", addr); got < 1 {
			t.Errorf("lockproxy_backend_replies_total{%s}: %v", addr, got)
		}
		if got, ok := series(t, p.reg, "lockproxy_backend_failures_total", addr, "kind=connection_refused"); !ok || got != 0 {
			t.Errorf("lockproxy_backend_failures_total{%s,connection_refused}: %v %v", addr, got, ok)
		}
		for _, w := range proxy.WaitsFor() {
			if got, ok := series(t, p.reg, "lockproxy_backend_wait_seconds", addr, "wait_for="+w); !ok || got != 0 {
				t.Errorf("lockproxy_backend_wait_seconds{%s,%s}: %v %v", addr, w, got, ok)
			}
		}
		// The lock taken lasted 10 s: no horizon is longer.
		if got, ok := series(t, p.reg, "lockproxy_backend_horizon_seconds", addr); !ok || got < 0 || got > 10 {
			t.Errorf("lockproxy_backend_horizon_seconds{%s}: %v %v", addr, got, ok)
		}
	}

	// INFO server shows the version the metric does.
	if info := p.client.Info(t.Context(), "server").Val(); !strings.Contains(info, "\r\nlockproxy_version:v9.8.7-test\r\n") {
		t.Errorf("INFO server: %q", info)
	}

	// INFO shows the same backends through the adapter.
	info, err := p.client.Info(t.Context(), "backends").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`backends:5\r\nquorum:3\r\nbackend_set:1:5:[0-9a-f]{16}\r\nbackends_up:5\r\n`).MatchString(info) ||
		!regexp.MustCompile(`backend4:addr=127\.0\.0\.1:\d+,state=up,latency_ms=[\d.]+,last_error=,`).MatchString(info) {
		t.Errorf("INFO backends: %q", info)
	}
}

// TestMetricsLint: every metric passes promlint.
func TestMetricsLint(t *testing.T) {
	p := startTestProxy(t)
	p.lockCycle(t, "k")
	problems, err := testutil.GatherAndLint(p.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
}

// operationsFile is the page whose Metrics table documents the metrics.
const operationsFile = "../../docs/operations.md"

// TestMetricsMatchDocs: the Metrics table of docs/operations.md names every
// metric registered, with its type and labels, and nothing else.
func TestMetricsMatchDocs(t *testing.T) {
	page, err := os.ReadFile(operationsFile)
	if err != nil {
		t.Fatal(err)
	}
	documented, err := metricsTable(string(page))
	if err != nil {
		t.Fatal(err)
	}
	p := startTestProxy(t)
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]string{}
	for _, mf := range mfs {
		var labels []string
		if ms := mf.GetMetric(); len(ms) > 0 {
			for _, lp := range ms[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		registered[mf.GetName()] = describe(mf.GetType(), labels)
	}
	for name, want := range registered {
		if got, ok := documented[name]; !ok {
			t.Errorf("%s (%s) is registered but not in the Metrics table of docs/operations.md", name, want)
		} else if got != want {
			t.Errorf("%s: docs/operations.md says %s, registered as %s", name, got, want)
		}
	}
	for name := range documented {
		if _, ok := registered[name]; !ok {
			t.Errorf("%s is in the Metrics table of docs/operations.md but not registered", name)
		}
	}
}

func describe(typ dto.MetricType, labels []string) string {
	slices.Sort(labels)
	return strings.ToLower(typ.String()) + " {" + strings.Join(labels, ",") + "}"
}

// metricsTable parses the table under "## Metrics" in docs/operations.md:
// each row's name, type and labels, described as describe does.
func metricsTable(page string) (map[string]string, error) {
	_, section, ok := strings.Cut(page, "\n## Metrics\n")
	if !ok {
		return nil, fmt.Errorf("docs/operations.md has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	row := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (\\w+) \\|([^|]*)\\|")
	table := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		table[m[1]] = describe(dto.MetricType(dto.MetricType_value[strings.ToUpper(m[2])]), labels)
	}
	if len(table) == 0 {
		return nil, fmt.Errorf("the Metrics section of docs/operations.md has no table rows")
	}
	return table, nil
}

// metricName matches lockproxy's series in PromQL; the exposition names
// (histograms' _bucket, _sum, _count) are what a query names.
var metricName = regexp.MustCompile(`\blockproxy_[a-z0-9_]+`)

// TestDeployMetricNames: every series the alert rules and the dashboard
// query is one the proxy exports, so renaming a metric breaks this test
// rather than an operator's alert, silently.
func TestDeployMetricNames(t *testing.T) {
	exported := exportedSeries(t)

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	// Not strict: promtool checks the rules' shape, this only their queries.
	if err := yaml.Unmarshal([]byte(deployFile(t, "../../deploy/prometheus/lockproxy.rules.yml")), &rules); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{} // expression: where it is
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Expr] = "alert " + r.Alert
		}
	}
	if len(exprs) == 0 {
		t.Fatal("no rules in lockproxy.rules.yml")
	}

	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal([]byte(deployFile(t, "../../deploy/grafana/lockproxy.json")), &dashboard); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range dashboard.Panels {
		for _, q := range p.Targets {
			exprs[q.Expr] = "panel " + p.Title
			queries++
		}
	}
	for _, v := range dashboard.Templating.List {
		if v.Definition != "" {
			exprs[v.Definition] = "variable " + v.Name
		}
	}
	if queries < 10 {
		t.Fatalf("the dashboard has %d queries", queries)
	}

	used := map[string]bool{}
	for expr, where := range exprs {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 && !strings.Contains(expr, `up{job="lockproxy"}`) {
			t.Errorf("%s: no lockproxy metric in %q", where, expr)
		}
		for _, name := range names {
			used[name] = true
			if !exported[name] {
				t.Errorf("%s: %s is not a series the proxy exports (in %q)", where, name, expr)
			}
		}
	}
	// The dashboard shows every lockproxy metric: one added later belongs there.
	for name := range exported {
		if !used[name] && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") && name != "lockproxy_build_info" {
			t.Errorf("%s is exported but no rule or panel uses it", name)
		}
	}
}

// exportedSeries gathers the registry main.go builds (NewMetrics), over an engine on
// real redis-servers, and returns every series name it exposes.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	var urls []string
	for _, s := range redistest.StartN(t, 3) {
		urls = append(urls, s.URL())
	}
	p := startTestProxyOver(t, urls)
	p.lockCycle(t, "deploy-metric-names")
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "lockproxy_") {
			continue
		}
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
			// Histograms are queried by their parts, never by the bare name.
			delete(names, name)
		}
	}
	if !names["lockproxy_backend_failures_total"] || !names["lockproxy_operation_duration_seconds_bucket"] {
		t.Fatalf("the registry lacks series the proxy exports: %v", names)
	}
	return names
}

func deployFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// backendsCollector collects the series of backends as an engine reports
// them, without one.
type backendsCollector []quorum.BackendState

func (c backendsCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c backendsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c {
		collectBackend(ch, b)
	}
}

// TestMetricsBackendWaits: each backend has a wait series for every ground
// a wait can rest on, its wait in the one it rests on now and 0 in the
// others (in all when it does not wait), and its horizon.
func TestMetricsBackendWaits(t *testing.T) {
	c := backendsCollector{
		{Addr: "up:1", State: quorum.StateUp, HorizonLeft: 2500 * time.Millisecond},
		{Addr: "horizon:1", State: quorum.StateQuarantined, QuarantineLeft: 7200 * time.Millisecond, Reason: "restart",
			WaitFor: quorum.WaitHorizon, Witnesses: 2, WitnessesNeeded: 2},
		{Addr: "full:1", State: quorum.StateQuarantined, QuarantineLeft: 59 * time.Second, Reason: "unmarked",
			WaitFor: quorum.WaitFull, Witnesses: 1, WitnessesNeeded: 2, HorizonLeft: 30 * time.Second},
		{Addr: "floor:1", State: quorum.StateQuarantined, QuarantineLeft: 41 * time.Second, Reason: "failover", WaitFor: quorum.WaitFloor},
		{Addr: "epoch:1", State: quorum.StateEpochWait, QuarantineLeft: 12 * time.Second, Reason: "epoch"},
		// The engine's last word on a wait does not outlive it.
		{Addr: "down:1", State: quorum.StateDown, WaitFor: quorum.WaitHorizon},
	}
	const want = `# HELP lockproxy_backend_horizon_seconds Seconds the longest lease recorded on the backend has left (its lease horizon), as last read; 0 when none.
# TYPE lockproxy_backend_horizon_seconds gauge
lockproxy_backend_horizon_seconds{backend="down:1"} 0
lockproxy_backend_horizon_seconds{backend="epoch:1"} 0
lockproxy_backend_horizon_seconds{backend="floor:1"} 0
lockproxy_backend_horizon_seconds{backend="full:1"} 30
lockproxy_backend_horizon_seconds{backend="horizon:1"} 0
lockproxy_backend_horizon_seconds{backend="up:1"} 2.5
# HELP lockproxy_backend_wait_seconds Seconds until a backend that answers counts toward quorum, by what the wait's end rests on: horizon (the longest lease it may have held, as its witnesses' horizons bound it), full (max_ttl: too few witnesses answered), floor (a promoted replica's floor), epoch (the epoch wait after a change of the backend set); 0 for the others, and for all when it does not wait.
# TYPE lockproxy_backend_wait_seconds gauge
lockproxy_backend_wait_seconds{backend="down:1",wait_for="epoch"} 0
lockproxy_backend_wait_seconds{backend="down:1",wait_for="floor"} 0
lockproxy_backend_wait_seconds{backend="down:1",wait_for="full"} 0
lockproxy_backend_wait_seconds{backend="down:1",wait_for="horizon"} 0
lockproxy_backend_wait_seconds{backend="epoch:1",wait_for="epoch"} 12
lockproxy_backend_wait_seconds{backend="epoch:1",wait_for="floor"} 0
lockproxy_backend_wait_seconds{backend="epoch:1",wait_for="full"} 0
lockproxy_backend_wait_seconds{backend="epoch:1",wait_for="horizon"} 0
lockproxy_backend_wait_seconds{backend="floor:1",wait_for="epoch"} 0
lockproxy_backend_wait_seconds{backend="floor:1",wait_for="floor"} 41
lockproxy_backend_wait_seconds{backend="floor:1",wait_for="full"} 0
lockproxy_backend_wait_seconds{backend="floor:1",wait_for="horizon"} 0
lockproxy_backend_wait_seconds{backend="full:1",wait_for="epoch"} 0
lockproxy_backend_wait_seconds{backend="full:1",wait_for="floor"} 0
lockproxy_backend_wait_seconds{backend="full:1",wait_for="full"} 59
lockproxy_backend_wait_seconds{backend="full:1",wait_for="horizon"} 0
lockproxy_backend_wait_seconds{backend="horizon:1",wait_for="epoch"} 0
lockproxy_backend_wait_seconds{backend="horizon:1",wait_for="floor"} 0
lockproxy_backend_wait_seconds{backend="horizon:1",wait_for="full"} 0
lockproxy_backend_wait_seconds{backend="horizon:1",wait_for="horizon"} 8
lockproxy_backend_wait_seconds{backend="up:1",wait_for="epoch"} 0
lockproxy_backend_wait_seconds{backend="up:1",wait_for="floor"} 0
lockproxy_backend_wait_seconds{backend="up:1",wait_for="full"} 0
lockproxy_backend_wait_seconds{backend="up:1",wait_for="horizon"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "lockproxy_backend_wait_seconds", "lockproxy_backend_horizon_seconds"); err != nil {
		t.Error(err)
	}
}
