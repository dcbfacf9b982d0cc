package backend

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
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
