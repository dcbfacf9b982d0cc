//go:build lockproxy_broken_set

package quorum

import "github.com/lockproxy/lockproxy/quorum/internal/admit"

// A deliberately broken backend set check, built only into the binary of
// the safety run's negative control (go build -tags lockproxy_broken_set),
// never into lockproxy: every backend counts whatever set it records, and
// the lock scripts' set check lets every proxy through, as before the
// records existed. Proxies of two sets then grant one lock twice, and the
// checkers must say so.

// brokenRelation is the relation the engine counts by: Ours, always.
func brokenRelation(admit.Relation) admit.Relation { return admit.Ours }

// setToken is what the lock scripts compare the record with: nothing,
// which every record starts with.
func setToken(admit.Set) string { return "" }
