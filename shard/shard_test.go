package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// testGroups starts n groups of size real redis-servers each and returns
// the groups and each group's servers.
func testGroups(t *testing.T, n, size int) (*Groups, [][]*redistest.Server) {
	t.Helper()
	servers := redistest.StartN(t, n*size)
	var engines []*quorum.Engine
	var sets [][]*redistest.Server
	for i := range n {
		set := servers[i*size : (i+1)*size]
		var urls []string
		for _, s := range set {
			urls = append(urls, s.URL())
		}
		first, last := Range(i, n)
		e, err := quorum.New(quorum.Config{Backends: urls, NodeTimeout: time.Second, DisableRestartQuarantine: true,
			SetLabel: fmt.Sprintf("slots %d-%d", first, last), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
		sets = append(sets, set)
	}
	g, err := New(engines)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g, sets
}

// TestRange: the groups' ranges cover every slot once, in order, and Of
// agrees with them.
func TestRange(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7, 16384} {
		next := 0
		for i := range n {
			first, last := Range(i, n)
			if first != next || last < first {
				t.Fatalf("%d groups: group %d serves %d-%d after %d", n, i, first, last, next-1)
			}
			next = last + 1
		}
		if next != hashslot.Count {
			t.Fatalf("%d groups end at slot %d", n, next-1)
		}
	}
	g := &Groups{engines: make([]*quorum.Engine, 3)}
	for _, key := range []string{"a", "b", "lock:1", "{x}y", "foo"} {
		i := g.Of(key)
		if first, last := Range(i, 3); hashslot.Of(key) < first || hashslot.Of(key) > last {
			t.Errorf("%s (slot %d) in group %d, which serves %d-%d", key, hashslot.Of(key), i, first, last)
		}
	}
}

// TestGroupsRoute: a lock is taken on its group's backends only; keys of
// one hash tag are taken together, keys of two groups are refused with
// ErrCrossSlot and nothing is taken; a listing pages through every group;
// a release in any group is heard.
func TestGroupsRoute(t *testing.T) {
	g, sets := testGroups(t, 2, 3)
	ctx := t.Context()
	// Two keys of each group.
	var keys [2][]string
	for n := 0; len(keys[0]) < 2 || len(keys[1]) < 2; n++ {
		k := fmt.Sprintf("route:%d", n)
		if i := g.Of(k); len(keys[i]) < 2 {
			keys[i] = append(keys[i], k)
		}
	}
	heard := make(chan string, 8)
	stop := g.Releases("route:*", func(key, _ string) { heard <- key })
	defer stop()

	for i, ks := range keys {
		if _, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: ks[:1], Token: "me", TTL: 10 * time.Second}); err != nil {
			t.Fatalf("acquire %s: %v", ks[0], err)
		}
		for j, set := range sets {
			for _, s := range set {
				n := s.Client(t).Exists(ctx, ks[0]).Val()
				if want := int64(boolInt(i == j)); n != want {
					t.Errorf("%s (group %d) on a backend of group %d: exists %d", ks[0], i, j, n)
				}
			}
		}
	}
	cross := []string{keys[0][1], keys[1][1]}
	if _, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpAcquireAll, Keys: cross, Token: "me", TTL: 10 * time.Second}); !errors.Is(err, hashslot.ErrCrossSlot) {
		t.Errorf("acquire %v across groups: %v, want ErrCrossSlot", cross, err)
	}
	if _, err := g.Read(ctx, quorum.Read{Op: quorum.OpGet, Key: cross[0]}); !errors.Is(err, quorum.ErrNotFound) {
		t.Errorf("%s after the refused acquisition: %v, want not found", cross[0], err)
	}
	tagged := []string{"{route}a", "{route}b"}
	if _, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpAcquireAll, Keys: tagged, Token: "me", TTL: 10 * time.Second}); err != nil {
		t.Errorf("acquire %v, one hash tag: %v", tagged, err)
	}

	var listed []string
	var cursor uint64
	for pages := 0; ; pages++ {
		page, err := g.List(ctx, quorum.List{Cursor: cursor, Count: 1})
		if err != nil || pages > 100 {
			t.Fatalf("listing, page %d: %v", pages, err)
		}
		for _, l := range page.Locks {
			listed = append(listed, l.Key)
		}
		if cursor = page.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(listed)
	want := slices.Sorted(slices.Values([]string{keys[0][0], keys[1][0], tagged[0], tagged[1]}))
	if !slices.Equal(slices.Compact(listed), want) {
		t.Errorf("listed %v, want %v", listed, want)
	}

	for _, ks := range keys {
		if _, err := g.Unlock(ctx, quorum.Unlock{Op: quorum.OpRelease, Keys: ks[:1], Token: "me"}); err != nil {
			t.Fatalf("release %s: %v", ks[0], err)
		}
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case k := <-heard:
			got[k] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("releases heard: %v, want %s and %s", got, keys[0][0], keys[1][0])
		}
	}
}

// TestGroupsIndependent: a group whose majority is down answers NOQUORUM
// for its keys; the other group goes on serving its own.
func TestGroupsIndependent(t *testing.T) {
	g, sets := testGroups(t, 2, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sets[1][0].Kill()
	sets[1][1].Kill()
	for n := range 20 {
		key := fmt.Sprintf("independent:%d", n)
		_, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: []string{key}, Token: "me", TTL: 10 * time.Second})
		switch g.Of(key) {
		case 0:
			if err != nil {
				t.Errorf("%s in the live group: %v", key, err)
			}
		case 1:
			if !errors.Is(err, quorum.ErrNoQuorum) {
				t.Errorf("%s in the group with 2 of 3 down: %v, want NOQUORUM", key, err)
			}
		}
	}
	if g.QuorumAvailable() {
		t.Error("QuorumAvailable with one group's majority down")
	}
	states := g.States()
	if exp, got := 2, len(states); exp != got {
		t.Fatalf("%d group states, want %d", got, exp)
	}
	for i, st := range states {
		first, last := Range(i, 2)
		if st.FirstSlot != first || st.LastSlot != last || st.Quorum != 2 || len(st.Backends) != 3 || st.QuorumAvailable != (i == 0) {
			t.Errorf("group %d: %+v; want slots %d-%d, quorum 2 of 3, available %v", i, st, first, last, i == 0)
		}
	}
	if exp, got := states[0].BackendSet+","+states[1].BackendSet, g.BackendSet(); exp != got {
		t.Errorf("BackendSet %q, want %q", got, exp)
	}
}

// TestGroupsRenew: locks of two groups renewed in one call come back in
// the caller's order, each renewed on its own group's backends or refused.
func TestGroupsRenew(t *testing.T) {
	g, sets := testGroups(t, 2, 3)
	ctx := t.Context()
	var locks []quorum.Held
	var want []error
	for n := 0; len(locks) < 8; n++ {
		key := fmt.Sprintf("renew:%d", n)
		if g.Of(key) != len(locks)%2 {
			continue // the groups in turn
		}
		holder, outcome := "me", error(nil)
		if len(locks) == 5 {
			holder, outcome = "other", quorum.ErrNotHeld
		}
		if _, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: []string{key}, Token: holder, TTL: 5 * time.Second}); err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		locks = append(locks, quorum.Held{Key: key, Token: "me"})
		want = append(want, outcome)
	}
	locks = append(locks, quorum.Held{Key: quorum.ReservedPrefix + "x", Token: "me"})
	want = append(want, quorum.ErrReservedKey)

	got := g.Renew(ctx, quorum.Renewal{Locks: locks, TTL: 30 * time.Second})
	if exp, got := len(locks), len(got); exp != got {
		t.Fatalf("%d outcomes for %d locks", got, exp)
	}
	for i, r := range got {
		if !errors.Is(r.Err, want[i]) || (want[i] == nil) != (r.Err == nil) || (r.Err == nil) != (r.Validity > 0) {
			t.Errorf("%s: %v, validity %s; want %v", locks[i].Key, r.Err, r.Validity, want[i])
		}
		if r.Err != nil {
			continue
		}
		for _, s := range sets[g.Of(locks[i].Key)] {
			if pttl := s.Client(t).PTTL(ctx, locks[i].Key).Val(); pttl <= 20*time.Second {
				t.Errorf("%s in group %d: PTTL %s, want renewed", locks[i].Key, g.Of(locks[i].Key), pttl)
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestGroupsHashLocks: hash locks of two groups are taken, renewed in one
// call and released each in its own group, a release's latch beside its
// lock (Redisson's latch carries the lock's name as its hash tag); a latch
// of another group is refused with ErrCrossSlot, and nothing is released.
func TestGroupsHashLocks(t *testing.T) {
	g, _ := testGroups(t, 2, 3)
	ctx := t.Context()
	var locks []quorum.Held
	for n := 0; len(locks) < 2; n++ {
		key := fmt.Sprintf("hash:%d", n)
		if g.Of(key) != len(locks) {
			continue // one in each group
		}
		if _, err := g.Lock(ctx, quorum.Lock{Op: quorum.OpHashAcquire, Keys: []string{key}, Token: "uuid:1", TTL: 5 * time.Second}); err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		locks = append(locks, quorum.Held{Key: key, Token: "uuid:1"})
	}
	for i, r := range g.Renew(ctx, quorum.Renewal{Locks: locks, TTL: 30 * time.Second, Hash: true}) {
		if r.Err != nil || r.Validity <= 0 {
			t.Errorf("renew %s: %v, validity %s; want renewed", locks[i].Key, r.Err, r.Validity)
		}
	}
	release := func(l quorum.Held, latch string) (quorum.Result, error) {
		return g.Unlock(ctx, quorum.Unlock{Op: quorum.OpHashRelease, Keys: []string{l.Key}, Token: l.Token,
			TTL: 5 * time.Second, Latch: latch, LatchTTL: 5 * time.Second})
	}
	if _, err := release(locks[0], "redisson_unlock_latch:{"+locks[1].Key+"}:1"); !errors.Is(err, hashslot.ErrCrossSlot) {
		t.Errorf("a latch of another group: %v, want ErrCrossSlot", err)
	}
	for _, l := range locks {
		if res, err := release(l, "redisson_unlock_latch:{"+l.Key+"}:1"); err != nil || !res.Released {
			t.Errorf("release %s: %+v, %v; want released", l.Key, res, err)
		}
	}
}
