package config

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/alicebob/miniredis/v2"

	"github.com/lockproxy/lockproxy/internal/testcerts"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestConfigExample keeps config.example.toml true: it parses, and every
// value it shows is the default.
func TestConfigExample(t *testing.T) {
	// Left unedited, it lists no backends, which a file must.
	if _, err := Load([]string{"-config", exampleFile}, noEnv, io.Discard); err != errNoBackends {
		t.Fatalf("config.example.toml unedited: want %q, got %v", errNoBackends, err)
	}
	backends := []string{"-backends", "redis://a:1,redis://b:2,redis://c:3"}
	fromFile, err := Load(append([]string{"-config", exampleFile}, backends...), noEnv, io.Discard)
	if err != nil {
		t.Fatalf("config.example.toml: %v", err)
	}
	defaults, err := Load(backends, noEnv, io.Discard)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	fromFile.Proxy.ConfigFile = "" // where it came from: the one difference
	if !reflect.DeepEqual(fromFile, defaults) {
		t.Fatalf("config.example.toml differs from the defaults:\nfile:     %+v\ndefaults: %+v", fromFile, defaults)
	}
	// Every key of the file has a flag of the same name.
	example, _ := os.ReadFile(exampleFile)
	for line := range strings.SplitSeq(string(example), "\n") {
		key, _, ok := strings.Cut(line, " = ")
		if !ok || strings.HasPrefix(key, "#") {
			continue
		}
		flagName := strings.ReplaceAll(key, "_", "-")
		if _, err := Load([]string{"-" + flagName + "=" + exampleValue(flagName)}, noEnv, io.Discard); err != nil && strings.Contains(err.Error(), "flag provided but not defined") {
			t.Errorf("key %s has no flag -%s", key, flagName)
		}
	}
}

// The example file, at the repository's root, documents every key: tests
// hold it to the table (docs/configuration.md: reference_test.go).
const exampleFile = "../../config.example.toml"

// noEnv is an environment without variables, so that tests do not depend
// on the one they run in.
func noEnv(string) (string, bool) { return "", false }

func exampleValue(flag string) string {
	switch flag {
	case "drift-factor":
		return "0.02"
	case "max-request-bytes":
		return "2048"
	case "restart-quarantine":
		return "false"
	case "backend-timeout", "max-ttl", "shutdown-timeout", "client-write-timeout":
		return "1s"
	case "log-format":
		return "json"
	case "log-level":
		return "debug"
	}
	return "x"
}

func TestConfigFlagsOverrideFile(t *testing.T) {
	path := writeConfig(t, `
listen = "127.0.0.1:1"
backends = ["redis://127.0.0.1:6001", "redis://127.0.0.1:6002", "redis://127.0.0.1:6003"]
backend_timeout = "80ms"
max_ttl = "30s"
restart_quarantine = true
`)
	c, err := Load([]string{"-config", path, "-listen", "127.0.0.1:2", "-max-ttl", "10s",
		"-restart-quarantine=false", "-drift-factor", "0.05", "-max-request-bytes", "4096"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]any{
		"listen":             {"127.0.0.1:2", c.Listen},
		"backends":           {3, len(c.Quorum.Backends)},
		"backend_timeout":    {80 * time.Millisecond, c.Quorum.NodeTimeout},
		"max_ttl":            {10 * time.Second, c.Quorum.MaxTTL},
		"restart_quarantine": {true, c.Quorum.DisableRestartQuarantine},
		"drift_factor":       {0.05, c.Quorum.DriftFactor},
		"max_request_bytes":  {4096, c.Proxy.MaxRequestBytes},
		"embedded":           {false, c.Embedded},
	} {
		if exp, got := pair[0], pair[1]; exp != got {
			t.Errorf("%s: expected %v, got %v", name, exp, got)
		}
	}
	c, err = Load([]string{"-backends", "redis://a:1, redis://b:2,redis://c:3"}, noEnv, io.Discard)
	if err != nil || len(c.Quorum.Backends) != 3 || c.Quorum.Backends[1] != "redis://b:2" {
		t.Fatalf("-backends list: %v, %v", c, err)
	}
}

// TestConfigEmbedded: the embedded backends are for lockproxy run with
// neither a configuration file nor backends; a file or a -backends flag
// that lists none is refused, whatever else is set.
func TestConfigEmbedded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		file     string // "": no -config
		args     []string
		embedded bool // else errNoBackends
	}{
		{"nothing", "", nil, true},
		{"other flags only", "", []string{"-listen", "127.0.0.1:0", "-max-ttl", "10s"}, true},
		{"empty -backends", "", []string{"-backends", ""}, false},
		{"blank -backends", "", []string{"-backends", " , "}, false},
		{"file without backends", `max_ttl = "10s"`, nil, false},
		{"empty file", " ", nil, false},
		{"file with an empty list", `backends = []`, nil, false},
		{"file's list emptied by the flag", `backends = ["redis://a:1"]`, []string{"-backends", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeConfig(t, tc.file)}, args...)
			}
			c, err := Load(args, noEnv, io.Discard)
			switch {
			case tc.embedded && (err != nil || !c.Embedded):
				t.Fatalf("want embedded backends, got %v", err)
			case !tc.embedded && err != errNoBackends:
				t.Fatalf("want %q, got %v", errNoBackends, err)
			}
		})
	}
	c, err := Load([]string{"-config", writeConfig(t, `backends = ["redis://a:1"]`)}, noEnv, io.Discard)
	if err != nil || c.Embedded || len(c.Quorum.Backends) != 1 {
		t.Fatalf("a file with a backend: %v", err)
	}
}

func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		args []string
		key  string // the error must name it
	}{
		{"unknown key", `max_tll = "10s"`, nil, "max_tll"},
		{"bad duration", `backend_timeout = "fast"`, nil, "backend_timeout"},
		{"negative duration", `max_ttl = "-1s"`, nil, "max_ttl"},
		{"wrong type", `max_request_bytes = "big"`, nil, "max_request_bytes"},
		{"drift out of range", `drift_factor = 0.9`, nil, "drift_factor"},
		{"small request limit", `max_request_bytes = 10`, nil, "max_request_bytes"},
		{"pprof without metrics", `pprof = true`, nil, "pprof"},
		{"bad log level", `log_level = "loud"`, nil, "log_level"},
		{"bad flag duration", ``, []string{"-backend-timeout", "soon"}, "backend_timeout"},
		{"unknown flag", ``, []string{"-max-tll", "1s"}, "max-tll"},
		{"unknown user key", "[[users]]\nname = \"a\"\npasword_sha256 = \"x\"", nil, "users.pasword_sha256"},
		{"user without hash", "[[users]]\nname = \"a\"", nil, "users"},
		{"user with a bad hash", "[[users]]\nname = \"a\"\npassword_sha256 = \"abc\"", nil, "users"},
		{"user flag without kind", ``, []string{"-users", "a"}, "users"},
		{"user flag with a bad kind", ``, []string{"-users", "a:md5:00"}, "users"},
		{"default user and password", "password = \"p\"\n[[users]]\nname = \"default\"\npassword_sha256 = \"" + strings.Repeat("0", 64) + "\"", nil, "password"},
		{"nested key prefixes", "", []string{"-users", "a:sha256:" + strings.Repeat("0", 64) + ":t:", "-users", "b:sha256:" + strings.Repeat("0", 64) + ":t:x:"}, "users"},
		{"negative idle timeout", `idle_timeout = "-1s"`, nil, "idle_timeout"},
		{"no write timeout", `client_write_timeout = "0s"`, nil, "client_write_timeout"},
		{"bad write timeout flag", ``, []string{"-client-write-timeout", "soon"}, "client_write_timeout"},
		{"no clients", `max_clients = 0`, nil, "max_clients"},
		{"no key bytes", ``, []string{"-max-key-bytes", "0"}, "max_key_bytes"},
		{"no token bytes", `max_token_bytes = -1`, nil, "max_token_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-config", writeConfig(t, tc.file)}, tc.args...)
			_, err := Load(args, noEnv, io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error does not name %s: %v", tc.key, err)
			}
		})
	}
}

// TestConfigEnv: every key is also LOCKPROXY_<KEY>, which takes what the
// flag takes; a flag overrides it and it overrides the file, whose value is
// still held to the key's type.
func TestConfigEnv(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	vars := map[string]string{
		"LOCKPROXY_BACKENDS":           "redis://a:1, redis://b:2,redis://c:3",
		"LOCKPROXY_MAX_TTL":            "20s",
		"LOCKPROXY_PASSWORD":           "from-env",
		"LOCKPROXY_RESTART_QUARANTINE": "false",
		"LOCKPROXY_USERS":              "x:sha256:" + hash + ":t:\n\n  y:sha256:" + hash + "  \n",
		"LOCKPROXY_SERVICE_HOST":       "10.0.0.1", // Kubernetes's, not a key: ignored
	}
	env := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	path := writeConfig(t, `
backends = ["redis://file:1"]
max_ttl = "30s"
backend_timeout = "80ms"
password = "from-file"
`)
	c, err := Load([]string{"-config", path, "-max-ttl", "10s"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]any{
		"backends (env)":           {"redis://a:1 redis://b:2 redis://c:3", strings.Join(c.Quorum.Backends, " ")},
		"max_ttl (flag)":           {10 * time.Second, c.Quorum.MaxTTL},
		"backend_timeout (file)":   {80 * time.Millisecond, c.Quorum.NodeTimeout},
		"password (env)":           {"from-env", c.Proxy.Password},
		"restart_quarantine (env)": {true, c.Quorum.DisableRestartQuarantine},
		"users (env)":              {"x t: y ", fmt.Sprintf("%s %s %s %s", c.Proxy.Users[0].Name, c.Proxy.Users[0].KeyPrefix, c.Proxy.Users[1].Name, c.Proxy.Users[1].KeyPrefix)},
	} {
		if exp, got := pair[0], pair[1]; exp != got {
			t.Errorf("%s: want %v, got %v", name, exp, got)
		}
	}

	for _, tc := range []struct {
		name, file string
		vars       map[string]string
		want       string
	}{
		{"bad value", "", map[string]string{"LOCKPROXY_MAX_CLIENTS": "many"}, "max_clients (LOCKPROXY_MAX_CLIENTS): parse error"},
		{"out of bounds", "", map[string]string{"LOCKPROXY_MAX_TTL": "-1s"}, `max_ttl (LOCKPROXY_MAX_TTL): "-1s" is not a positive duration`},
		{"bad user", "", map[string]string{"LOCKPROXY_USERS": "a"}, "users (LOCKPROXY_USERS): entry 1"},
		{"overridden file value checked", `backends = ["redis://a:1"]` + "\nmax_clients = \"many\"", map[string]string{"LOCKPROXY_MAX_CLIENTS": "3"}, "max_clients"},
		{"empty backends", "", map[string]string{"LOCKPROXY_BACKENDS": ""}, errNoBackends.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			if tc.file != "" {
				args = []string{"-config", writeConfig(t, tc.file)}
			}
			_, err := Load(args, func(name string) (string, bool) { v, ok := tc.vars[name]; return v, ok }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestConfigSecretFiles: password_file and users_file, and what they refuse.
// No error quotes a file's content.
func TestConfigSecretFiles(t *testing.T) {
	hash := sha256Hex("pw")
	secret := func(body string) string { return writeConfig(t, body) }
	users := secret("# ops\n\nx:sha256:" + hash + ":t:\r\n  y:bcrypt:$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy\n")
	file := writeConfig(t, `backends = ["redis://a:1"]
[[users]]
name = "w"
password_sha256 = "`+hash+`"
`)
	c, err := Load([]string{"-config", file, "-password-file", secret("s3cret\n"), "-users-file", users}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := "s3cret", c.Proxy.Password; exp != got {
		t.Errorf("password from the file: want %q, got %q", exp, got)
	}
	var names []string
	for _, u := range c.Proxy.Users {
		names = append(names, u.Name+"/"+u.KeyPrefix)
	}
	if exp, got := "w/ x/t: y/", strings.Join(names, " "); exp != got {
		t.Errorf("users: want %s, got %s", exp, got)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"both passwords", []string{"-password", "p", "-password-file", secret("q")}, "password, password_file: both set"},
		{"empty password file", []string{"-password-file", secret("\n")}, "password_file: "},
		{"two-line password file", []string{"-password-file", secret("hunter2\nhunter3\n")}, "has more than one line"},
		{"missing password file", []string{"-password-file", "/nonexistent/pw"}, "password_file: open /nonexistent/pw"},
		{"users file without users", []string{"-users-file", secret("# nobody\n\n")}, "users_file: no user in"},
		{"bad hash", []string{"-users-file", secret("a:sha256:" + hash + "\nb:sha256:hunter2\n")}, `line 2: user "b": the SHA-256 password hash is not 64 hex digits`},
		{"bad kind", []string{"-users-file", secret("a:hunter2:x\n")}, "line 1: user \"a\": the hash kind"},
		{"no kind", []string{"-users-file", secret("hunter2\n")}, "line 1: not name:sha256"},
		{"a name twice", []string{"-users", "a:sha256:" + hash, "-users-file", secret("a:sha256:" + hash)}, `users: user "a" is configured twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter") {
				t.Fatalf("want an error containing %q and no secret, got %v", tc.want, err)
			}
		})
	}
}

// TestConfigSyntaxErrorHidesSecrets: a syntax error in the value of a key
// that may hold a secret names the line and the key, never the text.
func TestConfigSyntaxErrorHidesSecrets(t *testing.T) {
	for _, tc := range []struct{ file, key string }{
		{"password = hunter2\n", "password"},
		{"backends = [\"redis://u:hunter2@a:1\" \"b\"]\n", "backends"},
		{"[[users]]\nname = \"a\"\npassword_sha256 = hunter2\n", "users.password_sha256"},
	} {
		_, err := Load([]string{"-config", writeConfig(t, tc.file)}, noEnv, io.Discard)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), fmt.Sprintf("(last key %q)", tc.key)) {
			t.Errorf("%q: %v", tc.file, err)
		}
	}
	// Other keys' errors keep the parser's words.
	if _, err := Load([]string{"-config", writeConfig(t, "max_ttl = forever\n")}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "forever") {
		t.Errorf("max_ttl = forever: %v", err)
	}
}

func TestConfigUsers(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	path := writeConfig(t, `
backends = ["redis://a:1"]

[[users]]
name = "app1"
password_sha256 = "`+hash+`"
key_prefix = "app1:"

[[users]]
name = "app2"
password_bcrypt = "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"
`)
	c, err := Load([]string{"-config", path, "-idle-timeout", "5m", "-max-clients", "3", "-client-write-timeout", "2s"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Proxy.Users); n != 2 || c.Proxy.Users[0].KeyPrefix != "app1:" || c.Proxy.Users[1].PasswordBcrypt == "" {
		t.Fatalf("users from the file: %+v", c.Proxy.Users)
	}
	if c.Proxy.IdleTimeout != 5*time.Minute || c.Proxy.MaxClients != 3 || c.Proxy.WriteTimeout != 2*time.Second {
		t.Fatalf("limits: idle %s, clients %d, write %s", c.Proxy.IdleTimeout, c.Proxy.MaxClients, c.Proxy.WriteTimeout)
	}
	// The flag, repeated, replaces the file's users; a prefix may hold colons.
	c, err = Load([]string{"-config", path, "-users", "x:sha256:" + hash + ":t:1:", "-users", "y:sha256:" + hash}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Proxy.Users; len(got) != 2 || got[0].Name != "x" || got[0].KeyPrefix != "t:1:" || got[1].Name != "y" || got[1].KeyPrefix != "" {
		t.Fatalf("users from flags: %+v", got)
	}
}

func TestConfigTLS(t *testing.T) {
	certs := testcerts.New(t)
	c, err := Load([]string{"-listen", "", "-tls-listen", "127.0.0.1:0", "-tls-cert-file", certs.ServerCert,
		"-tls-key-file", certs.ServerKey, "-tls-ca-cert-file", certs.CA, "-tls-min-version", "1.3"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "" || c.TLSListen != "127.0.0.1:0" || c.TLS == nil || len(c.TLS.Certificates) != 1 ||
		c.TLS.ClientAuth != tls.RequireAndVerifyClientCert || c.TLS.MinVersion != tls.VersionTLS13 {
		t.Fatalf("TLS listener: %+v", c)
	}
	if c.Quorum.TLSConfig != nil {
		t.Fatal("backend TLS settings without backend_tls_ keys")
	}
	c, err = Load([]string{"-backends", "rediss://a:1,rediss://b:2,rediss://c:3", "-backend-tls-ca-cert-file", certs.CA,
		"-backend-tls-cert-file", certs.ClientCert, "-backend-tls-key-file", certs.ClientKey, "-backend-tls-server-name", "redis.internal"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if bt := c.Quorum.TLSConfig; bt == nil || bt.RootCAs == nil || len(bt.Certificates) != 1 || bt.ServerName != "redis.internal" || c.TLS != nil {
		t.Fatalf("backend TLS: %+v", bt)
	}
}

func TestConfigRejectsTLS(t *testing.T) {
	certs := testcerts.New(t)
	notPEM := writeConfig(t, "not a certificate")
	for _, tc := range []struct {
		name string
		args []string
		key  string
	}{
		{"nothing to listen on", []string{"-listen", ""}, "listen"},
		{"cert without tls_listen", []string{"-tls-cert-file", certs.ServerCert}, "tls_cert_file"},
		{"client CA without tls_listen", []string{"-tls-ca-cert-file", certs.CA}, "tls_ca_cert_file"},
		{"tls_listen without a key", []string{"-tls-listen", ":0", "-tls-cert-file", certs.ServerCert}, "tls_key_file"},
		{"key of another certificate", []string{"-tls-listen", ":0", "-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ClientKey}, "tls_cert_file"},
		{"missing certificate", []string{"-tls-listen", ":0", "-tls-cert-file", "/nonexistent.pem", "-tls-key-file", certs.ServerKey}, "tls_cert_file"},
		{"client CA not PEM", []string{"-tls-listen", ":0", "-tls-cert-file", certs.ServerCert, "-tls-key-file", certs.ServerKey, "-tls-ca-cert-file", notPEM}, "tls_ca_cert_file"},
		{"old TLS", []string{"-tls-min-version", "1.0"}, "tls_min_version"},
		{"backend TLS without rediss", []string{"-backends", "redis://a:1", "-backend-tls-ca-cert-file", certs.CA}, "backend_tls"},
		{"backend cert without key", []string{"-backends", "rediss://a:1", "-backend-tls-cert-file", certs.ClientCert}, "backend_tls_key_file"},
		{"backend CA missing", []string{"-backends", "rediss://a:1", "-backend-tls-ca-cert-file", "/nonexistent.pem"}, "backend_tls_ca_cert_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("want an error naming %s, got %v", tc.key, err)
			}
		})
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigExampleKeys: config.example.toml sets every key of the table,
// in its order, to its default, and shows the table-valued one, [[users]],
// as commented-out tables (no users, its default).
func TestConfigExampleKeys(t *testing.T) {
	example, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if _, err := toml.Decode(string(example), &values); err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`^([a-z_0-9]+) = `)
	table := regexp.MustCompile(`^# \[\[([a-z_0-9]+)\]\]$`)
	var listed []string
	for line := range strings.SplitSeq(string(example), "\n") {
		if m := setting.FindStringSubmatch(line); m != nil {
			listed = append(listed, m[1])
		} else if m := table.FindStringSubmatch(line); m != nil && !slices.Contains(listed, "[["+m[1]+"]]") {
			if _, ok := values[m[1]]; ok {
				t.Errorf("%s: set as well as shown commented out", m[1])
			}
			listed = append(listed, "[["+m[1]+"]]")
		}
	}
	if exp, got := tableNames(), listed; !slices.Equal(exp, got) {
		t.Fatalf("config.example.toml lists other keys than the table, or in another order:\ntable:   %v\nexample: %v", exp, got)
	}
	for _, k := range keys {
		v, ok := values[k.name]
		if !ok {
			continue // a table, checked above
		}
		if exp, got := k.value().String(), flagText(v); exp != got {
			t.Errorf("%s: the table's default is %q, config.example.toml's %q", k.name, exp, got)
		}
	}
}

// flagText writes a TOML value as a flag would give it.
func flagText(v any) string {
	switch v := v.(type) {
	case []any:
		s := make([]string, len(v))
		for i, e := range v {
			s[i] = flagText(e)
		}
		return strings.Join(s, ",")
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// tableNames are the names of keys as TOML writes them: [[users]] for the
// table-valued key.
func tableNames() []string {
	var names []string
	for _, k := range keys {
		switch k.value().(type) {
		case *usersValue, *groupsValue:
			names = append(names, "[["+k.name+"]]")
		default:
			names = append(names, k.name)
		}
	}
	return names
}

// TestConfigHelp: -help names every key's flag, with its help and default.
func TestConfigHelp(t *testing.T) {
	for _, arg := range []string{"-help", "-h"} {
		var out strings.Builder
		if _, err := Load([]string{arg}, noEnv, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, k := range keys {
			def := k.value().String()
			if def == "" {
				def = "empty"
			}
			want := fmt.Sprintf("  -%s %s\n    \t%s (default %s)\n", k.flag(), k.value().kind(), k.help, def)
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s does not show %s as\n%s", arg, k.name, want)
			}
		}
		if !strings.Contains(out.String(), "  -config path\n") {
			t.Errorf("%s does not show -config", arg)
		}
		// What it is and how it is run come first, before the flags.
		for _, want := range []string{"lockproxy speaks the Redis protocol", "into Redlock quorum operations",
			"\n  lockproxy\n", "\n  lockproxy -config /etc/lockproxy/lockproxy.toml\n", "  -version\n"} {
			if i, flags := strings.Index(out.String(), want), strings.Index(out.String(), "  -config path"); i < 0 || want != "  -version\n" && i > flags {
				t.Errorf("%s: %q missing or after the flags", arg, want)
			}
		}
	}
	if _, err := Load([]string{"-version"}, noEnv, io.Discard); !errors.Is(err, ErrVersion) {
		t.Fatalf("-version: %v", err)
	}
}

// TestConfigUsageErrors: a command line that does not parse is a
// UsageError (exit status 2) that says what was wrong, suggests the flag
// probably meant, and points to -help rather than printing all of it.
func TestConfigUsageErrors(t *testing.T) {
	const pointer = "\nRun lockproxy -help for every flag and configuration key."
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backend", "redis://a:1"}, "flag provided but not defined: -backend\ndid you mean -backends?"},
		{[]string{"-max_ttl", "5s"}, "flag provided but not defined: -max_ttl\ndid you mean -max-ttl?"},
		{[]string{"-max-tll", "5s"}, "flag provided but not defined: -max-tll\ndid you mean -max-ttl?"},
		{[]string{"-verison"}, "flag provided but not defined: -verison\ndid you mean -version?"},
		{[]string{"-hepl"}, "flag provided but not defined: -hepl\ndid you mean -help?"},
		{[]string{"-zzz"}, "flag provided but not defined: -zzz"},
		{[]string{"-max-ttl", "5s", "extra"}, `unexpected argument "extra": every setting is a flag (-name value)`},
		{[]string{"-pprof=maybe"}, `invalid boolean value "maybe" for -pprof: parse error`},
	} {
		var out strings.Builder
		_, err := Load(tc.args, noEnv, &out)
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: want a usage error, got %v", tc.args, err)
			continue
		}
		if exp, got := tc.want+pointer, err.Error(); exp != got {
			t.Errorf("%v:\nwant %q\ngot  %q", tc.args, exp, got)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote the usage too: %q", tc.args, out.String())
		}
	}
}

// TestConfigListenPorts: an address to listen on whose port is out of
// range or missing stops the start, naming the key; 0 (any free port) is
// taken.
func TestConfigListenPorts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "127.0.0.1:99999"}, `listen: port 99999 is out of range in "127.0.0.1:99999": a port is a number from 1 to 65535 (0 picks a free one)`},
		{[]string{"-metrics", ":65536"}, `metrics: port 65536 is out of range in ":65536": a port is a number from 1 to 65535 (0 picks a free one)`},
		{[]string{"-listen", ":-1"}, `listen: port -1 is out of range in ":-1": a port is a number from 1 to 65535 (0 picks a free one)`},
		{[]string{"-metrics", "127.0.0.1:http"}, `metrics: port http is out of range in "127.0.0.1:http": a port is a number from 1 to 65535 (0 picks a free one)`},
		{[]string{"-tls-listen", "localhost"}, `tls_listen: "localhost" is not host:port (e.g. 127.0.0.1:7379, or :7379 for every interface)`},
	} {
		if _, err := Load(tc.args, noEnv, io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("%v:\nwant %q\ngot  %v", tc.args, tc.want, err)
		}
	}
	if _, err := Load([]string{"-listen", "127.0.0.1:0", "-metrics", "[::1]:65535"}, noEnv, io.Discard); err != nil {
		t.Errorf("port 0 and 65535: %v", err)
	}
}

// TestConfigBackendURLs: each mistake in a backend URL is told in plain
// words naming the entry and what to write, never with the password.
func TestConfigBackendURLs(t *testing.T) {
	const escapes = `not a URL as written: write redis://[user:password@]host:port[/db], with a password's "/", "?", "#", "@" and "%" as %2F, %3F, %23, %40 and %25`
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", "entry 1 (127.0.0.1:6379): no scheme: write redis://127.0.0.1:6379 (rediss:// for TLS)"},
		{"http://db1:6379", "entry 1 (db1:6379): http:// is not a Redis scheme: write redis://db1:6379 (rediss:// for TLS, unix:// for a socket)"},
		{"redis://db1:99999", "entry 1 (db1:99999): port 99999 is out of range: a port is 1 to 65535 (Redis's own is 6379)"},
		{"redis://db1:0", "entry 1 (db1:0): port 0 is out of range: a port is 1 to 65535 (Redis's own is 6379)"},
		{"redis://db1:s3cret", "entry 1 (db1): the port is not a number; a password goes before the host: redis://:PASSWORD@host:6379"},
		{"redis://db1:6379:s3cret", "entry 1 (db1): more than host:port after the host; a password goes before it: redis://:PASSWORD@host:6379"},
		{"redis://db1:6379?password=s3cret", "entry 1 (db1:6379): option password: the user and password go before the host: redis://USER:PASSWORD@host:port, or redis://:PASSWORD@host:port"},
		{"redis://s3cret@db1:6379", "entry 1 (db1:6379): a user name but no password: a password alone is written redis://:PASSWORD@host:port (with the colon)"},
		{"redis://db1:6379?pool_size=5", `entry 1 (db1:6379): option "pool_size" is not used: a backend URL takes db or skip_verify; the timeout is backend_timeout`},
		{"redis://db1:6379?foo=1", `entry 1 (db1:6379): option "foo" is not used: a backend URL takes db or skip_verify; the timeout is backend_timeout`},
		{"redis://db1:6379/zero", `entry 1 (db1:6379): database "zero" is not a number: end the URL with /0, /1... or leave the database out (0)`},
		{"redis://:s3c#ret@db1:6379", "entry 1 (db1:6379): " + escapes},
		{"redis://:s3c/ret@db1:6379", "entry 1 (db1:6379): " + escapes},
		{"redis://:s3c?ret@db1:6379", "entry 1 (db1:6379): " + escapes},
		{"redis://db1:6379#", `entry 1 (db1:6379): a "#" ends the URL there: write it %23 (in a password, say)`},
	} {
		// Second in the list: the entry is named by its place.
		_, err := Load([]string{"-backends", "redis://db0:6379," + tc.url}, noEnv, io.Discard)
		want := "backends: " + strings.Replace(tc.want, "entry 1", "entry 2", 1)
		if err == nil || err.Error() != want {
			t.Errorf("%s:\nwant %q\ngot  %v", tc.url, want, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3c") {
			t.Errorf("%s: the error shows the password: %v", tc.url, err)
		}
	}
	for _, ok := range []string{"redis://db1", "redis://db1:6379/2", "rediss://u:p%23w@db1:6380?skip_verify=true&db=1", "redis://:p%2Fw@[::1]:6379", "unix:///run/redis.sock?db=1"} {
		if _, err := Load([]string{"-backends", ok}, noEnv, io.Discard); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestConfigTypeErrors: a value of the wrong TOML type names the key, the
// type it takes and the type it was given, in TOML's words, not Go's.
func TestConfigTypeErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`backends = "redis://a:6379"`, `backends: want an array of strings (["redis://host:6379"]), got a string`},
		{`backends = [1, 2]`, `backends: want an array of strings (["redis://host:6379"]), got an array of something else`},
		{`max_ttl = 60`, `max_ttl: want a duration, as a string ("24h"), got an integer`},
		{`max_request_bytes = "1MiB"`, `max_request_bytes: want an integer, got a string`},
		{`drift_factor = "0.01"`, `drift_factor: want a number, got a string`},
		{`restart_quarantine = "no"`, `restart_quarantine: want true or false, got a string`},
		{`listen = 7379`, `listen: want a string ("127.0.0.1:7379"), got an integer`},
		{`metrics = 9100`, `metrics: want a string, got an integer`},
		{`users = "alice"`, `users: want an array of tables ([[users]] with name and password_sha256 or password_bcrypt), got a string`},
		{"[[users]]\nname = 1", `users.name: want a string, got an integer`},
	} {
		path := writeConfig(t, tc.file)
		_, err := Load([]string{"-config", path}, noEnv, io.Discard)
		if want := path + ": " + tc.want; err == nil || err.Error() != want {
			t.Errorf("%s:\nwant %q\ngot  %v", tc.file, want, err)
		}
	}
}

// TestLoggerDurations: JSON logs write durations as Go writes them ("5s",
// "1.5ms"), not as nanoseconds; text logs are as they were.
func TestLoggerDurations(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"json", `"timeout":"5s","group":{"latency":"1.5ms"}}`},
		{"text", `timeout=5s group.latency=1.5ms`},
	} {
		var out strings.Builder
		NewLogger(&out, tc.format, slog.LevelInfo).Info("m", "timeout", 5*time.Second, slog.Group("group", "latency", 1500*time.Microsecond))
		if !strings.HasSuffix(strings.TrimSpace(out.String()), tc.want) {
			t.Errorf("%s: want the line to end with %s, got %s", tc.format, tc.want, out.String())
		}
	}
}

// TestConfigDriftFactorIsTheEngines: config accepts a drift factor exactly
// when quorum.New does, so that no value the file takes fails later, and
// the engine takes none the file refuses. 0 is left out: it is the engine's
// "default", and the file's 0 is refused rather than read as 0.01.
func TestConfigDriftFactorIsTheEngines(t *testing.T) {
	backend := miniredis.RunT(t)
	for _, f := range []float64{-1, -0.01, 1e-9, 0.01, 0.49999, 0.5, 0.9, 1, 1.5, math.Inf(1), math.NaN()} {
		text := strconv.FormatFloat(f, 'g', -1, 64)
		_, cfgErr := Load([]string{"-drift-factor", text}, noEnv, io.Discard)
		e, engineErr := quorum.New(quorum.Config{Backends: []string{"redis://" + backend.Addr()}, DriftFactor: f, Logger: slog.New(slog.DiscardHandler)})
		if e != nil {
			e.Close()
		}
		if (cfgErr == nil) != (engineErr == nil) {
			t.Errorf("drift factor %s: config says %v, the engine %v", text, cfgErr, engineErr)
		}
	}
}

// TestConfigLimitOfRequestBytes: max_request_bytes is bounded by the
// proxy's own limit, so a value beyond it is refused naming the key.
func TestConfigLimitOfRequestBytes(t *testing.T) {
	limit := strconv.Itoa(proxy.MaxRequestBytesLimit)
	c, err := Load([]string{"-max-request-bytes", limit}, noEnv, io.Discard)
	if err != nil || c.Proxy.MaxRequestBytes != proxy.MaxRequestBytesLimit {
		t.Fatalf("the limit itself: %v", err)
	}
	if _, err := Load([]string{"-max-request-bytes", strconv.Itoa(proxy.MaxRequestBytesLimit + 1)}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "max_request_bytes") {
		t.Fatalf("beyond the limit: %v", err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestConfigDocsReload: docs/configuration.md's "Reloading the
// configuration" names every key under what a reload does with it, as the
// table says.
func TestConfigDocsReload(t *testing.T) {
	page, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(page), "\n## Reloading the configuration\n")
	section, _, _ = strings.Cut(section, "\n#")
	bullets := map[OnReload]string{Live: "- **Applied", Restart: "- **Refused until a restart", Engine: "- **Refused**"}
	code := regexp.MustCompile("`([^`]*)`")
	for class, head := range bullets {
		_, text, ok := strings.Cut(section, "\n"+head)
		if !ok {
			t.Fatalf("no bullet %q", head)
		}
		text, _, _ = strings.Cut(text, "\n- ")
		text, _, _ = strings.Cut(text, "\n\n")
		var exp, got []string
		for _, k := range keys {
			if k.reload == class {
				exp = append(exp, k.name)
			}
		}
		for _, m := range code.FindAllStringSubmatch(text, -1) {
			name := strings.TrimSuffix(strings.TrimPrefix(m[1], "[["), "]]")
			if slices.ContainsFunc(keys, func(k key) bool { return k.name == name }) && !slices.Contains(got, name) {
				got = append(got, name)
			}
		}
		slices.Sort(exp)
		slices.Sort(got)
		if !slices.Equal(exp, got) {
			t.Errorf("%s: %s names %v, the table %v", head, referenceFile, got, exp)
		}
	}
}

// TestConfigCluster: cluster_nodes and cluster_announce name this instance
// among the others, or say what to set.
func TestConfigCluster(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-cluster-nodes", "10.0.0.1:7379,10.0.0.2"}, `cluster_nodes: entry 2 ("10.0.0.2") is not host:port with a port from 1 to 65535, as clients reach that lockproxy`},
		{[]string{"-cluster-nodes", "10.0.0.1:7379,10.0.0.1:7379"}, `cluster_nodes: entry 2 (10.0.0.1:7379) is named twice`},
		{[]string{"-cluster-announce", "10.0.0.1:7379"}, `cluster_announce: set, but cluster_nodes is empty: list every lockproxy instance there`},
		{[]string{"-listen", ":7379", "-cluster-nodes", "10.0.0.1:7379,10.0.0.2:7379"}, `cluster_announce: empty, and listen (":7379") names no host clients can reach: set it to this instance's entry of cluster_nodes`},
		{[]string{"-cluster-nodes", "10.0.0.1:7379,10.0.0.2:7379", "-cluster-announce", "10.0.0.3:7379"}, `cluster_announce: 10.0.0.3:7379 is not among cluster_nodes (10.0.0.1:7379,10.0.0.2:7379): list this instance there, as clients reach it`},
	} {
		if _, err := Load(append(tc.args, "-backends", "redis://a:1"), noEnv, io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("%v:\nwant %q\ngot  %v", tc.args, tc.want, err)
		}
	}
	cfg, err := Load([]string{"-backends", "redis://a:1", "-listen", "10.0.0.2:7379", "-cluster-nodes", "10.0.0.1:7379, 10.0.0.2:7379"}, noEnv, io.Discard)
	if err != nil || cfg.Proxy.Cluster.Announce != "10.0.0.2:7379" || len(cfg.Proxy.Cluster.Nodes) != 2 {
		t.Errorf("listen as the announced address: %+v, %v", cfg, err)
	}
}

// TestConfigGroups: shard groups from the flags and from [[groups]], and
// the mistakes told: with backends too, a backend in two groups, a group
// without backends, a bad URL named by its group.
func TestConfigGroups(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backends", "redis://a:1", "-groups", "redis://b:1"}, "backends, groups: both set: with shard groups, list each group's backends in its [[groups]] entry"},
		{[]string{"-groups", "redis://a:1,redis://b:1", "-groups", "redis://c:1,redis://a:1"}, "groups: group 2: backend a:1 is in group 1 too: a backend serves one group"},
		{[]string{"-groups", "redis://a:1", "-groups", " , "}, "groups: group 2: no backends"},
		{[]string{"-groups", "redis://a:1", "-groups", "b:1"}, "groups: group 2: entry 1 (b:1): no scheme: write redis://b:1 (rediss:// for TLS)"},
	} {
		if _, err := Load(tc.args, noEnv, io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("%v:\nwant %q\ngot  %v", tc.args, tc.want, err)
		}
	}
	path := filepath.Join(t.TempDir(), "groups.toml")
	if err := os.WriteFile(path, []byte("[[groups]]\nbackends = [\"redis://a:1\", \"redis://b:1\", \"redis://c:1\"]\n\n[[groups]]\nbackends = [\"redis://d:1\", \"redis://e:1\", \"redis://f:1\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"-config", path}, noEnv, io.Discard)
	if err != nil || len(cfg.Groups) != 2 || cfg.Groups[1][2] != "redis://f:1" || cfg.Embedded || len(cfg.Quorum.Backends) != 0 {
		t.Fatalf("[[groups]]: %+v, %v", cfg, err)
	}
	cfg, err = Load([]string{"-config", path, "-groups", "redis://x:1"}, noEnv, io.Discard)
	if err != nil || len(cfg.Groups) != 1 || cfg.Groups[0][0] != "redis://x:1" {
		t.Fatalf("-groups over [[groups]]: %+v, %v", cfg, err)
	}
}
