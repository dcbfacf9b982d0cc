// Package quorum implements the Redlock algorithm over N independent Redis
// masters: a lock is held when a majority (N/2+1) of the masters that count
// accepted it and the time spent acquiring it left positive validity.
//
// Callers make four kinds of request (Lock, Unlock, Read, Write), each
// naming an Op, and get a Result or a Reading, or one of the sentinel
// errors and error types of errors.go. Backends and Probe report on the
// masters, and an Observer hears of every vote and every wait.
//
// It knows nothing of the proxy, RESP serving, metrics or configuration
// files, nor of RESP itself: talking to a Redis server (the pipelined
// connection, dialling, the greeting, the wire format, what the network
// says of a failure) is package internal/backend's, which in turn knows
// nothing of locks. From a backend quorum takes facts (a reply, a failure,
// run_id, uptime, the commands it knows); what they count for is decided
// here.
//
// Where things are:
//   - The Redlock rule is in rule.go (the tally of votes: decided, refused
//     or no quorum; validity and drift; the same rule for reads). Whose
//     votes count: admit.go (quarantine after a restart, one vote per
//     redis-server, no vote for a server too old for the scripts),
//     members.go (nor for one whose backend set record names another set,
//     and who records the set where), adopt.go (lockproxy adopt: a change
//     of the set), init.go (lockproxy init: the first record, on fresh
//     backends), clock.go (nor for one whose clock runs at a rate beyond
//     the drift allowance: it samples each backend's TIME for the judge of
//     internal/clockrate), and counting.go (how many count now, and the
//     log line when a quorum is lost or regained); settle.go (a backend
//     that lost its data set waits until the lease horizons of enough
//     others have passed, not max_ttl: docs/design/horizon.md). What those decide is
//     decided by the pure functions of internal/admit, which its model
//     checker explores.
//   - The operations: lock.go (acquisitions and extensions, and the
//     rollback of a failed one), split.go (the one retry of a split
//     acquisition), renew.go (Engine.Renew: many extensions, each its own
//     lock, in one script call per backend per batch), rollbacks.go (a
//     retry waits for the rollbacks of its token), unlock.go, read.go, and
//     write.go (Delete and Expire); hashlock.go (Redisson's RLock:
//     re-entrant hash locks, with their own scripts, rollback and release
//     rule, and their fencing tokens kept in the hash); rwlock.go
//     (Redisson's RReadWriteLock: read and write holds of one hash, no
//     backend holding a writer beside another owner); fence.go (fencing
//     tokens) and seed.go (re-seeding a fencing counter a backend may have
//     lost); inspect.go (List: a page of the listing of held locks). The
//     Lua they run is in lua/, embedded by scripts.go.
//   - topup.go: after a grant or renewal on a bare quorum, one hook
//     (afterGrant) copies the lock onto the backends that lack it
//     (docs/design/topups.md).
//   - Waiting and notices: waits.go (waiting for a held key in line,
//     without spinning, and the marks that have releases publish only
//     where someone waits), watch.go (hearing the N copies of a notice on a
//     pattern as one: releases, relayed messages), messages.go (Relay: a
//     message to every engine on the same backends).
//   - fanout.go sends one command to every backend and collects the votes;
//     node.go is one backend, its connection an internal/backend.Pipe;
//     startlog.go makes the backends' lines at start one per event.
//   - The seam: ops.go (Op, the requests, Engine.Lock, Unlock, Read and
//     Write), engine.go (Config, New, Close), errors.go, and backends.go
//     (State, failure kinds, Backends, Probe, Observer).
//   - Tests' ways in: hooks.go (one struct of hooks, zero in lockproxy),
//     negative_control.go (the build of the end-to-end negative controls,
//     which sets them from the environment); cost.go (builds made for
//     measuring what each feature costs a lock cycle, docs/cost.md).
//
// An Engine keeps no lock state (any number of engines may share the same
// backends); it only remembers which rollbacks it is still running, so that
// a retry with the same token waits for them, and what it measured of each
// backend's clock (one goroutine samples them until Close). It is safe for
// concurrent use.
package quorum
