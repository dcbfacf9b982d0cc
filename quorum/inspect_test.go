package quorum

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// listAll pages through a whole listing with req and returns every lock it
// listed, by key, failing on a key listed twice.
func listAll(t *testing.T, e *Engine, req List) (map[string]HeldLock, []Listing) {
	t.Helper()
	all := map[string]HeldLock{}
	var pages []Listing
	for {
		page, err := e.List(t.Context(), req)
		if err != nil {
			t.Fatalf("List(%+v): %v", req, err)
		}
		pages = append(pages, page)
		for _, h := range page.Locks {
			if _, dup := all[h.Key]; dup {
				t.Fatalf("%q listed twice", h.Key)
			}
			all[h.Key] = h
		}
		if req.Cursor = page.Cursor; req.Cursor == 0 {
			return all, pages
		}
		if len(pages) > 1000 {
			t.Fatal("the listing does not end")
		}
	}
}

// presence is what each backend holds of h's key: its value, "-" when
// absent, "#" when not a string, "?" when not seen.
func presence(h HeldLock) string {
	var out []string
	for _, p := range h.Backends {
		switch {
		case !p.Seen:
			out = append(out, "?")
		case !p.Exists:
			out = append(out, "-")
		case !p.HasValue:
			out = append(out, "#")
		default:
			out = append(out, p.Value)
		}
	}
	return strings.Join(out, ",")
}

func TestList(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	ctx := t.Context()
	for _, k := range []string{"a", "b"} {
		if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{"lock:" + k}, Token: "tok-" + k, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	c.direct[1].Set(ctx, "lock:minority", "m", 20*time.Second)
	c.direct[0].Set(ctx, "lock:split", "x", 20*time.Second)
	c.direct[1].Set(ctx, "lock:split", "x", 20*time.Second)
	c.direct[2].Set(ctx, "lock:split", "y", 20*time.Second)
	for i := range c.direct {
		c.direct[i].Set(ctx, "lock:forever", "f", 0)
	}
	c.direct[2].Set(ctx, "other:z", "z", 20*time.Second)
	for i := range c.direct {
		c.direct[i].HSet(ctx, "lock:hash", "f", "v")
	}

	// Count 1 makes every key its own page, across the three backends.
	all, _ := listAll(t, c.engine, List{Count: 1})
	var keys []string
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if exp, got := "lock:a lock:b lock:forever lock:hash lock:minority lock:split other:z", strings.Join(keys, " "); exp != got {
		t.Fatalf("listed %q, expected %q (the engine's own keys never)", got, exp)
	}
	for _, tc := range []struct {
		key, owner, presence string
		held                 bool
		ttl                  time.Duration // 0: none expected; -1: no expiry
	}{
		{"lock:a", "tok-a", "tok-a,tok-a,tok-a", true, 30 * time.Second},
		{"lock:minority", "", "-,m,-", false, 0},
		{"lock:split", "x", "x,x,y", true, 20 * time.Second},
		{"lock:forever", "f", "f,f,f", true, -1},
		{"lock:hash", "", "#,#,#", false, 0},
	} {
		h := all[tc.key]
		if h.Owner != tc.owner || h.Held != tc.held || h.Undecided {
			t.Errorf("%s: owner %q held %v undecided %v, expected %q %v false", tc.key, h.Owner, h.Held, h.Undecided, tc.owner, tc.held)
		}
		if got := presence(h); got != tc.presence {
			t.Errorf("%s: backends hold %s, expected %s", tc.key, got, tc.presence)
		}
		switch {
		case tc.ttl == -1:
			if !h.NoExpiry || h.Validity != 0 || !h.Backends[0].NoExpiry {
				t.Errorf("%s: expected no expiry, got %+v", tc.key, h)
			}
		case tc.ttl > 0:
			// The quorum-th longest TTL less the drift allowance, as PTTL.
			max := tc.ttl - c.engine.drift(tc.ttl)
			if h.Validity > max || h.Validity < max-5*time.Second {
				t.Errorf("%s: validity %s, expected at most %s, and not much less", tc.key, h.Validity, max)
			}
			pttl, err := c.engine.Read(ctx, Read{Op: OpPTTL, Key: tc.key})
			if err != nil || pttl.TTL > h.Validity {
				t.Errorf("%s: PTTL after the listing %s, %v; the listing's validity %s", tc.key, pttl.TTL, err, h.Validity)
			}
			if p := h.Backends[0]; p.TTL <= h.Validity || p.TTL > tc.ttl || p.Addr != c.engine.nodes[0].addr || p.Err != nil {
				t.Errorf("%s: backend 0 %+v, expected its own TTL, above the validity", tc.key, p)
			}
		default:
			if h.Validity != 0 || h.NoExpiry {
				t.Errorf("%s: expected no validity, got %+v", tc.key, h)
			}
		}
	}
}

func TestListPrefixAndMatch(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	for _, k := range []string{"t1:a", "t1:b", "t1:bb", "t2:a", "t1*:a", "t1"} {
		for _, d := range c.direct {
			d.Set(t.Context(), k, "v", 20*time.Second)
		}
	}
	for _, tc := range []struct {
		prefix, match, exp string
	}{
		{"t1:", "", "t1:a t1:b t1:bb"},
		{"t1:", "b*", "t1:b t1:bb"},
		{"t1:", "?", "t1:a t1:b"},
		// Glob characters in a prefix are only themselves.
		{"t1*:", "", "t1*:a"},
		{"", "t1*", "t1 t1*:a t1:a t1:b t1:bb"},
		{"t3:", "", ""},
	} {
		t.Run(fmt.Sprintf("%s|%s", tc.prefix, tc.match), func(t *testing.T) {
			all, _ := listAll(t, c.engine, List{Prefix: tc.prefix, Match: tc.match, Count: 2})
			var keys []string
			for k := range all {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if got := strings.Join(keys, " "); got != tc.exp {
				t.Errorf("listed %q, expected %q", got, tc.exp)
			}
		})
	}
}

// TestListBackendDown: with backend 0 killed the listing skips it, says
// so, and still lists each key once from the others, with backend 0's
// presence unknown; the owner still holds on the two that answer.
func TestListBackendDown(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, NodeTimeout: 200 * time.Millisecond})
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, err := c.engine.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{k}, Token: "t" + k, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	c.servers[0].Kill()
	all, pages := listAll(t, c.engine, List{Count: 10})
	if len(all) != 3 {
		t.Fatalf("listed %d keys, expected 3", len(all))
	}
	if exp, got := c.engine.nodes[0].addr, pages[0].Skipped; len(got) != 1 || got[0] != exp {
		t.Errorf("skipped %q, expected [%s]", got, exp)
	}
	for k, h := range all {
		if !h.Held || h.Owner != "t"+k || presence(h) != "?,t"+k+",t"+k {
			t.Errorf("%s: held %v by %q on %s", k, h.Held, h.Owner, presence(h))
		}
		if h.Backends[0].Err == nil {
			t.Errorf("%s: backend 0 has no error", k)
		}
	}
}
