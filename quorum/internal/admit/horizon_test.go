package admit

import "testing"

// TestSettle: the table of docs/design/horizon.md §1.4. A read settles a
// lost member's wait once n-q+1 of the others answer as witnesses, so that
// it meets every quorum the lost member was part of; fewer tell nothing;
// the longest remaining horizon bounds every lease.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		n, q, witnesses int
		// lost is how many members lost at once horizons can still settle:
		// each needs the witnesses among the n-lost intact ones.
		lost int
	}{
		{3, 2, 2, 1},
		{4, 3, 2, 2},
		{5, 3, 3, 2},
		{7, 4, 4, 3},
	} {
		if q := Majority(tc.n); q != tc.q {
			t.Fatalf("n=%d: quorum %d, want %d", tc.n, q, tc.q)
		}
		if got := Witnesses(tc.n, tc.q); got != tc.witnesses {
			t.Errorf("n=%d: %d witnesses needed, want %d", tc.n, got, tc.witnesses)
		}
		answers := func(k int) []int64 {
			r := make([]int64, k)
			for i := range r {
				r[i] = int64(100 * (i%3 + 1)) // 100, 200, 300, 100 ...: none is 0
			}
			return r
		}
		if longest, ok := Settle(tc.n, tc.q, answers(tc.witnesses-1)); ok || longest != 0 {
			t.Errorf("n=%d: %d witnesses settled (%d, %v)", tc.n, tc.witnesses-1, longest, ok)
		}
		if _, ok := Settle(tc.n, tc.q, nil); ok {
			t.Errorf("n=%d: no answer settled", tc.n)
		}
		for k := tc.witnesses; k < tc.n; k++ {
			r := answers(k)
			want := int64(100 * min(k, 3))
			if longest, ok := Settle(tc.n, tc.q, r); !ok || longest != want {
				t.Errorf("n=%d, %d witnesses: (%d, %v), want (%d, true)", tc.n, k, longest, ok, want)
			}
		}
		if _, ok := Settle(tc.n, tc.q, answers(tc.n-tc.lost)); !ok {
			t.Errorf("n=%d: %d lost at once do not settle", tc.n, tc.lost)
		}
		if _, ok := Settle(tc.n, tc.q, answers(tc.n-tc.lost-1)); ok {
			t.Errorf("n=%d: %d lost at once settle", tc.n, tc.lost+1)
		}
	}
	// A witness without a horizon (none left, or none ever) is an answer:
	// it holds no lease.
	if longest, ok := Settle(3, 2, []int64{0, 0}); !ok || longest != 0 {
		t.Errorf("two witnesses without a horizon: (%d, %v), want (0, true)", longest, ok)
	}
	if longest, ok := Settle(5, 3, []int64{0, 86_400_000, 2000}); !ok || longest != 86_400_000 {
		t.Errorf("the longest does not win: (%d, %v)", longest, ok)
	}
}

// TestSettled: a proof lowers only a loss's wait (restart, unmarked,
// failover), only where the marker is still the one its read found, and
// never raises one.
func TestSettled(t *testing.T) {
	wait := func(reason string) Marker {
		return Marker{Present: true, Owner: "me", Until: 5000, Reason: reason}
	}
	rewritten := wait(ReasonRestart)
	rewritten.Until = 4000
	for _, tc := range []struct {
		name    string
		m, read Marker
		end     int64
		want    int64 // the marker's end after; its other fields never change
	}{
		{"restart", wait(ReasonRestart), wait(ReasonRestart), 1200, 1200},
		{"unmarked", wait(ReasonUnmarked), wait(ReasonUnmarked), 1200, 1200},
		{"failover", wait(ReasonFailover), wait(ReasonFailover), 1200, 1200},
		{"an end already past", wait(ReasonRestart), wait(ReasonRestart), 0, 0},
		{"an epoch wait: adopt decides it", wait(ReasonEpoch), wait(ReasonEpoch), 1200, 5000},
		{"an earlier version's marker, reason unknown", wait(""), wait(""), 1200, 5000},
		{"another process's marker (a promoted replica's old master's)", wait(ReasonRestart), Marker{Present: true, Owner: "other", Until: 5000, Reason: ReasonRestart}, 1200, 5000},
		{"the same process marked anew since the read (emptied again)", wait(ReasonUnmarked), wait(ReasonRestart), 1200, 5000},
		{"a marker lowered or written since the read", wait(ReasonRestart), rewritten, 1200, 5000},
		{"a later end", wait(ReasonRestart), wait(ReasonRestart), 7000, 5000},
		{"the same end", wait(ReasonRestart), wait(ReasonRestart), 5000, 5000},
	} {
		got := Settled(tc.m, tc.read, tc.end)
		want := tc.m
		want.Until = tc.want
		if got != want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, want)
		}
	}
	if got := Settled(Marker{}, Marker{}, 0); got != (Marker{}) {
		t.Errorf("no marker: %+v, want none", got)
	}
}
