package quorum

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"testing"
)

// TestNewNodeTLS: the configured TLS settings apply to rediss:// backends
// only, each keeping its own host as the server name unless one is set,
// and a URL's skip_verify still applies.
func TestNewNodeTLS(t *testing.T) {
	roots := x509.NewCertPool()
	cfg := Config{TLSConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}, Logger: slog.New(slog.DiscardHandler)}
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
		c := cfg
		c.TLSConfig = cfg.TLSConfig.Clone()
		c.TLSConfig.ServerName = tc.override
		n, err := newNode(0, tc.url, c, &servers{})
		if err != nil {
			t.Fatal(err)
		}
		got := n.pipe.opt.TLSConfig
		switch {
		case tc.serverName == "" && got != nil:
			t.Errorf("%s: TLS on a redis:// backend", tc.url)
		case tc.serverName == "":
		case got == nil:
			t.Errorf("%s: no TLS", tc.url)
		case got.ServerName != tc.serverName || got.RootCAs != roots || got.MinVersion != tls.VersionTLS13 || got.InsecureSkipVerify != tc.skipVerify:
			t.Errorf("%s: server name %q, own roots %v, min version %x, skip verify %v", tc.url, got.ServerName, got.RootCAs == roots, got.MinVersion, got.InsecureSkipVerify)
		}
	}
	if cfg.TLSConfig.ServerName != "" {
		t.Error("newNode changed the shared TLS config")
	}
}
