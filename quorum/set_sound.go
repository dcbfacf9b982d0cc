//go:build !lockproxy_broken_set

package quorum

import "github.com/lockproxy/lockproxy/quorum/internal/admit"

// brokenRelation is where set_broken.go breaks the set check in a test
// build; here it changes nothing.
func brokenRelation(rel admit.Relation) admit.Relation { return rel }

// setToken is what the lock scripts compare each backend's set record
// with (lua/setcheck.lua).
func setToken(s admit.Set) string { return s.Token() }
