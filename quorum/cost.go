package quorum

import (
	"fmt"
	"slices"
	"strings"
)

// Builds made for measuring what each feature costs a lock cycle
// (docs/cost.md): the linker sets measureWithout to the features whose
// per-cycle work such a build leaves out, for the benchmark's cost table
// (go run ./test/bench -cost-table):
//
//	go build -ldflags "-X github.com/lockproxy/lockproxy/quorum.measureWithout=notice,horizon"
//
// Such a build gives up what the features keep safe, and logs so at start.
// A release build leaves it empty, and cuts nothing.
var measureWithout string

// costFeatures are the features a measuring build can leave out.
var costFeatures = []string{
	"setcheck", // the backend-set record's check in every lease script
	"stamp",    // the expiry read that makes a rollback exact (and the horizon's: off with it)
	"horizon",  // the lease horizon's read and write
	"notice",   // the release notice for waiters, and the read of its marks
	"topup",    // the top-up bookkeeping of each grant (topup.go)
}

// costOff says which features a build leaves out.
type costOff map[string]bool

var measureOff = parseCostOff(measureWithout)

// parseCostOff reads measureWithout: a comma-separated list of
// costFeatures, or "all". An unknown name is a build mistake.
func parseCostOff(list string) costOff {
	off := costOff{}
	for _, f := range strings.Split(list, ",") {
		switch f = strings.TrimSpace(f); {
		case f == "":
		case f == "all":
			for _, g := range costFeatures {
				off[g] = true
			}
		case slices.Contains(costFeatures, f):
			off[f] = true
		default:
			panic(fmt.Sprintf("quorum: measureWithout names %q, not one of %v", f, costFeatures))
		}
	}
	if off["stamp"] {
		off["horizon"] = true // it records the stamp
	}
	return off
}

// String lists the features left out, "" for none.
func (off costOff) String() string {
	var names []string
	for _, f := range costFeatures {
		if off[f] {
			names = append(names, f)
		}
	}
	return strings.Join(names, ",")
}

// costCut is one edit of the scripts' source that leaves a feature's
// commands out.
type costCut struct {
	feature  string
	old, new string
}

// costCuts are applied in order: the lease read's cuts depend on which of
// its two parts are left.
var costCuts = []costCut{
	{"horizon", `if leaseEnd > horizonAt then`, `if false then`},
	{"stamp", `leaseEnd = redis.call("pexpiretime", `, `leaseEnd = 1 or (`},
	{"setcheck", `if recorded and string.sub(`, `if false and string.sub(`},
	{"notice", `local function notify(key, payload)`, "local function notify(key, payload)\n\tif true then return end"},
	{"notice", `redis.call("mget", KEYS[1], "{lockproxy}:waiting:" .. KEYS[1], "{lockproxy}:listening")`, `{redis.call("get", KEYS[1])}`},
}

// leaseRead is the read that starts every lease script (lua/setcheck.lua),
// and what a build reads in its place, by which of its two parts it keeps.
const leaseRead = `redis.call("mget", "{lockproxy}:set", "{lockproxy}:horizon")`

func leaseReadFor(off costOff) string {
	switch {
	case off["setcheck"] && off["horizon"]:
		return `{false, false}`
	case off["setcheck"]:
		return `{false, redis.call("get", "{lockproxy}:horizon")}`
	case off["horizon"]:
		return `{redis.call("get", "{lockproxy}:set"), false}`
	}
	return leaseRead
}

// cutCosts is src with the features off left out.
func cutCosts(src string, off costOff) string {
	if len(off) == 0 {
		return src
	}
	for _, c := range costCuts {
		if off[c.feature] {
			src = strings.ReplaceAll(src, c.old, c.new)
		}
	}
	return strings.ReplaceAll(src, leaseRead, leaseReadFor(off))
}
