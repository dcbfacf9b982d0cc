package config

import (
	"io/fs"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// keys is every configuration key, in the order of config.example.toml
// (which tests hold to it) and of docs/configuration.md (made from it). A
// row is the key's name in TOML (its flag is the same with dashes), what a
// reload does with it, its help, and its type with the default, the bounds
// and where the value goes.
// Checks that need several keys at once are in resolve.
var keys = []key{
	{"listen", Restart, "address to serve RESP on",
		address("127.0.0.1:7379", func(s *settings, v string) { s.Listen = v })},
	{"tls_listen", Restart, "address to serve RESP over TLS on; empty: no TLS",
		address("", func(s *settings, v string) { s.TLSListen = v })},
	{"unix_socket", Restart, "path of a Unix socket to serve RESP on, beside listen (Redis's unixsocket); empty: none",
		filename("", func(s *settings, v string) { s.UnixSocket = v })},
	{"unix_socket_perm", Restart, "permissions of unix_socket, in octal (Redis's unixsocketperm)",
		permissions("700", func(s *settings, v fs.FileMode) { s.UnixSocketPerm = v })},
	{"tls_cert_file", Live, "PEM certificate (chain) of the TLS listener",
		filename("", func(s *settings, v string) { s.tlsCertFile = v })},
	{"tls_key_file", Live, "PEM private key of the TLS listener",
		filename("", func(s *settings, v string) { s.tlsKeyFile = v })},
	{"tls_ca_cert_file", Live, "PEM CAs that sign client certificates; set: clients must present one (mutual TLS)",
		filename("", func(s *settings, v string) { s.tlsCACertFile = v })},
	{"tls_min_version", Live, "oldest TLS version accepted",
		choice("1.2", []string{"1.2", "1.3"}, func(s *settings, v string) { s.tlsMinVersion = tlsVersions[v] })},
	{"cluster_nodes", Restart, "comma-separated addresses (host:port, as clients reach them) of every lockproxy instance, this one included, that cluster-mode clients see as one Redis Cluster; empty: a standalone server",
		list(`["10.0.0.1:7379", "10.0.0.2:7379"]`, checkClusterNodes, func(s *settings, v []string) {
			if len(v) > 0 { // an empty list in the file is no list, as the default
				s.Proxy.Cluster.Nodes = v
			}
		})},
	{"cluster_announce", Restart, "this instance's address among cluster_nodes; empty: listen's, when it names a host",
		address("", func(s *settings, v string) { s.Proxy.Cluster.Announce = v })},
	{"backends", Engine, "comma-separated backend URLs (redis://host:port, rediss://user:pass@host:port)",
		list(`["redis://host:6379"]`, checkBackends, func(s *settings, v []string) { s.Quorum.Backends = v })},
	{"groups", Engine, "a shard group: its backend URLs, comma-separated; repeat for each group, in the same order on every proxy (each serves an equal range of hash slots); instead of backends",
		groups(func(s *settings, v [][]string) { s.Groups = v })},
	{"backend_set_epoch", Engine, "number of the backend set: every proxy running the same backends has the same; raise it by one with each change of backends",
		integer(1, 1, math.MaxInt32, func(s *settings, v int) { s.Quorum.BackendSetEpoch = v })},
	{"backend_tls_ca_cert_file", Engine, "PEM CAs that sign the rediss:// backends' certificates; empty: the system's",
		filename("", func(s *settings, v string) { s.backendCACertFile = v })},
	{"backend_tls_cert_file", Engine, "PEM client certificate for the rediss:// backends (mutual TLS)",
		filename("", func(s *settings, v string) { s.backendCertFile = v })},
	{"backend_tls_key_file", Engine, "PEM private key of backend-tls-cert-file",
		filename("", func(s *settings, v string) { s.backendKeyFile = v })},
	{"backend_tls_server_name", Engine, "name the rediss:// backends' certificates must hold; empty: each one's host",
		text("", func(s *settings, v string) { s.backendServerName = v })},
	{"metrics", Restart, "address for /metrics, /healthz and /readyz; empty disables",
		address("", func(s *settings, v string) { s.Metrics = v })},
	{"pprof", Restart, "also serve Go's /debug/pprof/ profiles on the metrics address",
		boolean(false, func(s *settings, v bool) { s.Pprof = v })},
	{"backend_timeout", Engine, "timeout of each backend request",
		duration("50ms", func(s *settings, v time.Duration) { s.Quorum.NodeTimeout = v })},
	// The engine's bound, which quorum.New checks again: see its validate.
	{"drift_factor", Engine, "clock drift allowance as a share of the TTL",
		ratio(0.01, 0, 0.5, func(s *settings, v float64) { s.Quorum.DriftFactor = v })},
	// 24h admits the leases lock users configure (docs/configuration.md);
	// a backend's wait after a loss is its horizon, and max_ttl only where
	// no witness can tell the horizon.
	{"max_ttl", Engine, "longest lock TTL accepted; also the wait of a backend that lost its data where no other backend can tell how long its locks last (a cold start without lockproxy init, a total loss)",
		duration("24h", func(s *settings, v time.Duration) { s.Quorum.MaxTTL = v })},
	{"fencing", Engine, "mint a fencing token for every SET NX acquisition (FENCE key token reads it); every proxy of a deployment sets the same",
		boolean(false, func(s *settings, v bool) { s.Quorum.Fencing, s.Proxy.Fencing = v, v })},
	{"restart_quarantine", Engine, "ignore a restarted backend until every lock it may have forgotten has expired, at most max-ttl (turn off only with appendfsync always)",
		boolean(true, func(s *settings, v bool) { s.Quorum.DisableRestartQuarantine = !v })},
	{"max_request_bytes", Live, "largest request accepted",
		integer(1<<20, 1024, proxy.MaxRequestBytesLimit, func(s *settings, v int) { s.Proxy.MaxRequestBytes = v })},
	{"password", Live, "password clients must AUTH with; empty: none",
		text("", func(s *settings, v string) { s.Proxy.Password = v })},
	{"password_file", Live, "file holding password (a final newline is dropped), read again on reload; set one of the two",
		filename("", func(s *settings, v string) { s.passwordFile = v })},
	{"users", Live, "a user, name:sha256:HEX[:key-prefix] or name:bcrypt:HASH[:key-prefix]; repeat for more",
		users(func(s *settings, v []user) {
			s.Proxy.Users = make([]proxy.User, len(v))
			for i, u := range v {
				s.Proxy.Users[i] = proxy.User{Name: u.Name, PasswordSHA256: u.PasswordSHA256, PasswordBcrypt: u.PasswordBcrypt, KeyPrefix: u.KeyPrefix, Session: u.Session}
			}
		})},
	{"users_file", Live, "file of more users, one a line as -users takes them (# starts a comment), read again on reload",
		filename("", func(s *settings, v string) { s.usersFile = v })},
	{"allow_flush", Live, "let FLUSHDB and FLUSHALL delete every lock of the caller's key space, as test suites' teardowns do (always allowed on the embedded backends)",
		boolean(false, func(s *settings, v bool) { s.Proxy.AllowFlush = v })},
	{"max_clients", Live, "most client connections open at once",
		integer(10000, 1, math.MaxInt, func(s *settings, v int) { s.Proxy.MaxClients = v })},
	{"idle_timeout", Live, "close a client connection that has not sent a whole command for this long (idle, or sending one too slowly); 0s: never",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.Proxy.IdleTimeout = v })},
	{"client_write_timeout", Live, "close a client connection that has taken none of its replies for this long (it stopped reading); or idle-timeout, when shorter",
		duration("10s", func(s *settings, v time.Duration) { s.Proxy.WriteTimeout = v })},
	{"max_key_bytes", Live, "longest key accepted",
		integer(1024, 1, math.MaxInt, func(s *settings, v int) { s.Proxy.MaxKeyBytes = v })},
	{"max_token_bytes", Live, "longest lock token accepted",
		integer(1024, 1, math.MaxInt, func(s *settings, v int) { s.Proxy.MaxTokenBytes = v })},
	{"session_lease", Restart, "TTL on the backends of a session-bound lock (SET key token NX without a TTL, SETNX before its PEXPIRE, LOCK.ACQUIRE ... SESSION), renewed at a third of it while the connection that took it is open; at most max_ttl; 0s: 10s, or max_ttl when shorter",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.Proxy.Sessions.Lease = v })},
	{"session_max_hold", Restart, "longest a session-bound lock is held: then it is released and its holder told (-LOCKLOST); 0s: no bound",
		durationOrNever("1h", func(s *settings, v time.Duration) {
			if v == 0 {
				v = -1 // proxy.SessionConfig's "no bound"
			}
			s.Proxy.Sessions.MaxHold = v
		})},
	{"session_idle_timeout", Restart, "release the session-bound locks of a connection that has sent no command for this long (its holder told on its next one); 0s: never",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.Proxy.Sessions.IdleTimeout = v })},
	{"session_prefixes", Restart, "comma-separated key prefixes under which every SET NX, SETNX and LOCK.ACQUIRE lock is session-bound, whatever its TTL",
		list(`["jobs:"]`, nil, func(s *settings, v []string) {
			if len(v) > 0 { // an empty list in the file is no list, as the default
				s.Proxy.Sessions.Prefixes = v
			}
		})},
	{"shutdown_timeout", Live, "how long commands in flight may finish on SIGTERM",
		duration("10s", func(s *settings, v time.Duration) { s.ShutdownTimeout = v })},
	{"log_format", Restart, "format of the logs on standard error",
		choice("text", []string{"text", "json"}, func(s *settings, v string) { s.LogFormat = v })},
	{"log_level", Live, "least severe level logged",
		level("info", func(s *settings, v slog.Level) { s.LogLevel = v })},
}

// defaultSessionLease is session_lease's 0s, unless max_ttl is shorter.
const defaultSessionLease = 10 * time.Second

// key is a row of keys.
type key struct {
	name   string
	reload OnReload // what SIGHUP does when its value changed
	help   string
	value  func() value // a new value holding the default
}

// OnReload is what a reload (SIGHUP) does with a key whose value, or the
// content of the file it names, changed.
type OnReload int

const (
	// Live keys are applied: to the connections accepted from then on, and
	// to every AUTH (users), without closing any connection.
	Live OnReload = iota
	// Restart keys are refused, and their running values kept until a
	// restart: lockproxy does not reopen listeners or its log handler.
	Restart
	// Engine keys are handed to the reloader's changeEngine, which refuses
	// them for now: the running engine and its backends are kept.
	Engine
)

func (k key) flag() string { return strings.ReplaceAll(k.name, "_", "-") }

// env is the key's environment variable: max_ttl is LOCKPROXY_MAX_TTL.
func (k key) env() string { return "LOCKPROXY_" + strings.ToUpper(k.name) }
