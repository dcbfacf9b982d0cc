package config

import (
	"fmt"
	"io"
)

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
