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
