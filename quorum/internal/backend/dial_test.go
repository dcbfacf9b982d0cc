package backend

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestNewTLS: the configured TLS settings apply to rediss:// servers only,
// each keeping its own host as the server name unless one is set, and a
// URL's skip_verify still applies.
func TestNewTLS(t *testing.T) {
	roots := x509.NewCertPool()
	shared := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	for _, tc := range []struct {
		url, serverName string // serverName "" expects no TLS
		override        string
		skipVerify      bool
	}{
		{url: "redis://db1:6379"},
		{url: "rediss://db1:6380", serverName: "db1"},
		{url: "rediss://user:pw@db2:6380?skip_verify=true", serverName: "db2", skipVerify: true},
		{url: "rediss://10.0.0.3:6380", override: "redis.internal", serverName: "redis.internal"},
	} {
		c := shared.Clone()
		c.ServerName = tc.override
		p, err := New(Config{URL: tc.url, TLS: c})
		if err != nil {
			t.Fatal(err)
		}
		got := p.opt.TLSConfig
		switch {
		case tc.serverName == "" && got != nil:
			t.Errorf("%s: TLS on a redis:// server", tc.url)
		case tc.serverName == "":
		case got == nil:
			t.Errorf("%s: no TLS", tc.url)
		case got.ServerName != tc.serverName || got.RootCAs != roots || got.MinVersion != tls.VersionTLS13 || got.InsecureSkipVerify != tc.skipVerify:
			t.Errorf("%s: server name %q, own roots %v, min version %x, skip verify %v", tc.url, got.ServerName, got.RootCAs == roots, got.MinVersion, got.InsecureSkipVerify)
		}
	}
	if shared.ServerName != "" {
		t.Error("New changed the shared TLS config")
	}
}

// TestNotRedisWhileStillWriting: a server of another protocol answers the
// greeting's first line and closes while the greeting is still being
// written. The write fails (the peer reset the connection), but what the
// server said is already here, and it still names the mistake: an HTTP
// port is "not Redis", not a closed connection.
func TestNotRedisWhileStillWriting(t *testing.T) {
	addr := redistest.Serve(t, func(c net.Conn) {
		// As net/http does with a request line it cannot parse: answer
		// 400 and close, leaving the rest unread (a reset).
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n400 Bad Request")
		c.Close()
	})
	// A greeting far larger than the socket buffers: it cannot all be
	// written before the server answers and resets.
	big := NewScript("return '" + strings.Repeat("x", 8<<20) + "'")
	p, err := New(Config{URL: "redis://" + addr, Timeout: 5 * time.Second, Scripts: []*Script{big}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Do(t.Context(), KeylessCommand("PING"))
	var nr *NotRedisError
	if !errors.As(err, &nr) || nr.First != "HTTP/1.1 400 Bad Request" {
		t.Fatalf("PING: %v; want not Redis, its first bytes HTTP/1.1 400 Bad Request", err)
	}
}
