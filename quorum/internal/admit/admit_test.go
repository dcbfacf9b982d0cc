package admit

import (
	"fmt"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	s := NewSet(3, []string{"b:2/0", "a:1/0", "c d:3/0"}, "group 1 of 2, slots 0-8191")
	decided := PendingFor(s, true)
	decided.Decided = 5023
	for _, r := range []Record{{}, Final(s), PendingFor(s, false), PendingFor(s, true), decided} {
		got, err := ParseRecord(r.String())
		if err != nil || got != r {
			t.Errorf("%q read as %+v, %v; want %+v", r.String(), got, err, r)
		}
	}
	if !s.Has("c d:3/0") || s.Has("d:4/0") {
		t.Errorf("members %q", s.Members)
	}
	if fmt.Sprint(NewSet(3, []string{"a:1/0", "b:2/0", "c d:3/0"}, "group 1 of 2, slots 0-8191")) != fmt.Sprint(s) {
		t.Error("the order of the members changed the set")
	}
}

// TestParseEarlierRecords: records of the versions before (six fields,
// or eight with the slots) are final records of their set, whose members
// they do not list.
func TestParseEarlierRecords(t *testing.T) {
	for raw, want := range map[string]Record{
		"2:3:abcd:1000:1:3":            {Present: true, Set: Set{Epoch: 2, N: 3, Fingerprint: "abcd", Slots: "-"}},
		"2:3:abcd:1000:1:3:-:1f2e3d4c": {Present: true, Set: Set{Epoch: 2, N: 3, Fingerprint: "abcd", Slots: "1f2e3d4c"}},
	} {
		if got, err := ParseRecord(raw); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, bad := range []string{"2:3:abcd:1000:1:3:-", "x:3:abcd:-", "2:0:abcd:-", "2:3:abcd:-:adopting:2",
		"2:3:abcd:-:adopting:0:5023:h", "2:3:abcd:-:adopting:1:0:h", "2:3:abcd:-:adopting:1:-5:h", "2:3:abcd:-:adopting:1:5023"} {
		if _, err := ParseRecord(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}

func TestRelate(t *testing.T) {
	ours := NewSet(2, []string{"a", "b", "c"}, "")
	for _, tc := range []struct {
		r    Record
		want Relation
	}{
		{Record{}, Absent},
		{Final(ours), Ours},
		{PendingFor(ours, true), Adopting},
		{Final(NewSet(1, []string{"a", "b", "c"}, "")), Older},
		{PendingFor(NewSet(1, []string{"a", "b"}, ""), false), Older},
		{Final(NewSet(3, []string{"a", "b", "c"}, "")), Other},
		{PendingFor(NewSet(3, []string{"a"}, ""), true), Other},
		{Final(NewSet(2, []string{"a", "b", "d"}, "")), Other},
	} {
		if got := Relate(ours, tc.r); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.r, got, tc.want)
		}
		if got, want := Allows(ours, tc.r), tc.want == Absent || tc.want == Ours || tc.want == Adopting; got != want {
			t.Errorf("%q: allows %v, want %v", tc.r, got, want)
		}
	}
}

func TestClaims(t *testing.T) {
	ours := NewSet(2, []string{"a", "b", "c", "d", "e"}, "")
	mine, none := View{Answered: true, Record: Final(ours)}, View{Answered: true}
	older := View{Answered: true, Record: Final(NewSet(1, []string{"a", "b", "c"}, ""))}
	newer := View{Answered: true, Record: Final(NewSet(3, []string{"a", "b", "c"}, ""))}
	silent := View{}
	quarantined := func(v View) View { v.Quarantined = true; return v }
	for _, tc := range []struct {
		name       string
		views      []View
		superseded bool
		want       string
		still      bool
	}{
		{"an epoch 2 that nobody adopted finds no record", []View{none, none, none, none, none}, false, "[]", false},
		{"one restarted empty", []View{none, mine, mine, mine, silent}, false, "[0]", false},
		{"three restarted empty, all answer", []View{none, none, none, mine, mine}, false, "[0 1 2]", false},
		{"three restarted empty, one silent", []View{none, none, none, mine, silent}, false, "[]", false},
		{"an older record in quarantine", []View{quarantined(older), mine, mine, mine, silent}, false, "[0]", false},
		{"an older record out of quarantine", []View{older, mine, mine, mine, silent}, false, "[]", false},
		{"a newer record answers", []View{none, mine, mine, mine, newer}, false, "[]", true},
		{"a newer record being adopted", []View{none, mine, mine, mine, {Answered: true, Record: PendingFor(NewSet(3, []string{"a"}, ""), false)}}, false, "[]", false},
		{"superseded before", []View{none, mine, mine, mine, mine}, true, "[]", true},
	} {
		got, still := Claims(ours, tc.views, tc.superseded)
		if fmt.Sprint(got) != tc.want || still != tc.still {
			t.Errorf("%s: %v, superseded %v; want %s, %v", tc.name, got, still, tc.want, tc.still)
		}
	}
	first := NewSet(1, []string{"a", "b", "c"}, "")
	if got, _ := Claims(first, []View{none, none, none}, false); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("a first start: %v", got)
	}
	if got, _ := Claims(first, []View{none, none, {}}, false); fmt.Sprint(got) != "[]" {
		t.Errorf("a first start with one silent: %v", got)
	}
}

func TestPlanAdopt(t *testing.T) {
	set := func(epoch int, label string, names ...string) Set { return NewSet(epoch, names, label) }
	member := func(s int, addr string, r Record) Member { return Member{Set: s, Addr: addr, Record: r} }
	old3 := set(1, "", "a", "b", "c")
	old5 := set(1, "", "a", "b", "c", "d", "e")
	for _, tc := range []struct {
		name    string
		sets    []Set
		members []Member
		waits   string // per member: w waits, . counts at once, - nothing written
		err     string
	}{
		{"first adoption", []Set{set(1, "", "a", "b", "c")},
			[]Member{member(0, "a", Record{}), member(0, "b", Record{}), member(0, "c", Record{})}, "...", ""},
		{"grow 3 to 5", []Set{set(2, "", "a", "b", "c", "d", "e")},
			[]Member{member(0, "a", Final(old3)), member(0, "b", Final(old3)), member(0, "c", Final(old3)), member(0, "d", Record{}), member(0, "e", Record{})}, "...ww", ""},
		{"replace one of 3", []Set{set(2, "", "a", "b", "d")},
			[]Member{member(0, "a", Final(old3)), member(0, "b", Final(old3)), member(0, "d", Record{})}, "..w", ""},
		{"replace one of 3 that lost its data set", []Set{set(2, "", "a", "b", "d")},
			[]Member{member(0, "a", Record{}), member(0, "b", Final(old3)), member(0, "d", Record{})}, "w.w", ""},
		{"shrink 5 to 3", []Set{set(2, "", "a", "b", "c")},
			[]Member{member(0, "a", Final(old5)), member(0, "b", Final(old5)), member(0, "c", Final(old5))}, "www", ""},
		{"replace two of 3", []Set{set(2, "", "a", "d", "e")},
			[]Member{member(0, "a", Final(old3)), member(0, "d", Record{}), member(0, "e", Record{})}, "", "the new backends keep 1 of the 3 members of epoch 1's set"},
		{"a newer epoch recorded", []Set{set(2, "", "a", "b", "c")},
			[]Member{member(0, "a", Final(set(3, "", "a", "b", "c"))), member(0, "b", Record{}), member(0, "c", Record{})}, "", "it records epoch 3"},
		{"already adopted", []Set{set(2, "", "a", "b", "c")},
			[]Member{member(0, "a", Final(set(2, "", "a", "b", "c"))), member(0, "b", Final(set(2, "", "a", "b", "c"))), member(0, "c", Final(set(2, "", "a", "b", "c")))}, "---", ""},
		{"resumed", []Set{set(2, "", "a", "b", "d")},
			[]Member{member(0, "a", Final(set(2, "", "a", "b", "d"))), member(0, "b", PendingFor(set(2, "", "a", "b", "d"), false)), member(0, "d", Record{})}, "-.w", ""},
		{"two groups become two others", []Set{set(2, "g1", "a", "b", "c"), set(2, "g2", "d", "e", "f")},
			[]Member{member(0, "a", Final(set(1, "h1", "a", "b", "c"))), member(0, "b", Final(set(1, "h1", "a", "b", "c"))), member(0, "c", Final(set(1, "h1", "a", "b", "c"))),
				member(1, "d", Final(set(1, "h2", "d", "e", "f"))), member(1, "e", Final(set(1, "h2", "d", "e", "f"))), member(1, "f", Final(set(1, "h2", "d", "e", "f")))}, "wwwwww", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := PlanAdopt(tc.sets, tc.members)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for i := range tc.members {
				switch {
				case !plan.Write[i]:
					got.WriteByte('-')
				case plan.Wait[i]:
					got.WriteByte('w')
				default:
					got.WriteByte('.')
				}
			}
			if got.String() != tc.waits {
				t.Errorf("%s, want %s", got.String(), tc.waits)
			}
		})
	}
}

func TestMark(t *testing.T) {
	for _, tc := range []struct {
		before   Marker
		promoted bool
		want     Marker
	}{
		{Marker{}, false, Marker{Present: true, Owner: "me", Until: 1060, Reason: ReasonUnmarked}},
		{Marker{Present: true, Owner: "me", Until: 5, Reason: ReasonRestart}, false, Marker{Present: true, Owner: "me", Until: 5, Reason: ReasonRestart}},
		{Marker{Present: true, Owner: "old", Until: 5}, false, Marker{Present: true, Owner: "me", Until: 1060, Reason: ReasonRestart}},
		{Marker{Present: true, Owner: "old", Until: 5000, Reason: ReasonEpoch}, false, Marker{Present: true, Owner: "me", Until: 5000, Reason: ReasonEpoch}},
		{Marker{Present: true, Owner: "old", Until: 5}, true, Marker{Present: true, Owner: "me", Until: 1090, Reason: ReasonFailover}},
	} {
		if got := Mark(tc.before, "me", 1000, 60, 90, tc.promoted); got != tc.want {
			t.Errorf("%+v (promoted %v): %+v, want %+v", tc.before, tc.promoted, got, tc.want)
		}
		if got := ParseMarker(tc.want.String()); got != tc.want {
			t.Errorf("%q read as %+v", tc.want.String(), got)
		}
	}
	if got := Wait(Marker{Present: true, Owner: "me", Until: 1100, Reason: ReasonRestart}, 1000, 60); got.Until != 1100 || got.Reason != ReasonRestart {
		t.Errorf("a shorter wait moved the marker: %+v", got)
	}
	if got := Wait(Marker{Present: true, Owner: "me", Until: 1010, Reason: ReasonRestart}, 1000, 60); got.Until != 1060 || got.Reason != ReasonEpoch {
		t.Errorf("a longer wait did not: %+v", got)
	}
}
