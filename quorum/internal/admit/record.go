package admit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Set names a backend set: the members that proxies of one configuration
// count, and the epoch of that configuration.
type Set struct {
	Epoch int
	// N is the number of members; Fingerprint a digest of their
	// addresses (and of what the set serves), in any order.
	N           int
	Fingerprint string
	// Slots is a digest of the hash slots the set serves, "-" for all of
	// them: adopt tells a shard group whose slots changed by it.
	Slots string
	// Members lists the members' addresses, sorted, each query-escaped,
	// joined by commas: adopt reads an old set's members from any of them
	// ("" in a record of an earlier version).
	Members string
}

// NewSet names the set of members (each "host:port/db") in epoch, serving
// what label says: the fingerprint is a digest of both; the slots digest
// one of label ("-" with none).
func NewSet(epoch int, members []string, label string) Set {
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	text := strings.Join(sorted, "\n")
	if label != "" { // none keeps the fingerprints that sets without one recorded
		text += "\n" + label
	}
	sum := sha256.Sum256([]byte(text))
	s := Set{Epoch: epoch, N: len(members), Fingerprint: hex.EncodeToString(sum[:8]), Slots: "-"}
	if label != "" {
		digest := sha256.Sum256([]byte(label))
		s.Slots = hex.EncodeToString(digest[:4])
	}
	for i, m := range sorted {
		sorted[i] = url.QueryEscape(m)
	}
	s.Members = strings.Join(sorted, ",")
	return s
}

// Has tells whether the set's members include addr; false when the set
// does not list them.
func (s Set) Has(addr string) bool {
	return s.Members != "" && slices.Contains(strings.Split(s.Members, ","), url.QueryEscape(addr))
}

// Quorum is how many of the set's members must agree.
func (s Set) Quorum() int { return Majority(s.N) }

// Majority is the quorum of n backends, n/2+1: the one place the engine,
// its records and its model compute it.
func Majority(n int) int { return n/2 + 1 }

// Token is what every record of the set starts with, "epoch:N:fingerprint:":
// the lock scripts' set check compares it (lua/setcheck.lua).
func (s Set) Token() string {
	return fmt.Sprintf("%d:%d:%s:", s.Epoch, s.N, s.Fingerprint)
}

// Name is the set as INFO and logs show it, "epoch:N:fingerprint".
func (s Set) Name() string { return strings.TrimSuffix(s.Token(), ":") }

// Record is a backend's set record ({lockproxy}:set): the set whose
// proxies may take locks there. A data set without one has the zero
// Record.
type Record struct {
	Set
	// Present is false for a data set that has no record: a new or emptied
	// server.
	Present bool
	// Pending marks a record that lockproxy adopt's first pass wrote and
	// its second has not finished: the set's proxies do not count it yet.
	// Wait is what adopt decided for the member: it waits for the old
	// epoch's locks to be gone (the epoch wait) once adopt finishes.
	Pending, Wait bool
	// Decided is, on a pending record that waits, the epoch wait (ms)
	// that adopt decided from the old sets' horizons once every member
	// refused the old epoch; 0 before it decided, or where it decided the
	// full wait. A re-run of an adopt cut short writes the same.
	Decided int64
	// Horizon marks a record written by a version that records lease
	// horizons (horizon.go) in every lease script: only such a member's
	// horizon bounds its leases, and a member that earlier versions might
	// still grant on unrecorded is no witness. Earlier versions cannot read
	// a marked record, so they count none of its members.
	Horizon bool
}

// String is the record as stored: "epoch:N:fingerprint:slots", and
// ":adopting:0" or ":adopting:1" after it while Pending (and ":" and the
// wait adopt Decided, where it did), ":h" when it is
// marked for horizons, then a space and the members.
func (r Record) String() string {
	if !r.Present {
		return ""
	}
	s := r.Token() + r.Slots
	if r.Pending {
		s += ":adopting:" + bit(r.Wait)
		if r.Wait && r.Decided > 0 {
			s += ":" + strconv.FormatInt(r.Decided, 10)
		}
	}
	if r.Horizon {
		s += ":h"
	}
	if r.Members != "" {
		s += " " + r.Members
	}
	return s
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Final is the record of set s, as adopt's second pass and claims write it:
// marked for horizons.
func Final(s Set) Record { return Record{Set: s, Present: true, Horizon: true} }

// PendingFor is the record of set s that adopt's first pass writes.
func PendingFor(s Set, wait bool) Record {
	return Record{Set: s, Present: true, Pending: true, Wait: wait, Horizon: true}
}

// ParseRecord reads a stored record; "" is no record. Records written by
// earlier versions ("epoch:N:fingerprint:since:previous:previousN", and
// ":previousSlots:slots" after it) are read as final records of their
// set.
func ParseRecord(raw string) (Record, error) {
	if raw == "" {
		return Record{}, nil
	}
	raw, members, _ := strings.Cut(raw, " ")
	f := strings.Split(raw, ":")
	r := Record{Present: true, Set: Set{Slots: "-", Members: members}}
	if len(f) > 4 && f[len(f)-1] == "h" {
		f, r.Horizon = f[:len(f)-1], true
	}
	switch {
	case len(f) == 4:
		r.Slots = f[3]
	case len(f) == 6 && f[4] == "adopting" && (f[5] == "0" || f[5] == "1"):
		r.Slots, r.Pending, r.Wait = f[3], true, f[5] == "1"
	case len(f) == 7 && f[4] == "adopting" && f[5] == "1" && r.Horizon:
		r.Slots, r.Pending, r.Wait = f[3], true, true
		if d, err := strconv.ParseInt(f[6], 10, 64); err == nil && d > 0 {
			r.Decided = d
		} else {
			return Record{}, fmt.Errorf("admit: malformed set record %q", raw)
		}
	case (len(f) == 6 || len(f) == 8) && numbers(f[3:6]):
		if len(f) == 8 {
			r.Slots = f[7]
		}
	default:
		return Record{}, fmt.Errorf("admit: malformed set record %q", raw)
	}
	var err error
	r.Fingerprint = f[2]
	if r.Epoch, err = strconv.Atoi(f[0]); err != nil || r.Epoch < 0 {
		return Record{}, fmt.Errorf("admit: malformed set record %q", raw)
	}
	if r.N, err = strconv.Atoi(f[1]); err != nil || r.N <= 0 {
		return Record{}, fmt.Errorf("admit: malformed set record %q", raw)
	}
	return r, nil
}

// numbers tells whether every field is an integer: since, previous epoch
// and previous N, in a record of an earlier version.
func numbers(fields []string) bool {
	for _, f := range fields {
		if _, err := strconv.ParseInt(f, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// Relation is how a backend's record stands to a proxy's set.
type Relation uint8

// The relations.
const (
	// Absent: the data set has no record (a new or emptied server).
	Absent Relation = iota
	// Ours: the record names the proxy's set, final.
	Ours
	// Adopting: the record names the proxy's set, written by an adopt
	// that has not finished.
	Adopting
	// Older: the record names an older epoch, which adopt has not yet
	// replaced here.
	Older
	// Other: a newer epoch (this proxy runs an old configuration), or the
	// same epoch with other members (two configurations).
	Other
)

var relationNames = [...]string{"absent", "ours", "adopting", "older", "other"}

func (r Relation) String() string { return relationNames[r] }

// Relate tells how record r stands to set ours.
func Relate(ours Set, r Record) Relation {
	switch {
	case !r.Present:
		return Absent
	case r.Epoch == ours.Epoch && r.N == ours.N && r.Fingerprint == ours.Fingerprint:
		if r.Pending {
			return Adopting
		}
		return Ours
	case r.Epoch < ours.Epoch:
		return Older
	}
	return Other
}

// Allows tells whether the lock scripts' set check lets a proxy of set ours
// take or extend a lock on a backend that records r: where the record
// names the set (adopting or not), or where there is none. It is what
// lua/setcheck.lua does.
func Allows(ours Set, r Record) bool {
	rel := Relate(ours, r)
	return rel == Absent || rel == Ours || rel == Adopting
}
