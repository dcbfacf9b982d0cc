package test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// noBackends is what lockproxy prints, and exits 1 with, when a backend
// list was given and is empty.
const noBackends = "lockproxy: backends: empty: list the Redis masters (redis://host:port,...); " +
	"run lockproxy with no configuration at all to try it on embedded in-memory backends\n"

// TestConfigEmptyBackends: an empty backend list that was given (the flag,
// a file without the key, config.example.toml left unedited) stops the
// proxy at start with one message, never a fallback to embedded backends.
func TestConfigEmptyBackends(t *testing.T) {
	proxyTest(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"empty flag", nil, []string{"-backends", ""}},
		{"empty variable", []string{"LOCKPROXY_BACKENDS="}, nil},
		{"file without backends", nil, []string{"-config", writeFile(t, "lockproxy.toml", `max_ttl = "10s"`)}},
		{"config.example.toml unedited", nil, []string{"-config", "../config.example.toml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runBinaryEnv(tc.env, tc.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("want exit status 1, got %v:\n%s", err, out)
			}
			if exp, got := noBackends, out; exp != got {
				t.Fatalf("want exactly\n%q\ngot\n%q", exp, got)
			}
		})
	}
}

// TestConfigDuplicateBackend: two URLs that reach one redis-server (an
// address and a name for it) stop the proxy at start, naming both.
func TestConfigDuplicateBackend(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 2)
	port := strings.Split(servers[0].Addr(), ":")[1]
	runID := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(servers[0].Client(t).Info(t.Context(), "server").Val())[1]
	out, err := runBinary("-backends", servers[0].URL()+",redis://localhost:"+port+","+servers[1].URL())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v:\n%s", err, out)
	}
	want := "lockproxy: backends: quorum: backends " + servers[0].Addr() + " and localhost:" + port +
		" are the same redis-server (run_id " + runID + "): it would have two votes\n"
	if !strings.HasSuffix(out, "\n"+want) {
		t.Fatalf("want the output to end with\n%q\ngot\n%s", want, out)
	}
}

// TestEmbeddedNotReady: on embedded backends /readyz answers 503 naming
// them, though every backend answers, and INFO backends says
// backends_embedded:1; a proxy over real backends says neither.
func TestEmbeddedNotReady(t *testing.T) {
	proxyTest(t)
	p := startProxy(t, "-metrics", "127.0.0.1:0")
	base := "http://" + p.waitLog(t, metricsLine)[1]
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status   string
		Embedded bool
		Counting int
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || body.Status != "embedded in-memory backends" || !body.Embedded {
		t.Fatalf("/readyz on embedded backends: %d %+v", resp.StatusCode, body)
	}
	if !strings.Contains(redisCLI(t, p.Addr, "INFO", "backends"), "\nbackends_embedded:1\r\n") {
		t.Fatalf("INFO backends on embedded backends: %s", redisCLI(t, p.Addr, "INFO", "backends"))
	}

	c := newCluster(t, 3)
	if got := redisCLI(t, c.proxy.Addr, "INFO", "backends"); strings.Contains(got, "embedded") {
		t.Fatalf("INFO backends over real backends: %s", got)
	}
}

// writeFile writes body to name in a fresh temporary directory and returns
// its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
