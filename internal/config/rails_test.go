package config

import (
	"io"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testcerts"
)

// TestUnknownKeySuggests: a misspelt key of the file is refused with the
// key probably meant, as a misspelt flag is; a key near none is refused
// alone.
func TestUnknownKeySuggests(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`max_tll = "10s"`, `unknown key "max_tll"; did you mean max_ttl?`},
		{`max-ttl = "10s"`, `unknown key "max-ttl"; did you mean max_ttl?`},
		{`MAX_TTL = "10s"`, `unknown key "MAX_TTL"; did you mean max_ttl?`},
		{`backend = ["redis://a:1"]`, `unknown key "backend"; did you mean backends?`},
		{`restart_quarantime = false`, `unknown key "restart_quarantime"; did you mean restart_quarantine?`},
		{"[[users]]\nname = \"a\"\npasword_sha256 = \"x\"", `unknown key "users.pasword_sha256"; did you mean users.password_sha256?`},
		{"[[groups]]\nbackend = [\"redis://a:1\"]", `unknown key "groups.backend"; did you mean groups.backends?`},
		{`colour = "blue"`, `unknown key "colour"`},
	} {
		path := writeConfig(t, tc.file)
		_, err := Load([]string{"-config", path}, noEnv, io.Discard)
		if exp, got := path+": "+tc.want, errText(err); exp != got {
			t.Errorf("%s:\nwant %q\ngot  %q", tc.file, exp, got)
		}
	}
}

// TestDuplicateBackendRefused: a server listed twice is refused while
// the configuration is read, before anything is dialled, naming both
// entries; two databases of one server are one server, and a port left
// out is Redis's own.
func TestDuplicateBackendRefused(t *testing.T) {
	const again = "list each Redis master once, as one server listed twice would have two votes"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backends", "redis://a:1,redis://b:1,redis://a:1"}, "backends: entry 3 (a:1) is entry 1 again: " + again},
		{[]string{"-backends", "redis://a:1/0,redis://:secret@A:1/2"}, "backends: entry 2 (A:1) is entry 1 again: " + again},
		{[]string{"-backends", "redis://a,redis://b:1,rediss://a:6379"}, "backends: entry 3 (a:6379) is entry 1 again: " + again},
		{[]string{"-backends", "unix:///tmp/r.sock,unix:///tmp/r.sock?db=1"}, "backends: entry 2 (unix:/tmp/r.sock) is entry 1 again: " + again},
		{[]string{"-groups", "redis://a:1,redis://b:1,redis://a:1"}, "groups: group 1: entry 3 (a:1) is entry 1 again: " + again},
	} {
		_, err := Load(tc.args, noEnv, io.Discard)
		if exp, got := tc.want, errText(err); exp != got {
			t.Errorf("%v:\nwant %q\ngot  %q", tc.args, exp, got)
		}
	}
	for _, ok := range []string{"redis://a:1,redis://a:2,redis://b:1", "unix:///tmp/a.sock,unix:///tmp/b.sock,redis://a:1"} {
		if _, err := Load([]string{"-backends", ok}, noEnv, io.Discard); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestWarnings: each configuration that works but is most likely not
// what was meant gets one line that says what to do; the embedded
// backends and a sound configuration get none.
func TestWarnings(t *testing.T) {
	const (
		one        = "backends: only one: every lock is on that one Redis and lost with it, with no fault tolerance; list 3 or 5 independent Redis masters"
		four       = "backends: 4 tolerate no more failures (1) than 3 would, and each lock needs 3 votes rather than 2: drop one or add one, for an odd number"
		open       = "listen: 0.0.0.0:7379 is not a loopback address and clients need no password: anyone who reaches it may take and release every lock; set password (or users), or listen on 127.0.0.1"
		quarantine = "restart_quarantine: off: a backend that restarted without its locks (without appendfsync always) counts toward quorum at once, and a lock it forgot may be granted twice; turn it on unless every backend runs with appendfsync always"
	)
	three := "redis://a:1,redis://b:1,redis://c:1"
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"sound", []string{"-backends", three}, nil},
		{"embedded", []string{"-listen", "0.0.0.0:7379"}, nil},
		{"one backend", []string{"-backends", "redis://a:1"}, []string{one}},
		{"two backends", []string{"-backends", "redis://a:1,redis://b:1"},
			[]string{"backends: 2 tolerate no more failures (0) than 1 would, and each lock needs 2 votes rather than 1: drop one or add one, for an odd number"}},
		{"four backends", []string{"-backends", three + ",redis://d:1"}, []string{four}},
		{"groups", []string{"-groups", three, "-groups", "redis://d:1", "-groups", "redis://e:1,redis://f:1"}, []string{
			"group 2: only one: every lock is on that one Redis and lost with it, with no fault tolerance; list 3 or 5 independent Redis masters",
			"group 3: 2 tolerate no more failures (0) than 1 would, and each lock needs 2 votes rather than 1: drop one or add one, for an odd number"}},
		{"every interface", []string{"-backends", three, "-listen", "0.0.0.0:7379"}, []string{open}},
		{"no host", []string{"-backends", three, "-listen", ":7379"},
			[]string{strings.Replace(open, "0.0.0.0:7379", ":7379", 1)}},
		{"a name", []string{"-backends", three, "-listen", "proxy.internal:7379"},
			[]string{strings.Replace(open, "0.0.0.0:7379", "proxy.internal:7379", 1)}},
		{"IPv6 loopback", []string{"-backends", three, "-listen", "[::1]:7379"}, nil},
		{"localhost", []string{"-backends", three, "-listen", "localhost:7379"}, nil},
		{"with a password", []string{"-backends", three, "-listen", "0.0.0.0:7379", "-password", "p"}, nil},
		{"with users", []string{"-backends", three, "-listen", "0.0.0.0:7379", "-users", "a:sha256:" + strings.Repeat("0", 64)}, nil},
		{"quarantine off", []string{"-backends", three, "-restart-quarantine=false"}, []string{quarantine}},
		{"all at once", []string{"-backends", "redis://a:1", "-listen", "0.0.0.0:7379", "-restart-quarantine=false"}, []string{one, open, quarantine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, noEnv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if exp, got := strings.Join(tc.want, "\n"), strings.Join(c.Warnings(), "\n"); exp != got {
				t.Errorf("want\n%s\ngot\n%s", exp, got)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestWarningsTLS: a TLS listener on a non-loopback address is warned of
// without a password, unless clients must present a certificate.
func TestWarningsTLS(t *testing.T) {
	certs := testcerts.New(t)
	tlsArgs := []string{"-backends", "redis://a:1,redis://b:1,redis://c:1", "-tls-listen", "0.0.0.0:7380",
		"-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"server certificate only", tlsArgs, "tls_listen: 0.0.0.0:7380 is not a loopback address and clients need no password: anyone who reaches it may take and release every lock; set password (or users), or listen on 127.0.0.1"},
		{"client certificates", append(tlsArgs, "-tls-ca-cert-file", certs.CA), ""},
	} {
		c, err := Load(tc.args, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if exp, got := tc.want, strings.Join(c.Warnings(), "\n"); exp != got {
			t.Errorf("%s: want\n%s\ngot\n%s", tc.name, exp, got)
		}
	}
}
