// Command lockproxy is a Redis-protocol server that turns single-node lock
// commands (SET NX PX, compare-and-delete scripts) into Redlock quorum
// operations across N independent Redis masters.
//
// Where things are: main.go wires the configuration, logging, signals,
// the listeners, the engine, the RESP server and the metrics server;
// reload.go applies the configuration read again on SIGHUP; embedded.go
// runs the in-memory backends of the no-configuration default; adopt.go
// is lockproxy adopt, init.go lockproxy init; version.go the build's version; umask_unix.go and
// umask_other.go the Unix socket's file mode, where the system has a
// umask. The configuration
// (the table of keys, from which the TOML file, the flags, the LOCKPROXY_
// environment variables, validation and -help are read) is package
// internal/config; the pages of the metrics address (/healthz, /readyz,
// the status page, /locks, the Prometheus metrics) are package
// internal/admin. The locks
// themselves are packages quorum (the Redlock engine) and proxy (the RESP
// front end).
package main
