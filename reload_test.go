package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/lockproxy/lockproxy/internal/config"
	"github.com/lockproxy/lockproxy/internal/testcerts"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// testReloader is a reloader of the configuration that args load, logging
// to log, with a proxy.Server of its own.
func testReloader(t *testing.T, args []string, log io.Writer) *reloader {
	t.Helper()
	load := func() (*config.Config, error) { return config.Load(args, noEnv, io.Discard) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	engine, err := quorum.New(quorum.Config{Backends: []string{"redis://" + miniredis.RunT(t).Addr()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	groups, err := shard.New([]*quorum.Engine{engine})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Proxy.Backends, cfg.Proxy.Watcher, cfg.Proxy.Lister = groups, groups, groups
	srv, err := proxy.New(groups, cfg.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	r := &reloader{load: load, log: slog.New(slog.NewTextHandler(log, nil)), level: new(slog.LevelVar), srv: srv, running: cfg.Fingerprints}
	r.tls.Store(cfg.TLS)
	r.shutdownTimeout.Store(int64(cfg.ShutdownTimeout))
	return r
}

// TestReloadClasses: what a reload does with each kind of key, the content
// of a file a key names counting as its value.
func TestReloadClasses(t *testing.T) {
	certs, other := testcerts.New(t), testcerts.New(t)
	dir := t.TempDir()
	ca, serverCert, serverKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	copyTo(t, ca, certs.CA)
	copyTo(t, serverCert, certs.ServerCert)
	copyTo(t, serverKey, certs.ServerKey)
	conf := func(password, shutdown, format string) string {
		listen := "127.0.0.1:0"
		if format == "json" {
			listen = "127.0.0.1:1"
		}
		return fmt.Sprintf(`listen = %q
backends = ["rediss://127.0.0.1:1"]
backend_tls_ca_cert_file = %q
tls_listen = "127.0.0.1:0"
tls_cert_file = %q
tls_key_file = %q
password = %q
shutdown_timeout = %q
log_format = %q
`, listen, ca, serverCert, serverKey, password, shutdown, format)
	}
	path := writeConfig(t, conf("a", "10s", "text"))
	var log strings.Builder
	r := testReloader(t, []string{"-config", path}, &log)
	firstTLS := r.tls.Load()

	for _, step := range []struct {
		name   string
		change func()
		want   []string // in the log of the reload
	}{
		{"nothing", func() {}, []string{`msg="configuration reloaded" changed=none`}},
		{"backend CA rotated in place", func() { copyTo(t, ca, other.CA) }, []string{
			`level=WARN msg="reload: the backends and engine settings are not changed; the running ones are kept" keys=backend_tls_ca_cert_file reason="the backends and the engine's settings change only with a restart`,
			`changed=none`,
		}},
		{"refused again", func() {}, []string{`keys=backend_tls_ca_cert_file`, `changed=none`}},
		{"put back", func() { copyTo(t, ca, certs.CA) }, []string{`changed=none`}},
		{"live keys and restart keys", func() { os.WriteFile(path, []byte(conf("b", "3s", "json")), 0o600) }, []string{
			`level=WARN msg="reload: these keys change only with a restart; their running values are kept" keys=listen,log_format`,
			`msg="configuration reloaded" changed=password,shutdown_timeout`,
		}},
		{"server certificate rotated in place", func() {
			copyTo(t, serverCert, other.ServerCert)
			copyTo(t, serverKey, other.ServerKey)
		}, []string{`msg="configuration reloaded" changed=tls_cert_file,tls_key_file`}},
		{"server certificate emptied", func() { os.WriteFile(serverCert, nil, 0o600) }, []string{
			`level=ERROR msg="reload failed: the running configuration is kept" err="tls_cert_file, tls_key_file: tls: failed to find any PEM data in certificate input"`,
		}},
	} {
		log.Reset()
		step.change()
		r.reload()
		for _, want := range step.want {
			if !strings.Contains(log.String(), want) {
				t.Errorf("%s: the reload did not log\n%s\ngot:\n%s", step.name, want, log.String())
			}
		}
		if step.name == "server certificate emptied" && strings.Count(log.String(), "\n") != 1 {
			t.Errorf("%s: a failed reload logs one line, got:\n%s", step.name, log.String())
		}
	}
	if exp, got := 3*time.Second, time.Duration(r.shutdownTimeout.Load()); exp != got {
		t.Errorf("shutdown_timeout after the reload: want %s, got %s", exp, got)
	}
	// The emptied certificate was refused: the rotated one is served.
	if cert := r.tls.Load().Certificates[0].Leaf; cert == nil || cert.Equal(firstTLS.Certificates[0].Leaf) {
		t.Error("the TLS listener serves the first certificate still")
	}
}

// noEnv is an environment without variables, so that tests do not depend
// on the one they run in.
func noEnv(string) (string, bool) { return "", false }

// writeConfig writes body to a configuration file of the test's.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// copyTo writes src's content to dst.
func copyTo(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
