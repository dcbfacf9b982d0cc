package test

import (
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/internal/testcerts"
)

var tlsListeningLine = regexp.MustCompile(`msg="lockproxy listening with TLS" addr=(\S+)`)

// tlsClient returns a go-redis client of the proxy's TLS listener.
func tlsClient(t *testing.T, addr string, cfg *tls.Config) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// redisCLITLS runs redis-cli --tls against addr and returns its output and
// whether it exited 0.
func redisCLITLS(t *testing.T, addr string, tlsArgs []string, args ...string) (string, bool) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	all := append(append([]string{"--tls", "-h", host, "-p", port}, tlsArgs...), args...)
	out, err := exec.Command("redis-cli", all...).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// TestTLSClients: go-redis and redis-cli lock through the proxy's TLS
// listener with the test CA; the plain listener keeps working beside it.
func TestTLSClients(t *testing.T) {
	proxyTest(t)
	certs := testcerts.New(t)
	c := newCluster(t, 3, "-tls-listen", "127.0.0.1:0", "-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey)
	addr := c.proxy.waitLog(t, tlsListeningLine)[1]

	r := tlsClient(t, addr, certs.ClientTLS(t, false))
	if got := do(t, r, "SET", "tls-lock", "go", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("go-redis over TLS: %s", got)
	}
	if got := c.held(t, "tls-lock"); !reflect.DeepEqual(got, []string{"go", "go", "go"}) {
		t.Fatalf("backends after a TLS acquire: %q", got)
	}
	if got, ok := redisCLITLS(t, addr, []string{"--cacert", certs.CA}, "SET", "tls-lock", "cli", "NX", "PX", "30000"); !ok || got != "" {
		t.Fatalf("redis-cli --tls contended SET: want nil, got %q (%v)", got, ok)
	}
	if got := do(t, r, "EVAL", compareAndDelete, 1, "tls-lock", "go"); got != "1" {
		t.Fatalf("release over TLS: %s", got)
	}
	if got, ok := redisCLITLS(t, addr, []string{"--cacert", certs.CA}, "SET", "tls-lock", "cli", "NX", "PX", "30000"); !ok || got != "OK" {
		t.Fatalf("redis-cli --tls SET: %q (%v)", got, ok)
	}
	if got := do(t, c.proxy.Client(t), "GET", "tls-lock"); got != "cli" {
		t.Fatalf("plain listener beside TLS: %s", got)
	}
	// A client that does not trust the proxy's CA does not get through.
	if got := do(t, tlsClient(t, addr, &tls.Config{ServerName: "127.0.0.1"}), "PING"); !strings.Contains(got, "certificate") {
		t.Fatalf("a client without the CA: %s", got)
	}
}

// TestTLSMutual: with a client CA, a client presenting a certificate it
// signed locks; one without a certificate, or with one from another CA,
// is refused during the handshake.
func TestTLSMutual(t *testing.T) {
	proxyTest(t)
	certs, other := testcerts.New(t), testcerts.New(t)
	c := newCluster(t, 3, "-tls-listen", "127.0.0.1:0", "-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey,
		"-tls-ca-cert-file", certs.CA)
	addr := c.proxy.waitLog(t, tlsListeningLine)[1]

	if got := do(t, tlsClient(t, addr, certs.ClientTLS(t, true)), "SET", "m", "go", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("go-redis with a client certificate: %s", got)
	}
	if got := do(t, tlsClient(t, addr, certs.ClientTLS(t, false)), "GET", "m"); !strings.HasPrefix(got, "ERR:") {
		t.Fatalf("go-redis without a client certificate was served: %s", got)
	}
	foreign := certs.ClientTLS(t, false)
	foreign.Certificates = other.ClientTLS(t, true).Certificates
	if got := do(t, tlsClient(t, addr, foreign), "GET", "m"); !strings.HasPrefix(got, "ERR:") {
		t.Fatalf("a certificate of another CA was accepted: %s", got)
	}
	withCert := []string{"--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey}
	if got, ok := redisCLITLS(t, addr, withCert, "GET", "m"); !ok || got != "go" {
		t.Fatalf("redis-cli --tls --cert: %q (%v)", got, ok)
	}
	if got, _ := redisCLITLS(t, addr, []string{"--cacert", certs.CA}, "GET", "m"); got == "go" {
		t.Fatal("redis-cli without a client certificate was served")
	}
	if got := c.held(t, "m"); !reflect.DeepEqual(got, []string{"go", "go", "go"}) {
		t.Fatalf("backends: %q", got)
	}
}

// TestTLSOnly: listen = "" with tls_listen serves TLS alone, and
// tls_min_version 1.3 refuses a TLS 1.2 client.
func TestTLSOnly(t *testing.T) {
	proxyTest(t)
	certs := testcerts.New(t)
	_, list := backends(t, 3)
	p := startProxyTLSOnly(t, "-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms",
		"-tls-listen", "127.0.0.1:0", "-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey, "-tls-min-version", "1.3")
	if strings.Contains(p.Log(), `msg="lockproxy listening" `) {
		t.Fatalf("a plain listener with listen empty:\n%s", p.Log())
	}
	if got := do(t, tlsClient(t, p.Addr, certs.ClientTLS(t, false)), "SET", "only", "x", "NX", "PX", 1000); got != "OK" {
		t.Fatalf("TLS-only SET: %s", got)
	}
	old := certs.ClientTLS(t, false)
	old.MaxVersion = tls.VersionTLS12
	if got := do(t, tlsClient(t, p.Addr, old), "PING"); !strings.Contains(got, "version") {
		t.Fatalf("a TLS 1.2 client with tls_min_version 1.3: %s", got)
	}
}

// startProxyTLSOnly runs lockproxy with -listen "" and args, as
// startProxy does, and takes its address from the TLS listener's log line.
func startProxyTLSOnly(t *testing.T, args ...string) *proxyProcess {
	t.Helper()
	return startProxyOn(t, "", tlsListeningLine, nil, args...)
}

// TestTLSBackends: the proxy reaches redis-servers over TLS only
// (rediss://), with a user and password in the URL, verifying them
// against the test CA under the configured server name and presenting a
// client certificate, which the backends require. Without the certificate the backends refuse it and
// the proxy says NOQUORUM.
func TestTLSBackends(t *testing.T) {
	proxyTest(t)
	certs := testcerts.New(t)
	var servers []*redistest.Server
	var urls []string
	for range 3 {
		port := freeTCPPort(t)
		// The plain port stays open for redistest's readiness probe and for
		// checking what the backends hold.
		s := redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certs.ServerCert,
			"--tls-key-file", certs.ServerKey, "--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes")
		if err := s.Client(t).Do(t.Context(), "ACL", "SETUSER", "locker", "on", ">backend-pw", "~*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
		urls = append(urls, "rediss://locker:backend-pw@127.0.0.1:"+strconv.Itoa(port))
	}
	c := &cluster{servers: servers, proxy: startProxy(t, "-backends", strings.Join(urls, ","), "-restart-quarantine=false",
		"-backend-timeout", "500ms", "-backend-tls-ca-cert-file", certs.CA, "-backend-tls-server-name", "localhost",
		"-backend-tls-cert-file", certs.ClientCert, "-backend-tls-key-file", certs.ClientKey)}
	r := c.proxy.Client(t)
	if got := do(t, r, "SET", "over-tls", "tok", "NX", "PX", 30000); got != "OK" {
		t.Fatalf("SET through TLS backends: %s", got)
	}
	// A quorum holds it at once; the last backend's write may land later.
	redistest.Eventually(t, func() string {
		if got := c.held(t, "over-tls"); !reflect.DeepEqual(got, []string{"tok", "tok", "tok"}) {
			return fmt.Sprintf("backends: %q", got)
		}
		return ""
	})
	if got := do(t, r, "EVAL", compareAndDelete, 1, "over-tls", "tok"); got != "1" {
		t.Fatalf("release through TLS backends: %s", got)
	}
	for _, line := range []string{"backend-pw", "BEGIN"} {
		if strings.Contains(c.proxy.Log(), line) {
			t.Fatalf("the log holds %q:\n%s", line, c.proxy.Log())
		}
	}

	// Without the client certificate the backends refuse every handshake.
	noCert := startProxy(t, "-backends", strings.Join(urls, ","), "-restart-quarantine=false",
		"-backend-timeout", "500ms", "-backend-tls-ca-cert-file", certs.CA)
	if got := do(t, noCert.Client(t), "SET", "k", "v", "NX", "PX", 1000); !strings.HasPrefix(got, "ERR:NOQUORUM 0 of 3") {
		t.Fatalf("without the client certificate: %s", got)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
