package quorum

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// One backend set, checked. Every proxy must count the same set of
// backends: two proxies counting different sets can each find a quorum
// in its own, and grant one lock twice. So each backend's data set holds a
// record of the set it is a member of (setKey: the set's epoch, its size N
// and a fingerprint of its members' addresses), written by the greeting
// (lua/identity.lua) where there is none, or where it names an older
// epoch, and checked by every script that takes or extends a lock
// (lua/setcheck.lua). A proxy whose set the record does not name is
// refused there: it fails closed.
//
// Changing the set is raising its epoch with the new members (the key
// backend_set_epoch). The first proxy of the new epoch to reach a member of
// the old set rewrites its record, which from then on refuses the old
// epoch's proxies there, atomically with their requests; once it has done so
// on enough members of the old set (N_old − Q_old + 1) the old epoch can
// take no more locks, and after max_ttl none of its locks is left. Until
// then the members new to the set (whose record this epoch wrote first) do
// not count, so that a quorum of the new set, made of old members only,
// intersects every quorum of the old one. That holds when Q_new + Q_old >
// N_old (growing, or replacing one member); where it does not (shrinking),
// no member counts until then.

// setKey is the record of the backend set in each backend's data set.
const setKey = ReservedPrefix + "set"

// backendSet is the engine's backend set, as the records name it.
type backendSet struct {
	epoch       int
	n           int
	fingerprint string
	// slots is a digest of the hash slots the set serves (its label), "-"
	// for all of them: the records keep it, so that a change of which
	// slots a set serves is seen as one.
	slots string
	// token is what the records of this set start with, "epoch:N:fingerprint:".
	token string
}

// newBackendSet names the set of the data sets at where (host:port/db each)
// in epoch, serving what label says (Config.SetLabel).
func newBackendSet(epoch int, where []string, label string) backendSet {
	sorted := slices.Clone(where)
	slices.Sort(sorted)
	text := strings.Join(sorted, "\n")
	if label != "" { // none keeps the fingerprints that sets without one recorded
		text += "\n" + label
	}
	sum := sha256.Sum256([]byte(text))
	s := backendSet{epoch: epoch, n: len(where), fingerprint: hex.EncodeToString(sum[:8]), slots: "-"}
	if label != "" {
		digest := sha256.Sum256([]byte(label))
		s.slots = hex.EncodeToString(digest[:4])
	}
	s.token = fmt.Sprintf("%d:%d:%s:", s.epoch, s.n, s.fingerprint)
	return s
}

// record is the set record of one backend, as its greeting read it.
type record struct {
	epoch, n    int
	fingerprint string
	// since is when this epoch was recorded there, by the proxy's clock.
	since time.Time
	// previous and previousN are the epoch and size of the set recorded
	// there before; 0 when the record was written fresh.
	previous, previousN int
	// slots and previousSlots are the digests of the slots this set and
	// the one before served (backendSet.slots).
	slots, previousSlots string
	raw                  string
}

// settled tells whether a proxy of this epoch saw its change of set over
// (membership.settle), and marked the record so: no previous set, and the
// slots it serves as those served before.
func (r record) settled() bool {
	return r.previous == 0 && r.previousSlots == r.slots && r.slots != "-" && r.slots != ""
}

// settledRaw is the record with the change of set marked over.
func (r record) settledRaw() string {
	f := strings.Split(r.raw, ":")
	return strings.Join(append(f[:4:4], "0", "0", r.slots, r.slots), ":")
}

// parseRecord reads
// "epoch:N:fingerprint:since:previous:previousN:previousSlots:slots", since
// being by the backend's clock, whose now (ms) was backendNow when the
// proxy's clock read now. A record of the first six fields alone was
// written before slots were recorded, by a set that served all of them.
func parseRecord(raw string, now time.Time, backendNow int64) (record, error) {
	f := strings.Split(raw, ":")
	switch len(f) {
	case 6:
		f = append(f, "-", "-")
	case 8:
	default:
		return record{}, fmt.Errorf("quorum: malformed set record %q", raw)
	}
	var n [5]int64
	for i, j := range []int{0, 1, 3, 4, 5} {
		v, err := strconv.ParseInt(f[j], 10, 64)
		if err != nil {
			return record{}, fmt.Errorf("quorum: malformed set record %q", raw)
		}
		n[i] = v
	}
	return record{
		epoch: int(n[0]), n: int(n[1]), fingerprint: f[2],
		since:    now.Add(-time.Duration(backendNow-n[2]) * time.Millisecond),
		previous: int(n[3]), previousN: int(n[4]),
		previousSlots: f[6], slots: f[7], raw: raw,
	}, nil
}

// SetError marks a backend whose record names another backend set than
// the engine's: an epoch ahead of it (this proxy runs an old
// configuration) or the same epoch with other members (two
// configurations). Its votes do not count.
type SetError struct {
	Recorded string // the record
	Ours     string // the engine's set, "epoch:N:fingerprint"
}

func (e *SetError) Error() string {
	return fmt.Sprintf("the backend records another backend set (%s) than this proxy's (%s): every proxy must run the same backends, and a change raises backend_set_epoch", e.Recorded, e.Ours)
}

// setRefusalPrefix starts the error reply of lua/setcheck.lua.
const setRefusalPrefix = "LOCKPROXY_SET "

// setRefusal reads a script's refusal by the set check, or nil.
func setRefusal(err error, ours backendSet) *SetError {
	if err == nil || !strings.HasPrefix(err.Error(), setRefusalPrefix) {
		return nil
	}
	return &SetError{Recorded: strings.TrimPrefix(err.Error(), setRefusalPrefix), Ours: strings.TrimSuffix(ours.token, ":")}
}

// membership judges which members count during a change of the set.
type membership struct {
	set    backendSet
	maxTTL time.Duration
	drift  func(time.Duration) time.Duration
	quorum int

	// layout, when the set is one of a deployment's shard groups, holds
	// them all: keys move between groups when the groups change.
	layout *Layout

	mu      sync.Mutex
	records map[*node]record // of the admitted members, as last read
	// old is what records say of the set this epoch replaced, derived
	// again at each change of records: every backend's vote asks.
	old oldSet
}

// admit records n's record and returns nil, or a *SetError when the record
// names another set.
func (m *membership) admit(n *node, r record) error {
	if r.epoch != m.set.epoch || r.fingerprint != m.set.fingerprint || r.n != m.set.n {
		return &SetError{Recorded: r.raw, Ours: strings.TrimSuffix(m.set.token, ":")}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[*node]record{}
	}
	m.records[n] = r
	m.old = m.oldSetLocked()
	return nil
}

// eligibleAt is when n's replies may count as far as the change of the
// set goes: the zero time when they may now, or when the old epoch's locks
// are all gone. ok is false when that is not known yet (too few members of
// the old set seen), which means not yet.
func (m *membership) eligibleAt(n *node) (at time.Time, ok bool) {
	m.mu.Lock()
	rec, admitted := m.records[n]
	moved := admitted && m.movedLocked()
	old := m.old
	m.mu.Unlock()
	if !admitted {
		return time.Time{}, true // not a member: its greeting refused it, or did not run
	}
	if m.settled() {
		return time.Time{}, true
	}
	if moved {
		return m.layout.drained(m.maxTTL + m.drift(m.maxTTL))
	}
	if old.n == 0 {
		return time.Time{}, true // no change of set in sight: the first epoch, or long settled
	}
	newMember := rec.previous != old.epoch
	intersecting := m.quorum+old.n/2+1 > old.n
	if !newMember && intersecting {
		return time.Time{}, true
	}
	if !old.blockedKnown {
		return time.Time{}, false
	}
	return old.blocked.Add(m.maxTTL + m.drift(m.maxTTL)), true
}

// settled tells whether a member's record says that a proxy saw the
// change of set over (settle).
func (m *membership) settled() bool {
	if m.layout == nil {
		return false // a plain set is never marked
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rec := range m.records {
		if rec.settled() {
			return true
		}
	}
	return false
}

// settleDue returns n's record to mark settled when the set is a shard
// group whose change of set is over, by the rules of eligibleAt, and the
// record does not say so yet. A group's records keep its change in sight
// until they are rewritten (an epoch's records are only replaced by the
// next epoch), and while a group's keys have moved, its members count
// only when every group's old set can be judged: marking the change over
// keeps a proxy that restarts later, with another group down, from
// waiting on it. A plain set needs no mark: its old members count at once.
func (m *membership) settleDue(n *node) (record, bool) {
	if m.layout == nil {
		return record{}, false
	}
	settled := m.settled()
	m.mu.Lock()
	rec, admitted := m.records[n]
	moved := m.movedLocked()
	old := m.old
	m.mu.Unlock()
	if !admitted || rec.settled() {
		return record{}, false
	}
	if settled {
		return rec, true // another member's record says it is over
	}
	grace := m.maxTTL + m.drift(m.maxTTL)
	var over bool
	if moved {
		at, known := m.layout.drained(grace)
		over = known && time.Now().After(at)
	} else {
		over = old.n > 0 && old.blockedKnown && time.Now().After(old.blocked.Add(grace))
	}
	return rec, over
}

// settle replaces n's record, once the backend marked it settled.
func (m *membership) settle(n *node, rec record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.records[n]; ok && cur.raw == rec.raw {
		rec.previous, rec.previousN, rec.previousSlots = 0, 0, rec.slots
		rec.raw = rec.settledRaw()
		m.records[n] = rec
		m.old = m.oldSetLocked()
	}
}

// oldSet is what the members' records say of the set that this epoch
// replaced.
type oldSet struct {
	epoch, n int // n is 0 when no change of set is in sight
	// blocked is when the old epoch took its last lock: when its proxies
	// were refused on enough of its members for no quorum of it to be
	// left. blockedKnown is false while too few of them carry the new
	// record for that to be known.
	blocked      time.Time
	blockedKnown bool
}

// oldSetLocked reads the old set from the records.
func (m *membership) oldSetLocked() oldSet {
	// The old set: members whose record this epoch replaced, the latest
	// epoch replaced being the old one (an operator may have skipped a
	// number; a member re-added after an absence carries an older one).
	var old oldSet
	for _, rec := range m.records {
		old.epoch = max(old.epoch, rec.previous)
	}
	var upgraded []time.Time
	for _, rec := range m.records {
		if rec.previous == old.epoch && old.epoch > 0 {
			upgraded = append(upgraded, rec.since)
			old.n = max(old.n, rec.previousN)
		}
	}
	if old.n == 0 {
		return old
	}
	blocking := old.n - (old.n/2 + 1) + 1
	if len(upgraded) >= blocking {
		slices.SortFunc(upgraded, time.Time.Compare)
		old.blocked, old.blockedKnown = upgraded[blocking-1], true
	}
	return old
}

// movedLocked tells whether keys that this set serves may have been
// served by another set in the epoch its records replaced: it is one of
// several shard groups, and its members then served other slots (the
// groups changed), or none of them was a member of any set then (a group
// new to the deployment, or a first start in an epoch after 1).
func (m *membership) movedLocked() bool {
	if m.layout == nil {
		return false
	}
	fresh := true
	for _, rec := range m.records {
		if rec.settled() {
			return false
		}
		if rec.previous > 0 {
			fresh = false
			if rec.previousSlots != m.set.slots {
				return true
			}
		}
	}
	return fresh && m.set.epoch > 1
}

// Layout is the shard groups of one deployment, each an engine's
// membership (Config.Layout). When the groups change, a key may move from
// one group to another, whose members never saw the lock held on it: no
// member of a group whose keys moved counts until every lock that any
// group's old epoch granted is gone, which is max_ttl after the last old
// set took its last lock (each one's old set rule), or, for a set whose
// old members are none of the new ones (a group removed, or new
// backends throughout), max_ttl after this epoch was first recorded: the
// procedure stops such old proxies first (README: Shard groups).
type Layout struct {
	mu   sync.Mutex
	sets []*membership
}

// NewLayout returns an empty Layout for the engines of one deployment.
func NewLayout() *Layout { return &Layout{} }

func (l *Layout) add(m *membership) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sets = append(l.sets, m)
}

// drained is when every lock of the old layout is gone, grace (max_ttl
// and its drift) after the last old set stopped; ok is false while that
// is not known: some group's old set has not yet been stopped on enough
// of its members, or some group has no member's record read yet.
func (l *Layout) drained(grace time.Duration) (at time.Time, ok bool) {
	l.mu.Lock()
	sets := slices.Clone(l.sets)
	l.mu.Unlock()
	for _, m := range sets {
		stopped, known := m.oldSetStopped()
		if !known {
			return time.Time{}, false
		}
		if stopped.After(at) {
			at = stopped
		}
	}
	return at.Add(grace), true
}

// oldSetStopped is when this set's old epoch took its last lock, as far
// as its records tell (Layout.drained).
func (m *membership) oldSetStopped() (at time.Time, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.records) == 0 {
		return time.Time{}, false
	}
	for _, rec := range m.records {
		if rec.settled() {
			return time.Time{}, true // a proxy saw it over
		}
	}
	if old := m.old; old.n > 0 {
		return old.blocked, old.blockedKnown
	}
	for _, rec := range m.records {
		if at.IsZero() || rec.since.Before(at) {
			at = rec.since
		}
	}
	return at, true
}
