package quorum

import (
	"fmt"
	"testing"
	"time"
)

// TestMembershipEligibility: which members of a new epoch count while the
// old epoch may still hold locks. Old members count at once when every
// quorum of the new set drawn from them intersects every quorum of the old
// set (growing, replacing one); members new to the set, and every member
// of a shrunk set, count max_ttl (and its drift) after the old epoch lost
// its last quorum, which is known once N_old − Q_old + 1 old members carry
// the new record.
func TestMembershipEligibility(t *testing.T) {
	const maxTTL = 10 * time.Second
	noDrift := func(time.Duration) time.Duration { return 0 }
	t0 := time.Now().Add(-time.Second)
	// The new set is epoch 3; old records replaced epoch 2's.
	old := func(at time.Duration, oldN int) record {
		return record{epoch: 3, previous: 2, previousN: oldN, since: t0.Add(at)}
	}
	fresh := record{epoch: 3, since: t0}
	// Records that replaced epoch 1's: all of them when the operator went
	// from 1 to 3, or a member re-added after sitting out epoch 2.
	skipped := func(at time.Duration) record {
		return record{epoch: 3, previous: 1, previousN: 3, since: t0.Add(at)}
	}
	older := record{epoch: 3, previous: 1, previousN: 3, since: t0}
	type member struct {
		rec record
		// want: -1 never known yet, 0 counts now, else counts at t0+want.
		want time.Duration
	}
	const notYet = -1
	for _, tc := range []struct {
		name    string
		n       int // of the new set
		members []member
	}{
		{"first epoch: every member counts", 3, []member{{fresh, 0}, {fresh, 0}, {fresh, 0}}},
		{"grow 3 to 5: old members now, new ones max_ttl after the second upgrade", 5, []member{
			{old(0, 3), 0}, {old(2*time.Second, 3), 0}, {old(time.Second, 3), 0},
			{fresh, time.Second + maxTTL}, {fresh, time.Second + maxTTL}}},
		{"grow 3 to 5, one old member upgraded: the new ones wait on more", 5, []member{
			{old(0, 3), 0}, {fresh, notYet}, {fresh, notYet}}},
		{"replace one of 3: the two old ones now, the new one later", 3, []member{
			{old(0, 3), 0}, {old(500*time.Millisecond, 3), 0}, {fresh, 500*time.Millisecond + maxTTL}}},
		{"grow 3 to 5, an epoch skipped: the same", 5, []member{
			{skipped(0), 0}, {skipped(2 * time.Second), 0}, {skipped(time.Second), 0},
			{fresh, time.Second + maxTTL}, {fresh, time.Second + maxTTL}}},
		{"replace one of 3 by a member of an older set: it waits as a new one", 3, []member{
			{old(0, 3), 0}, {old(500*time.Millisecond, 3), 0}, {older, 500*time.Millisecond + maxTTL}}},
		{"shrink 5 to 3: nobody before the old epoch's locks are gone", 3, []member{
			{old(0, 5), 2*time.Second + maxTTL}, {old(time.Second, 5), 2*time.Second + maxTTL}, {old(2*time.Second, 5), 2*time.Second + maxTTL}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &membership{set: backendSet{epoch: 3, n: tc.n}, maxTTL: maxTTL, drift: noDrift, quorum: tc.n/2 + 1}
			nodes := make([]*node, len(tc.members))
			// Shrinking: before the third old member carries the new
			// record, when the old epoch stopped is not known yet.
			for i, mb := range tc.members {
				nodes[i] = &node{index: i}
				mb.rec.n = tc.n
				if err := m.admit(nodes[i], mb.rec); err != nil {
					t.Fatal(err)
				}
				if tc.name[:6] == "shrink" && i < 2 {
					if _, known := m.eligibleAt(nodes[i]); known {
						t.Errorf("member %d: eligible time known with %d of 5 old members upgraded", i, i+1)
					}
				}
			}
			for i, mb := range tc.members {
				at, known := m.eligibleAt(nodes[i])
				var got time.Duration
				switch {
				case !known:
					got = notYet
				case !at.IsZero():
					got = at.Sub(t0)
				}
				if got != mb.want {
					t.Errorf("member %d: %s, want %s", i, show(got), show(mb.want))
				}
			}
		})
	}
}

func show(d time.Duration) string {
	switch d {
	case -1:
		return "not known yet"
	case 0:
		return "counts now"
	}
	return fmt.Sprintf("counts at t0+%s", d)
}

// TestLayoutMovedKeysWait: when the shard groups change, a key may move
// from one group to another whose members never saw its lock, so no
// member of a group whose keys moved counts until max_ttl (and its drift)
// after the last group's old epoch took its last lock. A group whose slots
// did not change keeps the set rule; a group new to the deployment waits
// with the moved ones; a first start does not wait; and a group whose
// record a proxy marked settled counts at once.
func TestLayoutMovedKeysWait(t *testing.T) {
	const maxTTL = 10 * time.Second
	noDrift := func(time.Duration) time.Duration { return 0 }
	t0 := time.Now().Add(-time.Second)
	// Epoch 2's records of members that served slotsBefore in epoch 1.
	replaced := func(slotsBefore string, at time.Duration) record {
		return record{epoch: 2, n: 3, previous: 1, previousN: 3, previousSlots: slotsBefore, since: t0.Add(at)}
	}
	fresh := func(epoch int, at time.Duration) record {
		return record{epoch: epoch, n: 3, previousSlots: "-", since: t0.Add(at)}
	}
	settled := func(slots string) record {
		return record{epoch: 2, n: 3, previousSlots: slots, since: t0}
	}
	type group struct {
		slots   string
		records []record
	}
	const notYet = -1
	for _, tc := range []struct {
		name   string
		epoch  int
		groups []group
		want   []time.Duration // per group: notYet, 0 (counts now) or t0+want
	}{
		{"first start: every group counts", 1, []group{
			{"a", []record{fresh(1, 0), fresh(1, 0), fresh(1, 0)}},
			{"b", []record{fresh(1, 0), fresh(1, 0), fresh(1, 0)}},
		}, []time.Duration{0, 0}},
		{"a member replaced in one group: the slots stay, the set rule holds", 2, []group{
			{"a", []record{replaced("a", 0), replaced("a", time.Second), fresh(2, 0)}},
			{"b", []record{replaced("b", 0), replaced("b", time.Second), replaced("b", 2*time.Second)}},
		}, []time.Duration{0, 0}},
		{"2 groups become 3: every group waits on the last old set stopped", 2, []group{
			// a's old set stopped at its second upgrade (t0+1s), b's at t0+4s;
			// c is new, first recorded at t0+2s.
			{"a2", []record{replaced("a1", 0), replaced("a1", time.Second), replaced("a1", 5*time.Second)}},
			{"b2", []record{replaced("b1", 3*time.Second), replaced("b1", 4*time.Second), replaced("b1", 6*time.Second)}},
			{"c2", []record{fresh(2, 2*time.Second), fresh(2, 3*time.Second), fresh(2, 3*time.Second)}},
		}, []time.Duration{4*time.Second + maxTTL, 4*time.Second + maxTTL, 4*time.Second + maxTTL}},
		{"one set becomes 2 groups: its slots were all of them", 2, []group{
			{"a", []record{replaced("-", 0), replaced("-", time.Second), replaced("-", 2*time.Second)}},
			{"b", []record{fresh(2, 0), fresh(2, 500*time.Millisecond), fresh(2, 0)}},
		}, []time.Duration{time.Second + maxTTL, time.Second + maxTTL}},
		{"groups changed, one old set stopped on too few members: not yet", 2, []group{
			{"a2", []record{replaced("a1", 0), replaced("a1", time.Second)}},
			{"b2", []record{replaced("b1", 0)}},
		}, []time.Duration{notYet, notYet}},
		{"groups changed, a group with no record read yet: not yet", 2, []group{
			{"a2", []record{replaced("a1", 0), replaced("a1", time.Second), replaced("a1", time.Second)}},
			{"b2", nil},
		}, []time.Duration{notYet, notYet}},
		{"groups changed and the change marked over: a group counts with another unread", 2, []group{
			{"a2", []record{settled("a2"), replaced("a1", time.Second), replaced("a1", time.Second)}},
			{"b2", nil},
		}, []time.Duration{0, notYet}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layout := NewLayout()
			members := make([]*membership, len(tc.groups))
			firsts := make([]*node, len(tc.groups))
			for i, g := range tc.groups {
				m := &membership{set: backendSet{epoch: tc.epoch, n: 3, slots: g.slots}, maxTTL: maxTTL, drift: noDrift, quorum: 2, layout: layout}
				layout.add(m)
				members[i] = m
				for j, rec := range g.records {
					n := &node{index: j}
					if j == 0 {
						firsts[i] = n
					}
					rec.slots = g.slots
					if err := m.admit(n, rec); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, m := range members {
				if firsts[i] == nil {
					continue
				}
				at, known := m.eligibleAt(firsts[i])
				var got time.Duration
				switch {
				case !known:
					got = notYet
				case !at.IsZero():
					got = at.Sub(t0)
				}
				if got != tc.want[i] {
					t.Errorf("group %d: %s, want %s", i, show(got), show(tc.want[i]))
				}
			}
		})
	}
}

// TestParseRecordSlots: a record keeps the digests of the slots of its set
// and of the one before; one written before slots were recorded served
// all of them.
func TestParseRecordSlots(t *testing.T) {
	now := time.Now()
	r, err := parseRecord("2:3:abcd:1000:1:3:-:1f2e3d4c", now, 1000)
	if err != nil || r.previousSlots != "-" || r.slots != "1f2e3d4c" || r.previous != 1 || r.previousN != 3 {
		t.Fatalf("eight fields: %+v, %v", r, err)
	}
	r, err = parseRecord("2:3:abcd:1000:1:3", now, 1000)
	if err != nil || r.previousSlots != "-" || r.slots != "-" {
		t.Fatalf("six fields: %+v, %v", r, err)
	}
	if _, err := parseRecord("2:3:abcd:1000:1:3:-", now, 1000); err == nil {
		t.Fatal("seven fields parsed")
	}
}

// TestSettleDueOnceAnotherMemberIsSettled: a member's record marked over
// proves the change over, so the group's other members are marked too,
// whichever of them a proxy asked about first.
func TestSettleDueOnceAnotherMemberIsSettled(t *testing.T) {
	noDrift := func(time.Duration) time.Duration { return 0 }
	m := &membership{set: backendSet{epoch: 2, n: 3, slots: "a2"}, maxTTL: time.Second, drift: noDrift, quorum: 2, layout: NewLayout()}
	m.layout.add(m)
	settled, pending := &node{index: 0}, &node{index: 1}
	if err := m.admit(settled, record{epoch: 2, n: 3, previousSlots: "a2", slots: "a2", raw: "2:3::1:0:0:a2:a2"}); err != nil {
		t.Fatal(err)
	}
	// Just upgraded: by the records alone the old set stopped a moment ago.
	if err := m.admit(pending, record{epoch: 2, n: 3, previous: 1, previousN: 3, previousSlots: "a1", slots: "a2", since: time.Now(), raw: "2:3::1:1:3:a1:a2"}); err != nil {
		t.Fatal(err)
	}
	if rec, due := m.settleDue(pending); !due || rec.raw != "2:3::1:1:3:a1:a2" {
		t.Fatalf("the pending member: due %v (%q), want its record marked", due, rec.raw)
	}
	if _, due := m.settleDue(settled); due {
		t.Fatal("the settled member is due again")
	}
}
