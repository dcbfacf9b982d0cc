// Package test holds lockproxy's end-to-end tests: they build the real
// binary, start it in front of real redis-server backends, and drive it
// with real clients: go-redis v9 and redis-cli here, and in the
// compatibility suite the lock libraries of seven languages, each run as
// its own program (test/compat/). CONTRIBUTING.md says which phase a test
// runs in and why.
//
// Where things are, by feature:
//   - The harness: harness_test.go (building the binary, starting proxies
//     and clusters, the test phases and TestMain), faultnet_test.go and
//     gate_test.go (a network between the proxy and its backends that
//     delays, blackholes, drops and redirects).
//   - Commands and replies: commands_test.go (every lock command, RESP2 and
//     RESP3, pipelines, redis-cli), badinput_test.go (malformed and hostile
//     input), limits_test.go (clients, idle time, key and request sizes),
//     transactions_test.go (MULTI/EXEC as StackExchange.Redis sends it).
//   - Faults and safety: faults_test.go (backends down, slow and paused,
//     contention, shutdown), safety_test.go with checker_test.go,
//     checker_unit_test.go and history_test.go (the safety run: nemesis,
//     recorded history, a linearizability and mutual-exclusion checker, and
//     its negative controls), failover_test.go (a promoted replica, replica
//     and evicting backends), clock_test.go (a backend whose clock runs
//     fast), rolling_test.go (a rolling restart of the backends),
//     horizon_test.go (a restarted backend waits as long as the leases it
//     may have lost, by the others' lease horizons; the safety run's mixed
//     phase of short and long locks and empty restarts, and its negative
//     control).
//   - Backend membership: epochs_test.go (backend-set records, stray
//     proxies, the change procedure), membership_test.go (two sets at once,
//     growing and replacing under load), config_test.go (empty and duplicate
//     backend lists), init_test.go (lockproxy init on fresh backends).
//   - Fencing: fence_test.go (tokens through clients and lock libraries),
//     fence_postgres_test.go (a late write refused by PostgreSQL).
//   - Waiting and sessions: wait_test.go (blocking acquisitions without
//     spinning), sessionlock_test.go and session_test.go (locks that live
//     with a connection; connection chatter), pyredislock_test.go
//     (python-redis-lock's signal lists, BLPOP), tracking_test.go (client
//     tracking: rueidis, go-redis).
//   - Client libraries: compat_test.go (the contract each client program
//     serves), compat_go_test.go, compat_java_test.go,
//     compat_redisson_test.go, compat_rwlock_test.go (Redisson's
//     RReadWriteLock), redisson_wire_test.go, compat_node_test.go,
//     compat_langs_test.go (Python, Ruby, PHP, Perl from Debian),
//     compat_pyvenv_test.go (PyPI libraries), compat_cli_test.go, and
//     cluster_test.go (cluster-mode clients).
//   - Shard groups and inspection: groups_test.go, inspect_test.go (LOCKS
//     across proxies, bounded listing).
//   - The operator: start_test.go (the embedded default, bad start-ups,
//     -help, make release), rails_test.go (a port in use before any backend
//     is dialled, a misspelt key, the warnings at start), mixed_test.go
//     (0.1.0, built from the git history, and this version side by side:
//     the upgrade notes), drain_test.go (draining on shutdown),
//     reload_test.go (SIGHUP
//     reloads), secrets_test.go (secrets from the environment and files),
//     tls_test.go, unixsocket_test.go, auth_test.go (users and key
//     prefixes), health_test.go (/healthz, /readyz, pprof), metrics_test.go
//     (Prometheus, INFO backends), status_test.go (the status page).
package test
