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
	s := backendSet{epoch: epoch, n: len(where), fingerprint: hex.EncodeToString(sum[:8])}
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
	raw                 string
}

// parseRecord reads "epoch:N:fingerprint:since:previous:previousN", since
// being by the backend's clock, whose now (ms) was backendNow when the
// proxy's clock read now.
func parseRecord(raw string, now time.Time, backendNow int64) (record, error) {
	f := strings.Split(raw, ":")
	if len(f) != 6 {
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
		previous: int(n[3]), previousN: int(n[4]), raw: raw,
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

	mu      sync.Mutex
	records map[*node]record // of the admitted members, as last read
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
	return nil
}

// eligibleAt is when n's replies may count as far as the change of the
// set goes: the zero time when they may now, or when the old epoch's locks
// are all gone. ok is false when that is not known yet (too few members of
// the old set seen), which means not yet.
func (m *membership) eligibleAt(n *node) (at time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, admitted := m.records[n]
	if !admitted {
		return time.Time{}, true // not a member: its greeting refused it, or did not run
	}
	// The old set: members whose record this epoch replaced, the latest
	// epoch replaced being the old one (an operator may have skipped a
	// number; a member re-added after an absence carries an older one).
	oldEpoch := 0
	for _, rec := range m.records {
		oldEpoch = max(oldEpoch, rec.previous)
	}
	var upgraded []time.Time
	oldN := 0
	for _, rec := range m.records {
		if rec.previous == oldEpoch && oldEpoch > 0 {
			upgraded = append(upgraded, rec.since)
			oldN = max(oldN, rec.previousN)
		}
	}
	if oldN == 0 {
		return time.Time{}, true // no change of set in sight: the first epoch, or long settled
	}
	newMember := r.previous != oldEpoch
	oldQ := oldN/2 + 1
	intersecting := m.quorum+oldQ > oldN
	if !newMember && intersecting {
		return time.Time{}, true
	}
	// The old epoch took its last lock once its proxies were refused on
	// enough of its members for no quorum of it to be left.
	blocking := oldN - oldQ + 1
	if len(upgraded) < blocking {
		return time.Time{}, false
	}
	slices.SortFunc(upgraded, time.Time.Compare)
	blocked := upgraded[blocking-1]
	return blocked.Add(m.maxTTL + m.drift(m.maxTTL)), true
}
