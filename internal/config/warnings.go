package config

import (
	"fmt"
	"net"
)

// Warnings are what the configuration allows but an operator most likely
// did not mean: a set of backends that tolerates no failure, or no more
// than one backend fewer would; a listener anyone on the network may
// use; the restart quarantine turned off. One line each, saying what to
// do; none on the embedded backends, which warn of themselves.
func (c *Config) Warnings() []string {
	if c.Embedded {
		return nil
	}
	var warnings []string
	sets, name := c.Groups, "group %d: "
	if len(sets) == 0 {
		sets, name = [][]string{c.Quorum.Backends}, "backends: "
	}
	for i, backends := range sets {
		prefix := name
		if len(c.Groups) > 0 {
			prefix = fmt.Sprintf(name, i+1)
		}
		switch n := len(backends); {
		case n == 1:
			warnings = append(warnings, prefix+"only one: every lock is on that one Redis and lost with it, with no fault tolerance; list 3 or 5 independent Redis masters")
		case n%2 == 0:
			warnings = append(warnings, fmt.Sprintf("%s%d tolerate no more failures (%d) than %d would, and each lock needs %d votes rather than %d: drop one or add one, for an odd number",
				prefix, n, n-majority(n), n-1, majority(n), majority(n-1)))
		}
	}
	authenticated := c.Proxy.Password != "" || len(c.Proxy.Users) > 0
	for _, l := range []struct {
		key, addr string
		certs     bool // clients present certificates
	}{{"listen", c.Listen, false}, {"tls_listen", c.TLSListen, c.TLS != nil && c.TLS.ClientCAs != nil}} {
		if l.addr == "" || authenticated || l.certs || loopback(l.addr) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s: %s is not a loopback address and clients need no password: anyone who reaches it may take and release every lock; set password (or users), or listen on 127.0.0.1", l.key, l.addr))
	}
	if c.Quorum.DisableRestartQuarantine {
		warnings = append(warnings, "restart_quarantine: off: a backend that restarted without its locks (without appendfsync always) counts toward quorum at once, and a lock it forgot may be granted twice; turn it on unless every backend runs with appendfsync always")
	}
	return warnings
}

// majority is the quorum of n backends.
func majority(n int) int { return n/2 + 1 }

// loopback reports whether addr, a host:port that address took, listens
// on this machine only.
func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
