package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/proxy"
)

// errNoBackends refuses an empty backend list that was given: a file or
// flag meant for real backends that names none is a mistake (a copied
// config.example.toml, -backends "$UNSET"), and falling back to in-memory
// backends would serve locks that no other proxy shares and that die with
// this process.
var errNoBackends = errors.New("backends: empty: list the Redis masters (redis://host:port,...); run lockproxy with no configuration at all to try it on embedded in-memory backends")

// resolve checks what takes several keys, and builds what several keys make.
func (s *settings) resolve() (*Config, error) {
	switch {
	case s.Listen == "" && s.TLSListen == "" && s.UnixSocket == "":
		return nil, errors.New("listen: empty, and so are tls_listen and unix_socket: nothing to serve on")
	case s.Pprof && s.Metrics == "":
		return nil, errors.New("pprof: needs a metrics address to serve on")
	case s.Proxy.Sessions.Lease > s.Quorum.MaxTTL:
		return nil, fmt.Errorf("session_lease: %v is above max_ttl (%v): a session lock's lease is a TTL", s.Proxy.Sessions.Lease, s.Quorum.MaxTTL)
	case s.Proxy.Sessions.Lease == 0:
		s.Proxy.Sessions.Lease = min(defaultSessionLease, s.Quorum.MaxTTL)
	}
	if err := s.readSecrets(); err != nil {
		return nil, err
	}
	if err := proxy.CheckUsers(s.Proxy.Password, s.Proxy.Users); err != nil {
		return nil, err // names the key: users
	}
	if err := s.resolveCluster(); err != nil {
		return nil, err
	}
	var err error
	if s.TLS, err = s.serverTLS(); err != nil {
		return nil, err
	}
	if s.Quorum.TLSConfig, err = s.backendTLS(); err != nil {
		return nil, err
	}
	switch {
	case len(s.Groups) > 0 && len(s.Quorum.Backends) > 0:
		return nil, errors.New("backends, groups: both set: with shard groups, list each group's backends in its [[groups]] entry")
	case len(s.Quorum.Backends) > 0, len(s.Groups) > 0:
	case s.configured:
		return nil, errNoBackends
	default:
		s.Embedded = true
	}
	return &s.Config, nil
}

// resolveCluster names this instance among cluster_nodes: cluster_announce,
// or else listen when it names a host.
func (s *settings) resolveCluster() error {
	c := &s.Proxy.Cluster
	switch {
	case len(c.Nodes) == 0 && c.Announce != "":
		return errors.New("cluster_announce: set, but cluster_nodes is empty: list every lockproxy instance there")
	case len(c.Nodes) == 0:
		return nil
	case c.Announce == "":
		host, _, _ := net.SplitHostPort(s.Listen)
		if host == "" || net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("cluster_announce: empty, and listen (%q) names no host clients can reach: set it to this instance's entry of cluster_nodes", s.Listen)
		}
		c.Announce = s.Listen
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
		if s.Proxy.Password != "" {
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
		s.Proxy.Password = pass
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
			s.Proxy.Users = append(s.Proxy.Users, pu)
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
	if s.TLSListen == "" {
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
	for _, b := range s.Quorum.Backends {
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
