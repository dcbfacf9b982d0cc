package main

// Checks of what deploy/ ships: the alert rules run through promtool, the
// rules' and the dashboard's metric names exist in the real registry, the
// systemd unit passes systemd-analyze verify, the Kubernetes manifests
// decode strictly into their API types and hang together, and the Docker
// files keep the defaults they promise.

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/lockproxy/lockproxy/internal/config"
)

// deployTool fails the test, naming the Debian package, when a program a
// deploy check runs is missing: a skipped check would pass unnoticed.
func deployTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (%v); install Debian's %s package: apt-get install -y %s", name, err, debianPackage, debianPackage)
	}
	return path
}

// runTool runs a program and fails the test with its output if it fails.
func runTool(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestDeployAlertRulesPromtool(t *testing.T) {
	promtool := deployTool(t, "promtool", "prometheus")
	dir := filepath.Join("deploy", "prometheus")
	runTool(t, dir, promtool, "check", "rules", "lockproxy.rules.yml")
	// The example scrape configuration loads them under job "lockproxy",
	// the job LockproxyDown reads.
	runTool(t, dir, promtool, "check", "config", "prometheus.yml")
	if !strings.Contains(deployFile(t, dir, "prometheus.yml"), "- job_name: lockproxy\n") {
		t.Error(`prometheus.yml scrapes no job "lockproxy"`)
	}
	// The unit tests fire and do not fire each alert on synthetic series.
	runTool(t, dir, promtool, "test", "rules", "lockproxy.rules.test.yml")

	// Every alert has a unit test: one added without would go untested.
	rules, tests := deployFile(t, dir, "lockproxy.rules.yml"), deployFile(t, dir, "lockproxy.rules.test.yml")
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)$`).FindAllStringSubmatch(rules, -1) {
		if !strings.Contains(tests, "alertname: "+m[1]+"\n") {
			t.Errorf("alert %s has no test in lockproxy.rules.test.yml", m[1])
		}
	}
}

func deployFile(t *testing.T, elem ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(elem...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeploySystemdUnit: systemd-analyze verify accepts the unit with no
// warning (an unknown or misspelt key is only a warning to systemd, but
// would silently drop a hardening line), and the unit keeps its promises.
func TestDeploySystemdUnit(t *testing.T) {
	analyze := deployTool(t, "systemd-analyze", "systemd")
	unit := deployFile(t, "deploy", "systemd", "lockproxy.service")

	// verify wants ExecStart's binary to exist: a real build stands in.
	dir := t.TempDir()
	bin := filepath.Join(dir, "lockproxy")
	runTool(t, ".", "go", "build", "-o", bin, ".")
	const installed = "/usr/local/bin/lockproxy"
	if !strings.Contains(unit, "ExecStart="+installed+" -config /etc/lockproxy/lockproxy.toml\n") {
		t.Fatalf("ExecStart is not %s -config /etc/lockproxy/lockproxy.toml", installed)
	}
	path := filepath.Join(dir, "lockproxy.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, installed, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runTool(t, dir, analyze, "verify", path); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify warns:\n%s", out)
	}

	for _, line := range []string{
		"DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes",
		"PrivateTmp=yes", "PrivateDevices=yes", "CapabilityBoundingSet=", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
		"SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes", "LimitNOFILE=65536",
		"Restart=on-failure", "ExecReload=/bin/kill -HUP $MAINPID",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(unit) {
			t.Errorf("the unit lacks %q", line)
		}
	}
	stop := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindStringSubmatch(unit)
	if stop == nil {
		t.Fatal("no TimeoutStopSec")
	}
	d, err := time.ParseDuration(stop[1])
	if err != nil {
		t.Fatal(err)
	}
	if drain := defaultConfig(t).ShutdownTimeout; d <= drain {
		t.Errorf("TimeoutStopSec %v is not above shutdown_timeout's default %v: systemd would kill commands in flight", d, drain)
	}
}

// defaultConfig is the configuration of a file that sets nothing but the
// backends.
func defaultConfig(t *testing.T) *config.Config {
	t.Helper()
	return loadTOML(t, `backends = ["redis://127.0.0.1:6379"]`)
}

// loadTOML loads text as a -config file, the way the proxy does at start.
func loadTOML(t *testing.T, text string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Load([]string{"-config", path}, noEnv, io.Discard)
	if err != nil {
		t.Fatalf("the proxy refuses this configuration: %v\n%s", err, text)
	}
	return cfg
}

// manifests decodes every document of a YAML file into the type its kind
// names, refusing unknown fields: a misspelt or misplaced field is an
// error here, as kubectl apply --validate=strict would make it.
func manifests(t *testing.T, file string) []any {
	t.Helper()
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---$`).Split(deployFile(t, "deploy", "kubernetes", file), -1) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		case "apps/v1 StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		default:
			t.Fatalf("%s document %d: unexpected %q %q", file, i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", file, i, head.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

// only returns the one object of type T among objs.
func only[T any](t *testing.T, objs []any) *T {
	t.Helper()
	var found []*T
	for _, o := range objs {
		if v, ok := o.(*T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of type %T, want 1", len(found), *new(T))
	}
	return found[0]
}

// selects reports whether selector (matchLabels only) picks pods labelled labels.
func selects(selector map[string]string, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestDeployKubernetes(t *testing.T) {
	backends, proxies := manifests(t, "backends.yaml"), manifests(t, "proxies.yaml")

	// Backends: five independent masters, one per node.
	sts := only[appsv1.StatefulSet](t, backends)
	pods := sts.Spec.Template.Labels
	if *sts.Spec.Replicas != 5 || !selects(sts.Spec.Selector.MatchLabels, pods) {
		t.Errorf("StatefulSet: %d replicas, selector %v over pods %v", *sts.Spec.Replicas, sts.Spec.Selector.MatchLabels, pods)
	}
	aa := sts.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatal("the backends have no required pod anti-affinity: two could share a node")
	}
	term := aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || !selects(term.LabelSelector.MatchLabels, pods) {
		t.Errorf("anti-affinity term %+v does not keep the backends' pods on distinct hosts", term)
	}
	headless := only[corev1.Service](t, backends)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || headless.Name != sts.Spec.ServiceName || !selects(headless.Spec.Selector, pods) {
		t.Errorf("backends' Service: clusterIP %q, name %q (StatefulSet's %q), selector %v", headless.Spec.ClusterIP, headless.Name, sts.Spec.ServiceName, headless.Spec.Selector)
	}
	pdb := only[policyv1.PodDisruptionBudget](t, backends)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(pdb.Spec.Selector.MatchLabels, pods) {
		t.Errorf("backends' PodDisruptionBudget: maxUnavailable %v, selector %v", pdb.Spec.MaxUnavailable, pdb.Spec.Selector.MatchLabels)
	}
	redisConf := only[corev1.ConfigMap](t, backends).Data["redis.conf"]
	for _, line := range []string{"maxmemory-policy noeviction", "appendonly yes"} {
		if !strings.Contains(redisConf, "\n"+line+"\n") && !strings.HasPrefix(redisConf, line+"\n") {
			t.Errorf("redis.conf lacks %q", line)
		}
	}
	if strings.Contains(redisConf, "replicaof") {
		t.Error("redis.conf makes a replica: the backends must be independent masters")
	}

	// Proxies: three, probed on the metrics port.
	dep := only[appsv1.Deployment](t, proxies)
	ppods := dep.Spec.Template.Labels
	if *dep.Spec.Replicas != 3 || !selects(dep.Spec.Selector.MatchLabels, ppods) {
		t.Errorf("Deployment: %d replicas, selector %v over pods %v", *dep.Spec.Replicas, dep.Spec.Selector.MatchLabels, ppods)
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["resp"] != 7379 || ports["metrics"] != 7380 {
		t.Errorf("container ports %v, want resp 7379 and metrics 7380", ports)
	}
	for _, probe := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on the metrics port", probe.name, probe.p, probe.path)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Error("the proxy container is not non-root with a read-only root filesystem")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("the proxy container has no CPU request or memory limit: %+v", c.Resources)
	}
	svc := only[corev1.Service](t, proxies)
	if !selects(svc.Spec.Selector, ppods) {
		t.Errorf("proxies' Service selector %v does not pick %v", svc.Spec.Selector, ppods)
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort.String()]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name", p.Name, p.TargetPort.String())
		}
	}
	ppdb := only[policyv1.PodDisruptionBudget](t, proxies)
	if !selects(ppdb.Spec.Selector.MatchLabels, ppods) || ppdb.Spec.MinAvailable == nil {
		t.Errorf("proxies' PodDisruptionBudget: selector %v, minAvailable %v", ppdb.Spec.Selector.MatchLabels, ppdb.Spec.MinAvailable)
	}

	// The ConfigMap is a configuration the proxy accepts, mounted where the
	// container reads it, naming each backend pod through the headless
	// Service.
	cm := only[corev1.ConfigMap](t, proxies)
	cfg := loadTOML(t, cm.Data["lockproxy.toml"])
	var want []string
	for i := range *sts.Spec.Replicas {
		want = append(want, "redis://"+sts.Name+"-"+string(rune('0'+i))+"."+headless.Name+":6379")
	}
	if !slices.Equal(cfg.Quorum.Backends, want) {
		t.Errorf("the proxies' backends %v, want the StatefulSet's pods %v", cfg.Quorum.Backends, want)
	}
	if cfg.Metrics != "0.0.0.0:7380" || cfg.Listen != "0.0.0.0:7379" {
		t.Errorf("listen %q, metrics %q", cfg.Listen, cfg.Metrics)
	}
	if !slices.Equal(c.Args, []string{"-config", "/etc/lockproxy/lockproxy.toml"}) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/lockproxy" }) ||
		!slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name }) {
		t.Errorf("the container does not read the ConfigMap %s at /etc/lockproxy/lockproxy.toml", cm.Name)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	var preStop time.Duration
	if h := c.Lifecycle; h != nil && h.PreStop != nil && h.PreStop.Sleep != nil {
		preStop = time.Duration(h.PreStop.Sleep.Seconds) * time.Second
	}
	if grace <= preStop+cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v is not above preStop %v plus shutdown_timeout %v", grace, preStop, cfg.ShutdownTimeout)
	}
}

// TestDeployDocker checks what the image and the demo compose file promise
// without a Docker daemon (CI has none): pinned images, the baked
// configuration the proxy accepts, no port 9121, a grace period above the
// drain timeout, and a build context without the repository's bulk.
func TestDeployDocker(t *testing.T) {
	dockerfile := deployFile(t, "Dockerfile")
	var compose struct {
		XRedis   struct{ Image string } `json:"x-redis"`
		Services map[string]struct {
			Image           string
			Command         []string
			StopGracePeriod string `json:"stop_grace_period"`
			Ports           []string
		}
	}
	composeText := deployFile(t, "docker-compose.demo.yml")
	if err := yaml.Unmarshal([]byte(composeText), &compose); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(composeText, "A DEMO, not a deployment") {
		t.Error("the compose file does not say it is a demo")
	}

	// An exact version is name:X.Y.Z (with an optional suffix) or a digest.
	images := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(dockerfile, -1)
	var refs []string
	for _, m := range images {
		refs = append(refs, m[1])
	}
	refs = append(refs, compose.XRedis.Image)
	for _, f := range []string{"backends.yaml", "proxies.yaml"} {
		for _, m := range regexp.MustCompile(`(?m)^\s+image: (\S+)`).FindAllStringSubmatch(deployFile(t, "deploy", "kubernetes", f), -1) {
			refs = append(refs, m[1])
		}
	}
	exact := regexp.MustCompile(`(:v?\d+\.\d+\.\d+(-[a-z0-9]+)?|@sha256:[0-9a-f]{64})$`)
	for _, ref := range refs {
		// Distroless publishes no version tags, only the Debian release:
		// the Dockerfile says so and names the digest to pin.
		if !exact.MatchString(ref) && ref != "gcr.io/distroless/static-debian12:nonroot" {
			t.Errorf("image %s is not pinned to an exact version", ref)
		}
	}

	// The baked configuration is one the proxy accepts once backends are
	// added, as docker run's arguments add them.
	baked := deployFile(t, "deploy", "docker", "lockproxy.toml")
	cfg := loadTOML(t, baked+"\n"+`backends = ["redis://127.0.0.1:6379"]`)
	if cfg.Listen != "0.0.0.0:7379" || cfg.Metrics != "0.0.0.0:7380" {
		t.Errorf("the image's configuration: listen %q, metrics %q", cfg.Listen, cfg.Metrics)
	}
	for _, line := range []string{
		"COPY deploy/docker/lockproxy.toml /etc/lockproxy/lockproxy.toml",
		`ENTRYPOINT ["/lockproxy", "-config", "/etc/lockproxy/lockproxy.toml"]`,
		"EXPOSE 7379 7380",
	} {
		if !strings.Contains(dockerfile, "\n"+line+"\n") {
			t.Errorf("the Dockerfile lacks %q", line)
		}
	}
	if regexp.MustCompile(`(?m)^CMD `).MatchString(dockerfile) {
		t.Error("the Dockerfile has a CMD, which docker run's arguments would replace")
	}
	if !regexp.MustCompile(`(?m)^HEALTHCHECK .*\n\s+CMD \[.*"http://127\.0\.0\.1:7380/healthz"\]$`).MatchString(dockerfile) {
		t.Error("the Dockerfile has no HEALTHCHECK on /healthz at the metrics port")
	}

	// 9121 is redis_exporter's port: nothing of ours uses it any more.
	for _, f := range []string{"Dockerfile", "docker-compose.demo.yml", "deploy/docker/lockproxy.toml", "deploy/kubernetes/proxies.yaml", "deploy/systemd/lockproxy.service"} {
		if strings.Contains(deployFile(t, f), "9121") {
			t.Errorf("%s still uses port 9121", f)
		}
	}

	grace, err := time.ParseDuration(compose.Services["lockproxy"].StopGracePeriod)
	if err != nil {
		t.Fatalf("compose's stop_grace_period: %v", err)
	}
	if drain := defaultConfig(t).ShutdownTimeout; grace <= drain {
		t.Errorf("compose's stop_grace_period %v is not above shutdown_timeout's default %v", grace, drain)
	}
	// The demo's masters are fresh at every up: a minute's wait, not a
	// day's (max_ttl's default), or an init step the demo cannot re-run.
	if cmd := compose.Services["lockproxy"].Command; slices.Contains(cmd, "-listen") || len(cmd) != 4 || cmd[0] != "-backends" || cmd[2] != "-max-ttl" {
		t.Errorf("compose's command %v should only add -backends and -max-ttl to the image's configuration", cmd)
	}

	// The build context: what .dockerignore leaves out.
	ignore := deployFile(t, ".dockerignore")
	for _, pattern := range []string{".git", "dist", "**/node_modules", "test/compat/**/target", "test/compat/java/.m2", "test/compat/python/.venv-*"} {
		if !slices.Contains(strings.Split(ignore, "\n"), pattern) {
			t.Errorf(".dockerignore lacks %q", pattern)
		}
	}
	// Nothing the build needs is left out: go.mod, go.sum, the sources and
	// the files they embed.
	for _, needed := range []string{"go.mod", "go.sum", "main.go", "internal/admin/status.html", "quorum/lua", "deploy/docker/lockproxy.toml"} {
		for _, pattern := range strings.Split(ignore, "\n") {
			if pattern == "" || strings.HasPrefix(pattern, "#") {
				continue
			}
			if ok, _ := filepath.Match(pattern, needed); ok || pattern == needed || strings.HasPrefix(needed, pattern+"/") {
				t.Errorf(".dockerignore's %q leaves out %s, which the build needs", pattern, needed)
			}
		}
	}
	if bytes.Contains([]byte(ignore), []byte("\n*.go\n")) {
		t.Error(".dockerignore leaves out the Go sources")
	}
}
