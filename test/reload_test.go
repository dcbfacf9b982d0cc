package test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/testcerts"
)

// reloadOutcome is the line that ends every reload: its success or its
// failure.
var reloadOutcome = regexp.MustCompile(`msg="configuration reloaded"|msg="reload failed`)

// reload sends SIGHUP and waits for the reload's outcome line; it returns
// what the proxy logged from the signal on.
func (p *proxyProcess) reload(t *testing.T) string {
	t.Helper()
	from := len(p.Log())
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var logged string
	redistest.Eventually(t, func() string {
		if logged = p.Log()[from:]; !reloadOutcome.MatchString(logged) {
			return "no reload outcome logged after SIGHUP:\n" + p.Log()
		}
		return ""
	})
	return logged
}

// rewrite replaces the file at path with body in one rename, as an
// operator's tooling (or Kubernetes' projected volumes) does, so that a
// reload never reads half a file.
func rewrite(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// copyFile rewrites dst with src's content.
func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	rewrite(t, dst, string(b))
}

// certSerial is the serial number of the PEM certificate at path.
func certSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("no PEM in %s", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// dialTLS opens a TLS connection to addr trusting certs' CA and returns it
// with the serial of the certificate the proxy served.
func dialTLS(t *testing.T, addr string, certs *testcerts.Set) (*rawConn, *big.Int) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, certs.ClientTLS(t, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{Conn: conn, rd: bufio.NewReader(conn)}, conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestReloadTLSCertificate: SIGHUP after the certificate and key files were
// replaced in place serves the new certificate to new connections; a
// connection opened before stays open and keeps locking.
func TestReloadTLSCertificate(t *testing.T) {
	proxyTest(t)
	certs := testcerts.New(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	copyFile(t, cert, certs.ServerCert)
	copyFile(t, key, certs.ServerKey)
	_, list := backends(t, 3)
	conf := writeFile(t, "lockproxy.toml", fmt.Sprintf("backends = %s\ntls_listen = \"127.0.0.1:0\"\ntls_cert_file = %q\ntls_key_file = %q\n",
		tomlList(list), cert, key))
	p := startProxy(t, "-config", conf, "-restart-quarantine=false", "-backend-timeout", "500ms")
	addr := p.waitLog(t, tlsListeningLine)[1]

	before, served := dialTLS(t, addr, certs)
	if exp, got := certSerial(t, certs.ServerCert), served; exp.Cmp(got) != 0 {
		t.Fatalf("served serial %s, want the configured %s", got, exp)
	}
	if got := before.roundTrip(t, resp("SET", "tls-reload", "before", "NX", "PX", "30000")); got != "+OK\r\n" {
		t.Fatalf("SET before the reload: %s", got)
	}

	newCert, newKey := certs.Issue(t, "rotated", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	copyFile(t, cert, newCert)
	copyFile(t, key, newKey)
	if logged := p.reload(t); !strings.Contains(logged, `msg="configuration reloaded" changed=tls_cert_file,tls_key_file`) {
		t.Fatalf("reload after rotating the certificate:\n%s", logged)
	}

	after, served := dialTLS(t, addr, certs)
	if exp, got := certSerial(t, newCert), served; exp.Cmp(got) != 0 {
		t.Fatalf("a new connection was served serial %s, want the rotated %s", got, exp)
	}
	if got := after.roundTrip(t, resp("SET", "tls-reload", "after", "NX", "PX", "30000")); got != "$-1\r\n" {
		t.Fatalf("contended SET on the new connection: %s", got)
	}
	if got := before.roundTrip(t, resp("PEXPIRE", "tls-reload", "30000")); got != ":1\r\n" {
		t.Fatalf("the connection opened before the reload: %s", got)
	}
}

// TestReloadBrokenFile: a reload of a file that does not load keeps the
// whole running configuration and logs exactly one line, an error naming
// the key; the proxy serves on as before.
func TestReloadBrokenFile(t *testing.T) {
	proxyTest(t)
	_, list := backends(t, 3)
	good := fmt.Sprintf("backends = %s\npassword = \"old\"\n", tomlList(list))
	conf := writeFile(t, "lockproxy.toml", good)
	p := startProxy(t, "-config", conf, "-restart-quarantine=false", "-backend-timeout", "500ms")
	for _, tc := range []struct {
		name, body, key string
	}{
		{"bad value", good + "password = \"new\"\nmax_ttl = \"forever\"\n", "max_ttl"},
		{"unknown key", good + "max_tll = \"10s\"\n", "max_tll"},
		{"bad user", good + "[[users]]\nname = \"u\"\npassword_sha256 = \"abc\"\n", "users"},
		{"not TOML", "password = \"new\n", "password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rewrite(t, conf, strings.Replace(tc.body, `password = "old"`+"\n", "", 1))
			logged := p.reload(t)
			lines := strings.Split(strings.TrimSpace(logged), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], `level=ERROR msg="reload failed: the running configuration is kept"`) ||
				!strings.Contains(lines[0], tc.key) {
				t.Fatalf("want one error naming %s, got:\n%s", tc.key, logged)
			}
			r := redis.NewClient(&redis.Options{Addr: p.Addr, Password: "old", MaxRetries: -1})
			defer r.Close()
			if got := do(t, r, "SET", "broken-"+tc.name, "v", "NX", "PX", 10000); got != "OK" {
				t.Fatalf("SET with the old password after a failed reload: %s", got)
			}
		})
	}
}

// TestReloadPassword: SIGHUP after a user's password hash changed in the
// file: a new AUTH needs the new password, and a connection authenticated
// before keeps working. log_level changes too.
func TestReloadPassword(t *testing.T) {
	proxyTest(t)
	_, list := backends(t, 3)
	conf := func(pass, level string) string {
		return fmt.Sprintf("backends = %s\nlog_level = %q\n[[users]]\nname = \"app\"\npassword_sha256 = %q\n",
			tomlList(list), level, sha256Hex(pass))
	}
	path := writeFile(t, "lockproxy.toml", conf("old-pw", "info"))
	p := startProxy(t, "-config", path, "-restart-quarantine=false", "-backend-timeout", "500ms")
	client := func(pass string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "app", Password: pass, MaxRetries: -1})
		t.Cleanup(func() { r.Close() })
		return r
	}
	before := client("old-pw").Conn() // one connection, authenticated once; client closes it
	defer before.Close()
	if err := before.SetNX(t.Context(), "pw-lock", "before", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	rewrite(t, path, conf("new-pw", "debug"))
	if logged := p.reload(t); !strings.Contains(logged, `msg="configuration reloaded" changed=users,log_level`) {
		t.Fatalf("reload after changing the password:\n%s", logged)
	}
	if got := do(t, client("old-pw"), "PING"); !strings.Contains(got, "WRONGPASS") {
		t.Fatalf("a new connection with the old password: %s", got)
	}
	if got := do(t, client("new-pw"), "SET", "pw-lock", "after", "NX", "PX", 30000); got != "nil" {
		t.Fatalf("a new connection with the new password, contended SET: %s", got)
	}
	if got, err := before.Get(t.Context(), "pw-lock").Result(); err != nil || got != "before" {
		t.Fatalf("the connection authenticated before the reload: %q, %v", got, err)
	}
	// At debug level, connections are logged.
	p.waitLog(t, regexp.MustCompile(`level=DEBUG msg="proxy: connection opened"`))
	for _, secret := range []string{"old-pw", "new-pw", sha256Hex("old-pw"), sha256Hex("new-pw")} {
		if strings.Contains(p.Log(), secret) {
			t.Fatalf("the log holds %q", secret)
		}
	}
}

// TestReloadBackends: a changed backend list is refused with one warning
// naming the key and why, while the keys that may change are applied; the
// running backends keep serving, and every later reload refuses it again.
// A changed metrics address needs a restart and is refused likewise.
func TestReloadBackends(t *testing.T) {
	proxyTest(t)
	old, oldList := backends(t, 3)
	_, newList := backends(t, 3)
	conf := func(list, pass, metrics string) string {
		return fmt.Sprintf("backends = %s\npassword = %q\nmetrics = %q\n", tomlList(list), pass, metrics)
	}
	path := writeFile(t, "lockproxy.toml", conf(oldList, "one", ""))
	c := &cluster{servers: old, proxy: startProxy(t, "-config", path, "-restart-quarantine=false", "-backend-timeout", "500ms")}

	rewrite(t, path, conf(newList, "two", "127.0.0.1:0"))
	logged := c.proxy.reload(t)
	for _, want := range []string{
		`level=WARN msg="reload: these keys change only with a restart; their running values are kept" keys=metrics`,
		`level=WARN msg="reload: the backends and engine settings are not changed; the running ones are kept" keys=backends reason="the backends and the engine's settings change only with a restart; a change of backends is adopted (lockproxy adopt) and rolled out by restarting every proxy (docs/backends.md: Changing the backend set)"`,
		`level=INFO msg="configuration reloaded" changed=password`,
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("the reload did not log\n%s\ngot:\n%s", want, logged)
		}
	}
	r := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Password: "two", MaxRetries: -1})
	defer r.Close()
	if got := do(t, r, "SET", "moved", "v", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("SET after the refused change: %s", got)
	}
	if got := c.held(t, "moved"); !reflect.DeepEqual(got, []string{"v", "v", "v"}) {
		t.Fatalf("the running backends hold %q", got)
	}
	if info := do(t, r, "INFO", "backends"); !strings.Contains(info, old[0].Addr()) {
		t.Fatalf("INFO backends after the refused change:\n%s", info)
	}
	if strings.Contains(c.proxy.Log(), "metrics and health listening") {
		t.Fatal("a metrics listener was opened by a reload")
	}

	// Until the file is put back, each reload says so again.
	if logged := c.proxy.reload(t); !strings.Contains(logged, "keys=backends") || !strings.Contains(logged, "changed=none") {
		t.Fatalf("a second reload of the same file:\n%s", logged)
	}
	rewrite(t, path, conf(oldList, "two", ""))
	if logged := c.proxy.reload(t); strings.Contains(logged, "WARN") || !strings.Contains(logged, "changed=none") {
		t.Fatalf("a reload after the file was put back:\n%s", logged)
	}
}

// tomlList writes the comma-separated list as a TOML array of strings.
func tomlList(list string) string {
	var quoted []string
	for _, v := range strings.Split(list, ",") {
		quoted = append(quoted, fmt.Sprintf("%q", v))
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
