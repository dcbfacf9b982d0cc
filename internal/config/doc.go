// Package config reads lockproxy's configuration: the TOML file named by
// -config, the LOCKPROXY_ environment variables and the flags, in that
// order of precedence, into a Config that main wires together.
//
// One table drives it all: keys.go holds a row per key (its name, what a
// reload does with it, its help, its type and default, where its value
// goes), from which the file, the flags, the environment variables,
// validation, -help, docs/configuration.md and the reload classes follow.
// config.go is Load and Config, and the reading of the file, the
// environment and the flags; values.go the typed values a row names
// (durations, addresses, lists, [[users]], [[groups]]); backends.go the
// checks of backend URLs and cluster nodes; resolve.go the checks and
// values that take several keys (listeners, secrets files, users, TLS);
// warnings.go the warnings of what works but is most likely not meant (one
// backend, an even number...); usage.go -help; reference.go the table of
// docs/configuration.md; log.go the logger that log_format names.
package config
