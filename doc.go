// Command lockproxy is a Redis-protocol server that turns single-node lock
// commands (SET NX PX, compare-and-delete scripts) into Redlock quorum
// operations across N independent Redis masters.
//
// Where things are: main.go wires the engine, the RESP server, the metrics
// server, logging and signals; config.go is the table of configuration
// keys, from which the TOML file, the flags, the LOCKPROXY_ environment
// variables, validation and -help are read; reload.go applies the
// configuration read again on SIGHUP; embedded.go runs the in-memory
// backends of the no-configuration default; health.go serves /healthz and /readyz; metrics.go exports the
// proxy's and the engine's state to Prometheus. The locks themselves are
// packages quorum (the Redlock engine) and proxy (the RESP front end).
package main
