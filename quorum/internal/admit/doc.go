// Package admit holds the decisions about which backends count toward a
// quorum, as pure functions of what the backends' records say: whether a
// backend's set record names this proxy's set (Relate), which backends a
// proxy may record its set on (Claims), what lockproxy adopt writes when
// the set changes (PlanAdopt), the quarantine marker that a greeting
// writes (Mark), whether a backend's vote counts (Counts), and whether a
// re-seed of a fencing counter may go ahead (Seed).
//
// It knows nothing of connections, time sources or Redis: package quorum
// reads the facts and applies these decisions, and the model checker in
// this package's tests explores every interleaving of small deployments
// with the same functions, so that what is checked is what runs. The Lua
// that carries two of them out on the backends (the marker in
// lua/identity.lua, the set check in lua/setcheck.lua) is compared with
// Mark and Allows against real redis-servers by quorum's tests.
//
// Files: record.go (Set, a backend's set record, and Relate), claim.go
// (View, Claims, Counts, Seed), marker.go (the quarantine marker: Mark),
// adopt.go (PlanAdopt, Blocking), horizon.go (the lease horizon that
// ends a lost member's wait: Witnesses, Settle, Settled).
//
// docs/design/membership.md and docs/design/horizon.md give the argument;
// their safety and liveness are what the model checks.
package admit
