package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// keys is every configuration key, in the order of config.example.toml and
// of the README's table, which tests hold to it. A row is the key's name in
// TOML (its flag is the same with dashes), what a reload does with it, its
// help, and its type with the default, the bounds and where the value goes.
// Checks that need several keys at once are in resolve.
var keys = []key{
	{"listen", restart, "address to serve RESP on",
		address("127.0.0.1:7379", func(s *settings, v string) { s.listen = v })},
	{"tls_listen", restart, "address to serve RESP over TLS on; empty: no TLS",
		address("", func(s *settings, v string) { s.tlsListen = v })},
	{"unix_socket", restart, "path of a Unix socket to serve RESP on, beside listen (Redis's unixsocket); empty: none",
		filename("", func(s *settings, v string) { s.unixSocket = v })},
	{"unix_socket_perm", restart, "permissions of unix_socket, in octal (Redis's unixsocketperm)",
		permissions("700", func(s *settings, v fs.FileMode) { s.unixSocketPerm = v })},
	{"tls_cert_file", live, "PEM certificate (chain) of the TLS listener",
		filename("", func(s *settings, v string) { s.tlsCertFile = v })},
	{"tls_key_file", live, "PEM private key of the TLS listener",
		filename("", func(s *settings, v string) { s.tlsKeyFile = v })},
	{"tls_ca_cert_file", live, "PEM CAs that sign client certificates; set: clients must present one (mutual TLS)",
		filename("", func(s *settings, v string) { s.tlsCACertFile = v })},
	{"tls_min_version", live, "oldest TLS version accepted",
		choice("1.2", []string{"1.2", "1.3"}, func(s *settings, v string) { s.tlsMinVersion = tlsVersions[v] })},
	{"cluster_nodes", restart, "comma-separated addresses (host:port, as clients reach them) of every lockproxy instance, this one included, that cluster-mode clients see as one Redis Cluster; empty: a standalone server",
		list(`["10.0.0.1:7379", "10.0.0.2:7379"]`, checkClusterNodes, func(s *settings, v []string) {
			if len(v) > 0 { // an empty list in the file is no list, as the default
				s.proxy.Cluster.Nodes = v
			}
		})},
	{"cluster_announce", restart, "this instance's address among cluster_nodes; empty: listen's, when it names a host",
		address("", func(s *settings, v string) { s.proxy.Cluster.Announce = v })},
	{"backends", engine, "comma-separated backend URLs (redis://host:port, rediss://user:pass@host:port)",
		list(`["redis://host:6379"]`, checkBackends, func(s *settings, v []string) { s.quorum.Backends = v })},
	{"groups", engine, "a shard group: its backend URLs, comma-separated; repeat for each group, in the same order on every proxy (each serves an equal range of hash slots); instead of backends",
		groups(func(s *settings, v [][]string) { s.groups = v })},
	{"backend_set_epoch", engine, "number of the backend set: every proxy running the same backends has the same; raise it by one with each change of backends",
		integer(1, 1, math.MaxInt32, func(s *settings, v int) { s.quorum.BackendSetEpoch = v })},
	{"backend_tls_ca_cert_file", engine, "PEM CAs that sign the rediss:// backends' certificates; empty: the system's",
		filename("", func(s *settings, v string) { s.backendCACertFile = v })},
	{"backend_tls_cert_file", engine, "PEM client certificate for the rediss:// backends (mutual TLS)",
		filename("", func(s *settings, v string) { s.backendCertFile = v })},
	{"backend_tls_key_file", engine, "PEM private key of backend-tls-cert-file",
		filename("", func(s *settings, v string) { s.backendKeyFile = v })},
	{"backend_tls_server_name", engine, "name the rediss:// backends' certificates must hold; empty: each one's host",
		text("", func(s *settings, v string) { s.backendServerName = v })},
	{"metrics", restart, "address for /metrics, /healthz and /readyz; empty disables",
		address("", func(s *settings, v string) { s.metrics = v })},
	{"pprof", restart, "also serve Go's /debug/pprof/ profiles on the metrics address",
		boolean(false, func(s *settings, v bool) { s.pprof = v })},
	{"backend_timeout", engine, "timeout of each backend request",
		duration("50ms", func(s *settings, v time.Duration) { s.quorum.NodeTimeout = v })},
	// The engine's bound, which quorum.New checks again: see its validate.
	{"drift_factor", engine, "clock drift allowance as a share of the TTL",
		ratio(0.01, 0, 0.5, func(s *settings, v float64) { s.quorum.DriftFactor = v })},
	{"max_ttl", engine, "longest lock TTL accepted; also the restart quarantine",
		duration("60s", func(s *settings, v time.Duration) { s.quorum.MaxTTL = v })},
	{"fencing", engine, "mint a fencing token for every SET NX acquisition (FENCE key token reads it); every proxy of a deployment sets the same",
		boolean(false, func(s *settings, v bool) { s.quorum.Fencing, s.proxy.Fencing = v, v })},
	{"restart_quarantine", engine, "ignore a restarted backend for max-ttl (turn off only with appendfsync always)",
		boolean(true, func(s *settings, v bool) { s.quorum.DisableRestartQuarantine = !v })},
	{"max_request_bytes", live, "largest request accepted",
		integer(1<<20, 1024, proxy.MaxRequestBytesLimit, func(s *settings, v int) { s.proxy.MaxRequestBytes = v })},
	{"password", live, "password clients must AUTH with; empty: none",
		text("", func(s *settings, v string) { s.proxy.Password = v })},
	{"password_file", live, "file holding password (a final newline is dropped), read again on reload; set one of the two",
		filename("", func(s *settings, v string) { s.passwordFile = v })},
	{"users", live, "a user, name:sha256:HEX[:key-prefix] or name:bcrypt:HASH[:key-prefix]; repeat for more",
		users(func(s *settings, v []user) {
			s.proxy.Users = make([]proxy.User, len(v))
			for i, u := range v {
				s.proxy.Users[i] = proxy.User{Name: u.Name, PasswordSHA256: u.PasswordSHA256, PasswordBcrypt: u.PasswordBcrypt, KeyPrefix: u.KeyPrefix, Session: u.Session}
			}
		})},
	{"users_file", live, "file of more users, one a line as -users takes them (# starts a comment), read again on reload",
		filename("", func(s *settings, v string) { s.usersFile = v })},
	{"allow_flush", live, "let FLUSHDB and FLUSHALL delete every lock of the caller's key space, as test suites' teardowns do (always allowed on the embedded backends)",
		boolean(false, func(s *settings, v bool) { s.proxy.AllowFlush = v })},
	{"max_clients", live, "most client connections open at once",
		integer(10000, 1, math.MaxInt, func(s *settings, v int) { s.proxy.MaxClients = v })},
	{"idle_timeout", live, "close a client connection that has not sent a whole command for this long (idle, or sending one too slowly); 0s: never",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.proxy.IdleTimeout = v })},
	{"client_write_timeout", live, "close a client connection that has taken none of its replies for this long (it stopped reading); or idle-timeout, when shorter",
		duration("10s", func(s *settings, v time.Duration) { s.proxy.WriteTimeout = v })},
	{"max_key_bytes", live, "longest key accepted",
		integer(1024, 1, math.MaxInt, func(s *settings, v int) { s.proxy.MaxKeyBytes = v })},
	{"max_token_bytes", live, "longest lock token accepted",
		integer(1024, 1, math.MaxInt, func(s *settings, v int) { s.proxy.MaxTokenBytes = v })},
	{"session_lease", restart, "TTL on the backends of a session-bound lock (SET key token NX without a TTL, SETNX before its PEXPIRE, LOCK.ACQUIRE ... SESSION), renewed at a third of it while the connection that took it is open; at most max_ttl; 0s: 10s, or max_ttl when shorter",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.proxy.Sessions.Lease = v })},
	{"session_max_hold", restart, "longest a session-bound lock is held: then it is released and its holder told (-LOCKLOST); 0s: no bound",
		durationOrNever("1h", func(s *settings, v time.Duration) {
			if v == 0 {
				v = -1 // proxy.SessionConfig's "no bound"
			}
			s.proxy.Sessions.MaxHold = v
		})},
	{"session_idle_timeout", restart, "release the session-bound locks of a connection that has sent no command for this long (its holder told on its next one); 0s: never",
		durationOrNever("0s", func(s *settings, v time.Duration) { s.proxy.Sessions.IdleTimeout = v })},
	{"session_prefixes", restart, "comma-separated key prefixes under which every SET NX, SETNX and LOCK.ACQUIRE lock is session-bound, whatever its TTL",
		list(`["jobs:"]`, nil, func(s *settings, v []string) {
			if len(v) > 0 { // an empty list in the file is no list, as the default
				s.proxy.Sessions.Prefixes = v
			}
		})},
	{"shutdown_timeout", live, "how long commands in flight may finish on SIGTERM",
		duration("10s", func(s *settings, v time.Duration) { s.shutdownTimeout = v })},
	{"log_format", restart, "format of the logs on standard error",
		choice("text", []string{"text", "json"}, func(s *settings, v string) { s.logFormat = v })},
	{"log_level", live, "least severe level logged",
		level("info", func(s *settings, v slog.Level) { s.logLevel = v })},
}

// defaultSessionLease is session_lease's 0s, unless max_ttl is shorter.
const defaultSessionLease = 10 * time.Second

// key is a row of keys.
type key struct {
	name   string
	reload onReload // what SIGHUP does when its value changed
	help   string
	value  func() value // a new value holding the default
}

// onReload is what a reload (SIGHUP) does with a key whose value, or the
// content of the file it names, changed.
type onReload int

const (
	// live keys are applied: to the connections accepted from then on, and
	// to every AUTH (users), without closing any connection.
	live onReload = iota
	// restart keys are refused, and their running values kept until a
	// restart: lockproxy does not reopen listeners or its log handler.
	restart
	// engine keys are handed to changeEngine, which refuses them for now:
	// the running engine and its backends are kept.
	engine
)

func (k key) flag() string { return strings.ReplaceAll(k.name, "_", "-") }

// env is the key's environment variable: max_ttl is LOCKPROXY_MAX_TTL.
func (k key) env() string { return "LOCKPROXY_" + strings.ToUpper(k.name) }

// config is what main wires together.
type config struct {
	listen          string
	tlsListen       string
	unixSocket      string
	unixSocketPerm  fs.FileMode
	tls             *tls.Config // of the TLS listener, when tlsListen is set
	metrics         string
	pprof           bool // serve /debug/pprof/ next to /metrics
	embedded        bool // neither a file nor backends given: run on in-memory ones
	shutdownTimeout time.Duration
	logFormat       string
	logLevel        slog.Level
	quorum          quorum.Config
	// groups are the backends of each shard group ([[groups]]); empty:
	// quorum.Backends is the one group.
	groups [][]string
	proxy  proxy.Config
	// fingerprints are what a reload compares to tell which keys changed,
	// by key: see fingerprints.
	fingerprints map[string][sha256.Size]byte
}

// settings is what the keys write to: the config, and what only several
// keys together make part of it (TLS).
type settings struct {
	config
	tlsCertFile, tlsKeyFile, tlsCACertFile                                string
	tlsMinVersion                                                         uint16
	backendCACertFile, backendCertFile, backendKeyFile, backendServerName string
	passwordFile, usersFile                                               string
	// configured is whether a configuration file was read or the backends
	// were given: the embedded backends are then never a fallback.
	configured bool
}

// errVersion is -version's answer to loadConfig's caller: print the
// version, start nothing.
var errVersion = errors.New("version requested")

// usageError is a command line that does not parse. main exits 2 with it,
// as the flag package's own ExitOnError does, and prints a pointer to
// -help rather than the whole of it, which would bury the one line that
// matters.
type usageError struct{ msg string }

func (e *usageError) Error() string {
	return e.msg + "\nRun lockproxy -help for every flag and configuration key."
}

// loadConfig reads the TOML file named by -config, if any, lets every
// environment variable that env finds (LOCKPROXY_MAX_TTL) override its key,
// and every flag that was set override both. Every error names the key. It
// only reads: it logs nothing, and out hears only -help, so that a reload
// may call it again. It returns flag.ErrHelp after writing -help to out,
// errVersion for -version, and a *usageError for a command line that does
// not parse.
func loadConfig(args []string, env func(string) (string, bool), out io.Writer) (*config, error) {
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	// The flag package's own complaint prints the whole usage after the
	// error; the error alone is returned, with a suggestion.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	path := fs.String("config", "", "TOML configuration file (see config.example.toml)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	values := make([]value, len(keys))
	for i, k := range keys {
		values[i] = k.value()
		fs.Var(values[i], k.flag(), k.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(out, values)
			return nil, err
		}
		return nil, flagError(fs, err)
	}
	if *showVersion {
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Sprintf("unexpected argument %q: every setting is a flag (-name value)", fs.Arg(0))}
	}
	flagged := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { flagged[f.Name] = true })
	// given names where each key's value comes from when not the file:
	// the file's value of such a key is only checked.
	given := map[string]string{}
	for i, k := range keys {
		if flagged[k.flag()] {
			given[k.name] = "-" + k.flag()
			continue
		}
		if v, ok := env(k.env()); ok {
			given[k.name] = k.env()
			if err := setFromEnv(values[i], v); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", k.name, k.env(), err)
			}
		}
	}
	if *path != "" {
		if err := readFile(*path, values, given); err != nil {
			return nil, fmt.Errorf("%s: %w", *path, err)
		}
	}
	_, backends := given["backends"]
	s := &settings{configured: *path != "" || backends}
	if *path != "" {
		s.proxy.ConfigFile, _ = filepath.Abs(*path)
	}
	for i, k := range keys {
		if err := values[i].apply(s); err != nil {
			if src := given[k.name]; strings.HasPrefix(src, "LOCKPROXY_") {
				return nil, fmt.Errorf("%s (%s): %w", k.name, src, err)
			}
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
	}
	// Before resolve reads the files: one that changes in between then
	// counts as changed at the next reload, rather than never.
	s.fingerprints = fingerprints(values)
	return s.resolve()
}

// fingerprints hashes each key's value and the content of the file it
// names, if any: a certificate rotated in place counts as changed, and no
// secret is kept in clear beyond the configuration itself.
func fingerprints(values []value) map[string][sha256.Size]byte {
	fp := make(map[string][sha256.Size]byte, len(keys))
	for i, k := range keys {
		fp[k.name] = sha256.Sum256([]byte(values[i].fingerprint()))
	}
	return fp
}

// setFromEnv sets v from an environment variable, which holds what the
// flag takes; for users, one user a line, as the flag takes one at a time.
func setFromEnv(v value, text string) error {
	u, ok := v.(*usersValue)
	if !ok {
		return v.Set(text)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if err := u.Set(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// readFile decodes the TOML file at path into values, but for the keys
// given otherwise (a flag, the environment): those go to a value that is
// dropped, so that the file is held to the keys' types even where it is
// overridden.
func readFile(path string, values []value, given map[string]string) error {
	var file map[string]toml.Primitive
	md, err := toml.DecodeFile(path, &file)
	if err != nil {
		return redactParseError(err)
	}
	for i, k := range keys {
		p, ok := file[k.name]
		if !ok {
			continue
		}
		v := values[i]
		if _, ok := given[k.name]; ok {
			v = k.value()
		}
		if err := v.decode(&md, p); err != nil {
			// An error about the key itself (not users.name) is its value's
			// type, which the decoder words in Go's terms ("destination
			// has type slice"), and only in its text.
			if m := incompatible.FindStringSubmatch(err.Error()); m != nil {
				switch {
				case m[1] == k.name:
					return fmt.Errorf("%s: want %s, got %s", k.name, k.value().want(), tomlType(md.Type(k.name)))
				case k.name == "users": // a field of a user, all strings
					return fmt.Errorf("%s: want a string, got %s", m[1], tomlType(md.Type(strings.Split(m[1], ".")...)))
				}
			}
			return err // names the key (users.name)
		}
	}
	// Decoding into the map marked every top-level key decoded, the unknown
	// ones too; what a value did not decode is left in Undecoded.
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
	}
	for _, k := range md.Keys() {
		if undecoded[k.String()] || len(k) == 1 && !slices.ContainsFunc(keys, func(r key) bool { return r.name == k[0] }) {
			return fmt.Errorf("unknown key %q", k.String())
		}
	}
	return nil
}

// redactParseError keeps a TOML syntax error's line and key but drops its
// message when the key may hold a secret (a password, a hash, a backend
// URL's credentials): the message quotes the text the parser stumbled on,
// and the error is printed at start and logged on reload.
func redactParseError(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	switch name, _, _ := strings.Cut(pe.LastKey, "."); name {
	case "password", "users", "backends", "groups":
		return fmt.Errorf("toml: line %d (last key %q): syntax error (not shown: the value may hold a secret)", pe.Position.Line, pe.LastKey)
	}
	return err
}

// flagError words a flag that does not parse, with the flag that was
// probably meant when one is undefined.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var defined []string
		fs.VisitAll(func(f *flag.Flag) { defined = append(defined, f.Name) })
		if s := suggestFlag(name, append(defined, "help")); s != "" {
			msg += "\ndid you mean -" + s + "?"
		}
	}
	return &usageError{msg}
}

// suggestFlag returns the defined flag nearest to name, a mistyped one, or
// "" when none is near enough to be what was meant. A TOML spelling
// (max_ttl) finds its flag (max-ttl) at once.
func suggestFlag(name string, defined []string) string {
	name = strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-")
	// A third of the name: -backend finds -backends, -ttl finds nothing.
	best, bestDist := "", max(1, len(name)/3)+1
	for _, d := range defined {
		if dist := editDistance(name, d); dist < bestDist {
			best, bestDist = d, dist
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// Levenshtein's, with two neighbours swapped (-hepl) one edit, as a typist
// makes it. By bytes: flag names are ASCII.
func editDistance(a, b string) int {
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev2, prev, cur := rows[0], rows[1], rows[2]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		rows = [3][]int{prev, cur, prev2}
	}
	return rows[1][len(b)]
}

// usage is -help: what lockproxy is, how it is most often run, then every
// key with its type, bounds and default.
func usage(w io.Writer, values []value) {
	fmt.Fprint(w, `lockproxy speaks the Redis protocol to applications and turns their lock
commands (SET key token NX PX ms, the release and extend scripts of the
common client libraries) into Redlock quorum operations on N independent
Redis masters, so that a client written for one Redis gets locks that
survive the loss of a minority of them. It keeps no lock state of its own:
any number of proxies may run in front of the same backends.

Usage: lockproxy [-config lockproxy.toml] [-flag value ...]

  lockproxy
	try it: 5 embedded in-memory backends (no fault tolerance), on 127.0.0.1:7379
  lockproxy -config /etc/lockproxy/lockproxy.toml
	production: the keys of config.example.toml, e.g.
	backends = ["redis://10.0.1.1:6379", "redis://10.0.2.1:6379", "redis://10.0.3.1:6379"]

Every key of the configuration file is also a flag, its name with dashes
(max_ttl: -max-ttl), and an environment variable, LOCKPROXY_ and its name
in capitals (LOCKPROXY_MAX_TTL), which takes what the flag takes (users:
one a line). A flag overrides the environment, which overrides the file.

  -config path
    	TOML configuration file (see config.example.toml)
  -version
    	print the version and exit
`)
	for i, k := range keys {
		def := values[i].String()
		if def == "" {
			def = "empty"
		}
		fmt.Fprintf(w, "  -%s %s\n    \t%s (default %s)\n", k.flag(), values[i].kind(), k.help, def)
	}
}

// value is a key's value while the file and the flags are read, kept as
// they give it: it is checked only once both are read, so that a flag may
// replace a bad value in the file as it may a good one.
type value interface {
	flag.Value // String is the value as its flag would give it
	decode(md *toml.MetaData, p toml.Primitive) error
	// apply checks the value's bounds and writes it to s.
	apply(s *settings) error
	// kind is the value's type and bounds, for -help.
	kind() string
	// want is the TOML value it takes, for a file that gives another type.
	want() string
	// fingerprint is the whole value, and the content of the file it
	// names, for telling whether a reload changed it.
	fingerprint() string
}

// cell is a value of type T, which is the type of the TOML value.
type cell[T any] struct {
	v       T
	typ     string
	example string                  // of a TOML value that has not T's type; default: the default
	parse   func(string) (T, error) // the flag's text
	show    func(T) string          // as the flag would give it
	to      func(*settings, T) error
}

func newCell[T any](typ string, def T, parse func(string) (T, error), show func(T) string, to func(*settings, T) error) func() value {
	return func() value { return &cell[T]{v: def, typ: typ, parse: parse, show: show, to: to} }
}

func (c *cell[T]) Set(s string) (err error) {
	c.v, err = c.parse(s)
	return err
}

func (c *cell[T]) String() string {
	if c == nil || c.show == nil { // flag.Value's contract: a zero value may be asked
		return ""
	}
	return c.show(c.v)
}

// IsBoolFlag lets a bool flag stand alone: -pprof for -pprof=true.
func (c *cell[T]) IsBoolFlag() bool { return c.typ == "bool" }

func (c *cell[T]) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &c.v)
}

func (c *cell[T]) apply(s *settings) error { return c.to(s, c.v) }

func (c *cell[T]) kind() string { return c.typ }

func (c *cell[T]) want() string {
	switch any(c.v).(type) {
	case bool:
		return "true or false"
	case int:
		return "an integer"
	case float64:
		return "a number"
	}
	example := c.example
	if example == "" {
		example = strconv.Quote(c.String())
	}
	switch _, list := any(c.v).([]string); {
	case list:
		return "an array of strings (" + example + ")"
	case strings.HasPrefix(c.typ, "duration"):
		return "a duration, as a string (" + example + ")"
	case example == `""`:
		return "a string"
	}
	return "a string (" + example + ")"
}

// incompatible finds the key of a value of the wrong type in the toml
// package's error, which gives it in no other way.
var incompatible = regexp.MustCompile(`\(last key "([^"]+)"\): incompatible types`)

// tomlType words a TOML type as the toml package names it (md.Type).
func tomlType(t string) string {
	switch t {
	case "Integer":
		return "an integer"
	case "Float":
		return "a float"
	case "String":
		return "a string"
	case "Bool":
		return "a boolean"
	case "Datetime":
		return "a date-time"
	case "Array":
		return "an array of something else"
	case "Hash":
		return "a table"
	case "ArrayHash":
		return "an array of tables"
	}
	return "a TOML " + t
}

func (c *cell[T]) fingerprint() string {
	v := c.String()
	if c.typ == "path" && v != "" {
		content, err := os.ReadFile(v)
		if err != nil {
			return v + "\x00" + err.Error()
		}
		return v + "\x00" + string(content)
	}
	return v
}

func parseText(s string) (string, error) { return s, nil }
func showText(s string) string           { return s }

// errParse and errRange are the flag package's own words for a bad number.
var (
	errParse = errors.New("parse error")
	errRange = errors.New("value out of range")
)

func numError(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return errRange
	}
	return errParse
}

// filename is a string key that names a file: a reload compares the file's
// content as well as its name.
func filename(def string, set func(*settings, string)) func() value {
	return newCell("path", def, parseText, showText, func(s *settings, v string) error {
		set(s, v)
		return nil
	})
}

// permissions is a file mode in octal, as chmod takes it: the owner's,
// the group's and everyone else's bits (700, 0660), nothing more.
func permissions(def string, set func(*settings, fs.FileMode)) func() value {
	return newCell("octal", def, parseText, showText, func(s *settings, v string) error {
		mode, err := strconv.ParseUint(v, 8, 32)
		if err != nil || mode > 0o777 {
			return fmt.Errorf("%q is not permissions in octal (e.g. 700, or 770 for the socket's group too)", v)
		}
		set(s, fs.FileMode(mode))
		return nil
	})
}

// text is a string key that takes any value.
func text(def string, set func(*settings, string)) func() value {
	return newCell("string", def, parseText, showText, func(s *settings, v string) error {
		set(s, v)
		return nil
	})
}

// choice is a string key that takes one of values.
func choice(def string, values []string, set func(*settings, string)) func() value {
	names := orList(values)
	return newCell("string: "+names, def, parseText, showText, func(s *settings, v string) error {
		if !slices.Contains(values, v) {
			return fmt.Errorf("%q is not %s", v, names)
		}
		set(s, v)
		return nil
	})
}

// level is a log level. slog's other spellings (INFO, warn+2) are taken
// too, as they always were.
func level(def string, set func(*settings, slog.Level)) func() value {
	const names = "debug, info, warn or error"
	return newCell("string: "+names, def, parseText, showText, func(s *settings, v string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%q is not %s", v, names)
		}
		set(s, l)
		return nil
	})
}

func boolean(def bool, set func(*settings, bool)) func() value {
	parse := func(s string) (bool, error) {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return false, errParse
		}
		return v, nil
	}
	return newCell("bool", def, parse, strconv.FormatBool, func(s *settings, v bool) error {
		set(s, v)
		return nil
	})
}

// integer is an int key that takes lo to hi, both included.
func integer(def, lo, hi int, set func(*settings, int)) func() value {
	typ := fmt.Sprintf("int in [%d, %d]", lo, hi)
	if hi == math.MaxInt {
		typ = fmt.Sprintf("int >= %d", lo)
	}
	parse := func(s string) (int, error) {
		v, err := strconv.ParseInt(s, 0, strconv.IntSize)
		if err != nil {
			return 0, numError(err)
		}
		return int(v), nil
	}
	return newCell(typ, def, parse, strconv.Itoa, func(s *settings, v int) error {
		switch {
		case v < lo:
			return fmt.Errorf("%d is below %d", v, lo)
		case v > hi:
			return fmt.Errorf("%d is above %d", v, hi)
		}
		set(s, v)
		return nil
	})
}

// ratio is a float key that takes what is between low and high, neither
// included.
func ratio(def, low, high float64, set func(*settings, float64)) func() value {
	parse := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, numError(err)
		}
		return v, nil
	}
	show := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return newCell(fmt.Sprintf("float in (%g, %g)", low, high), def, parse, show, func(s *settings, v float64) error {
		if !(v > low && v < high) { // NaN too
			return fmt.Errorf("%g is outside (%g, %g)", v, low, high)
		}
		set(s, v)
		return nil
	})
}

// duration is a positive duration. TOML has none, so it is a string, as
// the flag is; an integer is refused rather than read as nanoseconds.
func duration(def string, set func(*settings, time.Duration)) func() value {
	return newCell("duration > 0", def, parseText, showText, func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration (e.g. 50ms, 60s)", v)
		}
		set(s, d)
		return nil
	})
}

// durationOrNever is a duration of 0s or more; 0s means never.
func durationOrNever(def string, set func(*settings, time.Duration)) func() value {
	return newCell("duration >= 0", def, parseText, showText, func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration of 0s or more (e.g. 0s for never, 300s)", v)
		}
		set(s, d)
		return nil
	})
}

// address is a host:port to listen on, or empty for none. It is checked
// here, before anything starts: net.Listen would refuse port 99999 only
// after the backends were dialled, and in its own words.
func address(def string, set func(*settings, string)) func() value {
	return newCell("host:port", def, parseText, showText, func(s *settings, v string) error {
		if v == "" {
			set(s, v)
			return nil
		}
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:7379, or :7379 for every interface)", v)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("port %s is out of range in %q: a port is a number from 1 to 65535 (0 picks a free one)", port, v)
		}
		set(s, v)
		return nil
	})
}

// list is a list of strings, empty by default: an array in TOML, a
// comma-separated list as a flag. example is what the array looks like in
// TOML, for a file that gives something else; check, if not nil, is the
// list's own.
func list(example string, check func([]string) error, set func(*settings, []string)) func() value {
	parse := func(s string) ([]string, error) {
		var l []string
		for v := range strings.SplitSeq(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				l = append(l, v)
			}
		}
		return l, nil
	}
	show := func(l []string) string { return strings.Join(l, ",") }
	c := newCell("list", nil, parse, show, func(s *settings, v []string) error {
		if check != nil {
			if err := check(v); err != nil {
				return err
			}
		}
		set(s, v)
		return nil
	})
	return func() value {
		v := c().(*cell[[]string])
		v.example = example
		return v
	}
}

// checkClusterNodes checks that each cluster node is a host and a port, as
// clients will dial it.
func checkClusterNodes(nodes []string) error {
	for i, n := range nodes {
		host, port, err := net.SplitHostPort(n)
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
			return fmt.Errorf("entry %d (%q) is not host:port with a port from 1 to 65535, as clients reach that lockproxy", i+1, n)
		}
		if slices.Index(nodes, n) < i {
			return fmt.Errorf("entry %d (%s) is named twice", i+1, n)
		}
	}
	return nil
}

// checkBackends reads each backend URL as lockproxy uses it, and says what
// is wrong in plain words with what to write instead, where go-redis's
// parser would answer in its own terms ("first path segment in URL cannot
// contain colon", "unexpected option"). An entry is named by its position
// and its host, never by the whole URL, which may hold a password.
func checkBackends(urls []string) error {
	for i, raw := range urls {
		if err := checkBackend(raw); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i+1, backendName(raw), err)
		}
	}
	return nil
}

// backendQueryOptions are the options of a backend URL that lockproxy
// uses; go-redis takes more (pool_size, read_timeout...), which lockproxy
// would silently ignore, since it makes its own connections.
var backendQueryOptions = []string{"db", "skip_verify"}

func checkBackend(raw string) error {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return fmt.Errorf("no scheme: write redis://%s (rediss:// for TLS)", safeHost(hostPart(raw)))
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
	case "unix":
		return nil // a socket path: go-redis's parser words its few mistakes well
	default:
		return fmt.Errorf("%s:// is not a Redis scheme: write redis://%s (rediss:// for TLS, unix:// for a socket)", scheme, safeHost(hostPart(rest)))
	}
	if h := hostPart(rest); h != "" {
		if _, port, err := net.SplitHostPort(h); err == nil {
			switch n, err := strconv.Atoi(port); {
			case err != nil: // not echoed: perhaps a password in the wrong place
				return fmt.Errorf("the port is not a number; a password goes before the host: %s://:PASSWORD@host:6379", scheme)
			case n < 1 || n > 65535:
				return fmt.Errorf("port %d is out of range: a port is 1 to 65535 (Redis's own is 6379)", n)
			}
		} else if !strings.Contains(err.Error(), "missing port") {
			return fmt.Errorf("more than host:port after the host; a password goes before it: %s://:PASSWORD@host:6379", scheme)
		}
	}
	// url's own errors quote the text they stumbled on, which may be a
	// password: they are not passed on.
	escapes := fmt.Sprintf(`write %s://[user:password@]host:port[/db], with a password's "/", "?", "#", "@" and "%%" as %%2F, %%3F, %%23, %%40 and %%25`, scheme)
	u, err := url.Parse(raw)
	if err != nil || strings.Contains(raw, "@") && u.Host != hostPart(rest) {
		return errors.New("not a URL as written: " + escapes)
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return errors.New(`a "#" ends the URL there: write it %23 (in a password, say)`)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); !ok {
			return fmt.Errorf("a user name but no password: a password alone is written %s://:PASSWORD@host:port (with the colon)", scheme)
		}
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 0 {
			return fmt.Errorf("database %q is not a number: end the URL with /0, /1... or leave the database out (0)", p)
		}
	}
	for name := range u.Query() {
		switch {
		case slices.Contains(backendQueryOptions, name):
		case name == "password" || name == "user" || name == "username":
			return fmt.Errorf("option %s: the user and password go before the host: %s://USER:PASSWORD@host:port, or %s://:PASSWORD@host:port", name, scheme, scheme)
		default:
			return fmt.Errorf("option %q is not used: a backend URL takes %s; the timeout is backend_timeout", name, orList(backendQueryOptions))
		}
	}
	return nil
}

// hostPart is the host:port of the rest of a URL after its scheme: what
// follows the last "@", up to the path, query or fragment. The last "@":
// a password's own "/", "?" or "#" left unescaped must not make it part
// of the host.
func hostPart(rest string) string {
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// backendName names a backend URL in an error by its host and port,
// which hold no secret.
func backendName(raw string) string {
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		raw = rest
	}
	return safeHost(hostPart(raw))
}

// safeHost is h when it is a host or host:port with a numeric port, and
// its host alone otherwise: what follows a second ":" may be a password
// put in the wrong place.
func safeHost(h string) string {
	host, port, err := net.SplitHostPort(h)
	switch {
	case err == nil && strings.Trim(port, "0123456789") == "":
		return h
	case err == nil:
		return host
	case strings.Contains(err.Error(), "missing port"):
		return h
	}
	host, _, _ = strings.Cut(h, ":")
	return host
}

// group is one [[groups]] table.
type group struct {
	Backends []string `toml:"backends"`
}

// groupsValue is [[groups]]: an array of tables in TOML, and a flag given
// once per group, its backends comma-separated, whose groups replace the
// file's.
type groupsValue struct {
	file  []group
	flags []string
	set   func(*settings, [][]string)
}

// groups is the [[groups]] key, empty by default.
func groups(set func(*settings, [][]string)) func() value {
	return func() value { return &groupsValue{set: set} }
}

func (g *groupsValue) String() string {
	if g == nil {
		return ""
	}
	return strings.Join(g.flags, " ")
}

func (g *groupsValue) Set(spec string) error {
	g.flags = append(g.flags, spec)
	return nil
}

func (g *groupsValue) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &g.file)
}

// apply checks each group's backends as backends are checked, and that no
// backend is in two groups: a backend keeps one set record.
func (g *groupsValue) apply(s *settings) error {
	var out [][]string
	for _, gr := range g.file {
		out = append(out, gr.Backends)
	}
	if g.flags != nil {
		out = nil
		for _, spec := range g.flags {
			var urls []string
			for u := range strings.SplitSeq(spec, ",") {
				if u = strings.TrimSpace(u); u != "" {
					urls = append(urls, u)
				}
			}
			out = append(out, urls)
		}
	}
	seen := map[string]int{}
	for i, urls := range out {
		if len(urls) == 0 {
			return fmt.Errorf("group %d: no backends", i+1)
		}
		if err := checkBackends(urls); err != nil {
			return fmt.Errorf("group %d: %w", i+1, err)
		}
		for _, u := range urls {
			name := backendName(u)
			if j, ok := seen[name]; ok {
				return fmt.Errorf("group %d: backend %s is in group %d too: a backend serves one group", i+1, name, j+1)
			}
			seen[name] = i
		}
	}
	g.set(s, out)
	return nil
}

func (g *groupsValue) kind() string { return "group (repeated)" }

func (g *groupsValue) want() string {
	return "an array of tables ([[groups]] with backends)"
}

func (g *groupsValue) fingerprint() string { return fmt.Sprintf("%q %q", g.file, g.flags) }

// user is one [[users]] table.
type user struct {
	Name           string `toml:"name"`
	PasswordSHA256 string `toml:"password_sha256"`
	PasswordBcrypt string `toml:"password_bcrypt"`
	KeyPrefix      string `toml:"key_prefix"`
	// Session has no flag form: a flag's prefix runs to the end.
	Session bool `toml:"session"`
}

// usersValue is [[users]], the one table-valued key: an array of tables in
// TOML, and a flag given once per user, whose users replace the file's.
type usersValue struct {
	file  []user
	flags []string // as given; read by apply, so a bad one is named by its entry
	set   func(*settings, []user)
}

// users is the [[users]] key, empty by default.
func users(set func(*settings, []user)) func() value {
	return func() value { return &usersValue{set: set} }
}

func (u *usersValue) String() string {
	if u == nil {
		return ""
	}
	return strings.Join(u.flags, " ")
}

// Set refuses a newline, which is a pasting mistake more likely than part
// of a key prefix.
func (u *usersValue) Set(spec string) error {
	if strings.Contains(spec, "\n") {
		return errors.New("a newline in the value")
	}
	u.flags = append(u.flags, spec)
	return nil
}

func (u *usersValue) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &u.file)
}

func (u *usersValue) apply(s *settings) error {
	users := u.file
	if u.flags != nil {
		users = nil
		for i, spec := range u.flags {
			v, err := parseUser(spec)
			if err != nil {
				return fmt.Errorf("entry %d: %w", i+1, err)
			}
			users = append(users, v)
		}
	}
	u.set(s, users)
	return nil
}

func (u *usersValue) kind() string { return "user (repeated)" }

func (u *usersValue) want() string {
	return "an array of tables ([[users]] with name and password_sha256 or password_bcrypt)"
}

func (u *usersValue) fingerprint() string { return fmt.Sprintf("%#v %q", u.file, u.flags) }

// parseUser reads the flag form of a user: name:sha256:HEX[:prefix] or
// name:bcrypt:HASH[:prefix]. The prefix is the rest, colons included.
// Errors name no part of the hash.
func parseUser(spec string) (user, error) {
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) < 3 {
		return user{}, errors.New("not name:sha256:HEX[:key-prefix] or name:bcrypt:HASH[:key-prefix]")
	}
	u := user{Name: parts[0]}
	if len(parts) == 4 {
		u.KeyPrefix = parts[3]
	}
	switch parts[1] {
	case "sha256":
		u.PasswordSHA256 = parts[2]
	case "bcrypt":
		u.PasswordBcrypt = parts[2]
	default:
		// Not quoted: a hash or a password put in its place would be.
		return user{}, fmt.Errorf("user %q: the hash kind (second field) is not sha256 or bcrypt", u.Name)
	}
	return u, nil
}

// orList writes values as "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// errNoBackends refuses an empty backend list that was given: a file or
// flag meant for real backends that names none is a mistake (a copied
// config.example.toml, -backends "$UNSET"), and falling back to in-memory
// backends would serve locks that no other proxy shares and that die with
// this process.
var errNoBackends = errors.New("backends: empty: list the Redis masters (redis://host:port,...); run lockproxy with no configuration at all to try it on embedded in-memory backends")

// resolve checks what takes several keys, and builds what several keys make.
func (s *settings) resolve() (*config, error) {
	switch {
	case s.listen == "" && s.tlsListen == "" && s.unixSocket == "":
		return nil, errors.New("listen: empty, and so are tls_listen and unix_socket: nothing to serve on")
	case s.pprof && s.metrics == "":
		return nil, errors.New("pprof: needs a metrics address to serve on")
	case s.proxy.Sessions.Lease > s.quorum.MaxTTL:
		return nil, fmt.Errorf("session_lease: %v is above max_ttl (%v): a session lock's lease is a TTL", s.proxy.Sessions.Lease, s.quorum.MaxTTL)
	case s.proxy.Sessions.Lease == 0:
		s.proxy.Sessions.Lease = min(defaultSessionLease, s.quorum.MaxTTL)
	}
	if err := s.readSecrets(); err != nil {
		return nil, err
	}
	if err := proxy.CheckUsers(s.proxy.Password, s.proxy.Users); err != nil {
		return nil, err // names the key: users
	}
	if err := s.resolveCluster(); err != nil {
		return nil, err
	}
	var err error
	if s.tls, err = s.serverTLS(); err != nil {
		return nil, err
	}
	if s.quorum.TLSConfig, err = s.backendTLS(); err != nil {
		return nil, err
	}
	switch {
	case len(s.groups) > 0 && len(s.quorum.Backends) > 0:
		return nil, errors.New("backends, groups: both set: with shard groups, list each group's backends in its [[groups]] entry")
	case len(s.quorum.Backends) > 0, len(s.groups) > 0:
	case s.configured:
		return nil, errNoBackends
	default:
		s.embedded = true
	}
	return &s.config, nil
}

// resolveCluster names this instance among cluster_nodes: cluster_announce,
// or else listen when it names a host.
func (s *settings) resolveCluster() error {
	c := &s.proxy.Cluster
	switch {
	case len(c.Nodes) == 0 && c.Announce != "":
		return errors.New("cluster_announce: set, but cluster_nodes is empty: list every lockproxy instance there")
	case len(c.Nodes) == 0:
		return nil
	case c.Announce == "":
		host, _, _ := net.SplitHostPort(s.listen)
		if host == "" || net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("cluster_announce: empty, and listen (%q) names no host clients can reach: set it to this instance's entry of cluster_nodes", s.listen)
		}
		c.Announce = s.listen
	}
	if !slices.Contains(c.Nodes, c.Announce) {
		return fmt.Errorf("cluster_announce: %s is not among cluster_nodes (%s): list this instance there, as clients reach it", c.Announce, strings.Join(c.Nodes, ","))
	}
	return nil
}

// readSecrets reads password_file and users_file, which keep secrets off
// command lines and out of the configuration file (a Kubernetes secret
// mounted as a file, say). Errors name the key and the file, never a line's
// content.
func (s *settings) readSecrets() error {
	if s.passwordFile != "" {
		if s.proxy.Password != "" {
			return errors.New("password, password_file: both set; set one")
		}
		b, err := os.ReadFile(s.passwordFile)
		if err != nil {
			return fmt.Errorf("password_file: %w", err)
		}
		// What echo and editors add is not part of the password.
		pass := strings.TrimRight(string(b), "\r\n")
		switch {
		case pass == "":
			// Not "no password": an empty file is a mistake, and taking it
			// for no password would open the proxy to everyone.
			return fmt.Errorf("password_file: %s is empty", s.passwordFile)
		case strings.ContainsAny(pass, "\r\n"):
			return fmt.Errorf("password_file: %s has more than one line", s.passwordFile)
		}
		s.proxy.Password = pass
	}
	if s.usersFile != "" {
		b, err := os.ReadFile(s.usersFile)
		if err != nil {
			return fmt.Errorf("users_file: %w", err)
		}
		n := 0
		for i, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			u, err := parseUser(line)
			if err != nil {
				return fmt.Errorf("users_file: %s line %d: %w", s.usersFile, i+1, err)
			}
			pu := proxy.User{Name: u.Name, PasswordSHA256: u.PasswordSHA256, PasswordBcrypt: u.PasswordBcrypt, KeyPrefix: u.KeyPrefix}
			// Checked alone here, so that a bad hash is named by its line;
			// the users together (names, prefixes) are checked in resolve.
			if err := proxy.CheckUsers("", []proxy.User{pu}); err != nil {
				if inner := errors.Unwrap(err); inner != nil {
					err = inner // without the "users: entry 1" of a list of one
				}
				return fmt.Errorf("users_file: %s line %d: user %q: %w", s.usersFile, i+1, u.Name, err)
			}
			s.proxy.Users = append(s.proxy.Users, pu)
			n++
		}
		if n == 0 {
			// As for password_file: a file emptied by mistake must not turn
			// authentication off.
			return fmt.Errorf("users_file: no user in %s", s.usersFile)
		}
	}
	return nil
}

// tlsVersions are the values of tls_min_version.
var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// serverTLS loads the TLS listener's certificate and client CAs; nil when
// tls_listen is empty, and then no other tls_ key may be set.
func (s *settings) serverTLS() (*tls.Config, error) {
	if s.tlsListen == "" {
		for _, kv := range [][2]string{{"tls_cert_file", s.tlsCertFile}, {"tls_key_file", s.tlsKeyFile}, {"tls_ca_cert_file", s.tlsCACertFile}} {
			if kv[1] != "" {
				return nil, fmt.Errorf("%s: set, but tls_listen is empty", kv[0])
			}
		}
		return nil, nil
	}
	if s.tlsCertFile == "" || s.tlsKeyFile == "" {
		return nil, errors.New("tls_cert_file, tls_key_file: tls_listen needs both")
	}
	cert, err := tls.LoadX509KeyPair(s.tlsCertFile, s.tlsKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file, tls_key_file: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: s.tlsMinVersion}
	if s.tlsCACertFile != "" {
		if c.ClientCAs, err = loadCAs("tls_ca_cert_file", s.tlsCACertFile); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// backendTLS builds the TLS settings of the rediss:// backends; nil when
// no backend_tls_ key is set (go-redis's defaults then apply).
func (s *settings) backendTLS() (*tls.Config, error) {
	if s.backendCACertFile == "" && s.backendCertFile == "" && s.backendKeyFile == "" && s.backendServerName == "" {
		return nil, nil
	}
	rediss := false
	for _, b := range s.quorum.Backends {
		rediss = rediss || strings.HasPrefix(b, "rediss://")
	}
	if !rediss {
		return nil, errors.New("backend_tls_*: set, but no backend is a rediss:// URL")
	}
	c := &tls.Config{ServerName: s.backendServerName, MinVersion: tls.VersionTLS12}
	var err error
	if s.backendCACertFile != "" {
		if c.RootCAs, err = loadCAs("backend_tls_ca_cert_file", s.backendCACertFile); err != nil {
			return nil, err
		}
	}
	if (s.backendCertFile == "") != (s.backendKeyFile == "") {
		return nil, errors.New("backend_tls_cert_file, backend_tls_key_file: set both or neither")
	}
	if s.backendCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.backendCertFile, s.backendKeyFile)
		if err != nil {
			return nil, fmt.Errorf("backend_tls_cert_file, backend_tls_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func loadCAs(key, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in %s", key, path)
	}
	return pool, nil
}

// newLogger writes to w in format, "text" or "json", as log_format allows,
// at level, which a reload may change.
func newLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		// slog's JSON handler writes a duration as integer nanoseconds,
		// which no reader of a log takes in at a glance; the text
		// handler already writes "1.5ms", and so does this one now.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
