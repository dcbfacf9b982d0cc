package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// fileConfig is lockproxy.toml as written. Durations stay strings here so a
// bad one is reported with its key; config.example.toml documents each key.
type fileConfig struct {
	Listen             string   `toml:"listen"`
	TLSListen          string   `toml:"tls_listen"`
	TLSCertFile        string   `toml:"tls_cert_file"`
	TLSKeyFile         string   `toml:"tls_key_file"`
	TLSCACertFile      string   `toml:"tls_ca_cert_file"`
	TLSMinVersion      string   `toml:"tls_min_version"`
	Backends           []string `toml:"backends"`
	BackendTLSCACert   string   `toml:"backend_tls_ca_cert_file"`
	BackendTLSCert     string   `toml:"backend_tls_cert_file"`
	BackendTLSKey      string   `toml:"backend_tls_key_file"`
	BackendTLSServer   string   `toml:"backend_tls_server_name"`
	Metrics            string   `toml:"metrics"`
	Pprof              bool     `toml:"pprof"`
	BackendTimeout     string   `toml:"backend_timeout"`
	DriftFactor        float64  `toml:"drift_factor"`
	MaxTTL             string   `toml:"max_ttl"`
	RestartQuarantine  bool     `toml:"restart_quarantine"`
	MaxRequestBytes    int      `toml:"max_request_bytes"`
	Password           string   `toml:"password"`
	Users              []user   `toml:"users"`
	MaxClients         int      `toml:"max_clients"`
	IdleTimeout        string   `toml:"idle_timeout"`
	ClientWriteTimeout string   `toml:"client_write_timeout"`
	MaxKeyBytes        int      `toml:"max_key_bytes"`
	MaxTokenBytes      int      `toml:"max_token_bytes"`
	ShutdownTimeout    string   `toml:"shutdown_timeout"`
	LogFormat          string   `toml:"log_format"`
	LogLevel           string   `toml:"log_level"`
}

// user is one [[users]] table.
type user struct {
	Name           string `toml:"name"`
	PasswordSHA256 string `toml:"password_sha256"`
	PasswordBcrypt string `toml:"password_bcrypt"`
	KeyPrefix      string `toml:"key_prefix"`
}

func defaultFileConfig() fileConfig {
	return fileConfig{
		Listen:             "127.0.0.1:7379",
		TLSMinVersion:      "1.2",
		BackendTimeout:     "50ms",
		DriftFactor:        0.01,
		MaxTTL:             "60s",
		RestartQuarantine:  true,
		MaxRequestBytes:    1 << 20,
		MaxClients:         10000,
		IdleTimeout:        "0s",
		ClientWriteTimeout: "10s",
		MaxKeyBytes:        1024,
		MaxTokenBytes:      1024,
		ShutdownTimeout:    "10s",
		LogFormat:          "text",
		LogLevel:           "info",
	}
}

// config is what main wires together.
type config struct {
	listen          string
	tlsListen       string
	tls             *tls.Config // of the TLS listener, when tlsListen is set
	metrics         string
	pprof           bool // serve /debug/pprof/ next to /metrics
	embedded        bool // no backends configured: run on in-memory ones
	shutdownTimeout time.Duration
	logger          *slog.Logger
	quorum          quorum.Config
	proxy           proxy.Config
}

// loadConfig reads the TOML file named by -config, if any, then lets every
// flag that was set override its key. Every error names the key.
func loadConfig(args []string, stderr io.Writer) (*config, error) {
	fc := defaultFileConfig()
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML configuration file (see config.example.toml)")
	fs.String("listen", fc.Listen, "address to serve RESP on")
	fs.String("tls-listen", fc.TLSListen, "address to serve RESP over TLS on; empty: no TLS")
	fs.String("tls-cert-file", fc.TLSCertFile, "PEM certificate (chain) of the TLS listener")
	fs.String("tls-key-file", fc.TLSKeyFile, "PEM private key of the TLS listener")
	fs.String("tls-ca-cert-file", fc.TLSCACertFile, "PEM CAs that sign client certificates; set: clients must present one (mutual TLS)")
	fs.String("tls-min-version", fc.TLSMinVersion, "oldest TLS version accepted: 1.2 or 1.3")
	fs.String("backends", "", "comma-separated backend URLs (redis://host:port, rediss://user:pass@host:port)")
	fs.String("backend-tls-ca-cert-file", fc.BackendTLSCACert, "PEM CAs that sign the rediss:// backends' certificates; empty: the system's")
	fs.String("backend-tls-cert-file", fc.BackendTLSCert, "PEM client certificate for the rediss:// backends (mutual TLS)")
	fs.String("backend-tls-key-file", fc.BackendTLSKey, "PEM private key of backend-tls-cert-file")
	fs.String("backend-tls-server-name", fc.BackendTLSServer, "name the rediss:// backends' certificates must hold; empty: each one's host")
	fs.String("metrics", fc.Metrics, "address for /metrics, /healthz and /readyz; empty disables")
	fs.Bool("pprof", fc.Pprof, "also serve Go's /debug/pprof/ profiles on the metrics address")
	fs.String("backend-timeout", fc.BackendTimeout, "timeout of each backend request")
	fs.Float64("drift-factor", fc.DriftFactor, "clock drift allowance as a share of the TTL")
	fs.String("max-ttl", fc.MaxTTL, "longest lock TTL accepted; also the restart quarantine")
	fs.Bool("restart-quarantine", fc.RestartQuarantine, "ignore a restarted backend for max-ttl (turn off only with appendfsync always)")
	fs.Int("max-request-bytes", fc.MaxRequestBytes, "largest request accepted")
	fs.String("password", fc.Password, "password clients must AUTH with; empty: none")
	fs.Var(new(listFlag), "users", "a user, name:sha256:HEX[:key-prefix] or name:bcrypt:HASH[:key-prefix]; repeat for more")
	fs.Int("max-clients", fc.MaxClients, "most client connections open at once")
	fs.String("idle-timeout", fc.IdleTimeout, "close a client connection that has not sent a whole command for this long (idle, or sending one too slowly); 0s: never")
	fs.String("client-write-timeout", fc.ClientWriteTimeout, "close a client connection that has taken none of its replies for this long (it stopped reading); or idle-timeout, when shorter")
	fs.Int("max-key-bytes", fc.MaxKeyBytes, "longest key accepted")
	fs.Int("max-token-bytes", fc.MaxTokenBytes, "longest lock token accepted")
	fs.String("shutdown-timeout", fc.ShutdownTimeout, "how long commands in flight may finish on SIGTERM")
	fs.String("log-format", fc.LogFormat, "text or json")
	fs.String("log-level", fc.LogLevel, "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *path != "" {
		md, err := toml.DecodeFile(*path, &fc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", *path, err)
		}
		if undecoded := md.Undecoded(); len(undecoded) > 0 {
			return nil, fmt.Errorf("%s: unknown key %q", *path, undecoded[0].String())
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && f.Name != "config" {
			err = fc.set(f.Name, f.Value.String())
		}
	})
	if err != nil {
		return nil, err
	}
	return fc.resolve(stderr)
}

// set applies one flag to the key of the same name.
func (fc *fileConfig) set(name, value string) error {
	key := strings.ReplaceAll(name, "-", "_")
	var err error
	switch key {
	case "listen":
		fc.Listen = value
	case "tls_listen":
		fc.TLSListen = value
	case "tls_cert_file":
		fc.TLSCertFile = value
	case "tls_key_file":
		fc.TLSKeyFile = value
	case "tls_ca_cert_file":
		fc.TLSCACertFile = value
	case "tls_min_version":
		fc.TLSMinVersion = value
	case "backend_tls_ca_cert_file":
		fc.BackendTLSCACert = value
	case "backend_tls_cert_file":
		fc.BackendTLSCert = value
	case "backend_tls_key_file":
		fc.BackendTLSKey = value
	case "backend_tls_server_name":
		fc.BackendTLSServer = value
	case "backends":
		fc.Backends = nil
		for _, b := range strings.Split(value, ",") {
			if b = strings.TrimSpace(b); b != "" {
				fc.Backends = append(fc.Backends, b)
			}
		}
	case "metrics":
		fc.Metrics = value
	case "pprof":
		fc.Pprof = value == "true"
	case "backend_timeout":
		fc.BackendTimeout = value
	case "drift_factor":
		_, err = fmt.Sscan(value, &fc.DriftFactor)
	case "max_ttl":
		fc.MaxTTL = value
	case "restart_quarantine":
		fc.RestartQuarantine = value == "true"
	case "max_request_bytes":
		_, err = fmt.Sscan(value, &fc.MaxRequestBytes)
	case "password":
		fc.Password = value
	case "users":
		fc.Users = nil
		for i, spec := range strings.Split(value, "\n") {
			u, perr := parseUser(spec)
			if perr != nil {
				return fmt.Errorf("users: entry %d: %w", i+1, perr)
			}
			fc.Users = append(fc.Users, u)
		}
	case "max_clients":
		_, err = fmt.Sscan(value, &fc.MaxClients)
	case "idle_timeout":
		fc.IdleTimeout = value
	case "client_write_timeout":
		fc.ClientWriteTimeout = value
	case "max_key_bytes":
		_, err = fmt.Sscan(value, &fc.MaxKeyBytes)
	case "max_token_bytes":
		_, err = fmt.Sscan(value, &fc.MaxTokenBytes)
	case "shutdown_timeout":
		fc.ShutdownTimeout = value
	case "log_format":
		fc.LogFormat = value
	case "log_level":
		fc.LogLevel = value
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// listFlag is a flag that may be repeated; String joins the values with
// newlines, which no value may hold.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, "\n") }

func (l *listFlag) Set(v string) error {
	if strings.Contains(v, "\n") {
		return errors.New("a newline in the value")
	}
	*l = append(*l, v)
	return nil
}

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
		return user{}, fmt.Errorf("user %q: hash kind %q is not sha256 or bcrypt", u.Name, parts[1])
	}
	return u, nil
}

func (fc *fileConfig) resolve(stderr io.Writer) (*config, error) {
	logger, err := newLogger(stderr, fc.LogFormat, fc.LogLevel)
	if err != nil {
		return nil, err
	}
	c := &config{listen: fc.Listen, tlsListen: fc.TLSListen, metrics: fc.Metrics, pprof: fc.Pprof, logger: logger, embedded: len(fc.Backends) == 0}
	var writeTimeout time.Duration
	durations := []struct {
		key   string
		value string
		dst   *time.Duration
	}{
		{"backend_timeout", fc.BackendTimeout, &c.quorum.NodeTimeout},
		{"max_ttl", fc.MaxTTL, &c.quorum.MaxTTL},
		{"shutdown_timeout", fc.ShutdownTimeout, &c.shutdownTimeout},
		{"client_write_timeout", fc.ClientWriteTimeout, &writeTimeout},
	}
	for _, d := range durations {
		v, err := time.ParseDuration(d.value)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive duration (e.g. 50ms, 60s)", d.key, d.value)
		}
		*d.dst = v
	}
	idle, err := time.ParseDuration(fc.IdleTimeout)
	if err != nil || idle < 0 {
		return nil, fmt.Errorf("idle_timeout: %q is not a duration of 0s or more (e.g. 0s for never, 300s)", fc.IdleTimeout)
	}
	switch {
	case fc.Listen == "" && fc.TLSListen == "":
		return nil, errors.New("listen: empty, and so is tls_listen: nothing to serve on")
	case fc.DriftFactor <= 0 || fc.DriftFactor >= 0.5:
		return nil, fmt.Errorf("drift_factor: %g is outside (0, 0.5)", fc.DriftFactor)
	case fc.Pprof && fc.Metrics == "":
		return nil, errors.New("pprof: needs a metrics address to serve on")
	case fc.MaxRequestBytes < 1024:
		return nil, fmt.Errorf("max_request_bytes: %d is below 1024", fc.MaxRequestBytes)
	case fc.MaxClients < 1:
		return nil, fmt.Errorf("max_clients: %d is below 1", fc.MaxClients)
	case fc.MaxKeyBytes < 1:
		return nil, fmt.Errorf("max_key_bytes: %d is below 1", fc.MaxKeyBytes)
	case fc.MaxTokenBytes < 1:
		return nil, fmt.Errorf("max_token_bytes: %d is below 1", fc.MaxTokenBytes)
	}
	users := make([]proxy.User, len(fc.Users))
	for i, u := range fc.Users {
		users[i] = proxy.User{Name: u.Name, PasswordSHA256: u.PasswordSHA256, PasswordBcrypt: u.PasswordBcrypt, KeyPrefix: u.KeyPrefix}
	}
	if err := proxy.CheckUsers(fc.Password, users); err != nil {
		return nil, err // names the key: users
	}
	if n := len(fc.Backends); n > 0 && n%2 == 0 {
		logger.Warn("an even number of backends tolerates no more failures than one fewer would; use an odd number",
			"backends", n, "quorum", n/2+1)
	}
	if c.tls, err = fc.serverTLS(); err != nil {
		return nil, err
	}
	if c.quorum.TLSConfig, err = fc.backendTLS(); err != nil {
		return nil, err
	}
	if !c.embedded {
		c.quorum.Backends = fc.Backends
	}
	c.quorum.DriftFactor = fc.DriftFactor
	c.quorum.DisableRestartQuarantine = !fc.RestartQuarantine
	c.quorum.Logger = logger
	c.proxy = proxy.Config{
		MaxRequestBytes: fc.MaxRequestBytes,
		Password:        fc.Password,
		Users:           users,
		MaxClients:      fc.MaxClients,
		IdleTimeout:     idle,
		WriteTimeout:    writeTimeout,
		MaxKeyBytes:     fc.MaxKeyBytes,
		MaxTokenBytes:   fc.MaxTokenBytes,
		Logger:          logger,
	}
	return c, nil
}

// tlsVersions are the values of tls_min_version.
var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// serverTLS loads the TLS listener's certificate and client CAs; nil when
// tls_listen is empty, and then no other tls_ key may be set.
func (fc *fileConfig) serverTLS() (*tls.Config, error) {
	minVersion, ok := tlsVersions[fc.TLSMinVersion]
	if !ok {
		return nil, fmt.Errorf("tls_min_version: %q is not 1.2 or 1.3", fc.TLSMinVersion)
	}
	if fc.TLSListen == "" {
		for _, kv := range [][2]string{{"tls_cert_file", fc.TLSCertFile}, {"tls_key_file", fc.TLSKeyFile}, {"tls_ca_cert_file", fc.TLSCACertFile}} {
			if kv[1] != "" {
				return nil, fmt.Errorf("%s: set, but tls_listen is empty", kv[0])
			}
		}
		return nil, nil
	}
	if fc.TLSCertFile == "" || fc.TLSKeyFile == "" {
		return nil, errors.New("tls_cert_file, tls_key_file: tls_listen needs both")
	}
	cert, err := tls.LoadX509KeyPair(fc.TLSCertFile, fc.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file, tls_key_file: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: minVersion}
	if fc.TLSCACertFile != "" {
		if c.ClientCAs, err = loadCAs("tls_ca_cert_file", fc.TLSCACertFile); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// backendTLS builds the TLS settings of the rediss:// backends; nil when
// no backend_tls_ key is set (go-redis's defaults then apply).
func (fc *fileConfig) backendTLS() (*tls.Config, error) {
	if fc.BackendTLSCACert == "" && fc.BackendTLSCert == "" && fc.BackendTLSKey == "" && fc.BackendTLSServer == "" {
		return nil, nil
	}
	rediss := false
	for _, b := range fc.Backends {
		rediss = rediss || strings.HasPrefix(b, "rediss://")
	}
	if !rediss {
		return nil, errors.New("backend_tls_*: set, but no backend is a rediss:// URL")
	}
	c := &tls.Config{ServerName: fc.BackendTLSServer, MinVersion: tls.VersionTLS12}
	var err error
	if fc.BackendTLSCACert != "" {
		if c.RootCAs, err = loadCAs("backend_tls_ca_cert_file", fc.BackendTLSCACert); err != nil {
			return nil, err
		}
	}
	if (fc.BackendTLSCert == "") != (fc.BackendTLSKey == "") {
		return nil, errors.New("backend_tls_cert_file, backend_tls_key_file: set both or neither")
	}
	if fc.BackendTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(fc.BackendTLSCert, fc.BackendTLSKey)
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

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log_level: %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log_format: %q is not text or json", format)
}
