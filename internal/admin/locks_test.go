package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLocksEndpoint: GET /locks on the ops handler lists what the backends
// hold, owner, validity and each backend's view, page by page; prefix and
// match narrow it; malformed parameters are 400s that name them.
func TestLocksEndpoint(t *testing.T) {
	c := startStatusCluster(t, 3)
	ctx := t.Context()
	if ok, err := c.client.SetNX(ctx, "t1:a", "tok", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	c.servers[1].Client(t).Set(ctx, "t2:b", "stray", 20*time.Second)

	list := func(t *testing.T, query string) locksPage {
		t.Helper()
		code, h, body := c.get(t, "/locks?"+query)
		if code != http.StatusOK || h.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /locks?%s: %d %s %s", query, code, h.Get("Content-Type"), body)
		}
		var page locksPage
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("GET /locks?%s: %v in %s", query, err, body)
		}
		return page
	}
	page := list(t, "count=100")
	if page.NextCursor != "0" || len(page.Locks) != 2 {
		t.Fatalf("one page of two locks expected, got %+v", page)
	}
	byKey := map[string]lockJSON{}
	for _, l := range page.Locks {
		byKey[l.Key] = l
	}
	held, stray := byKey["t1:a"], byKey["t2:b"]
	if held.Owner == nil || *held.Owner != "tok" || held.State != "held" || held.ValidityMS > 30000-302 || held.ValidityMS < 25000 {
		t.Errorf("t1:a: %+v", held)
	}
	for i, b := range held.Backends {
		if b.Addr != c.servers[i].Addr() || b.Value == nil || *b.Value != "tok" || b.PTTLMS == nil || *b.PTTLMS <= held.ValidityMS || b.Error != "" {
			t.Errorf("t1:a on backend %d: %+v", i, b)
		}
	}
	if stray.Owner != nil || stray.State != "not_held" || stray.ValidityMS != -2 {
		t.Errorf("t2:b: %+v", stray)
	}
	var pttls []int64
	for _, b := range stray.Backends {
		pttls = append(pttls, *b.PTTLMS)
	}
	if pttls[0] != -2 || pttls[1] <= 0 || pttls[2] != -2 {
		t.Errorf("t2:b's TTL on each backend: %v, expected absent, held, absent", pttls)
	}

	t.Run("prefix and match", func(t *testing.T) {
		for query, exp := range map[string]string{
			"prefix=t1:":                       "t1:a",
			"prefix=t2:&match=b":               "t2:b",
			"prefix=t2:&match=a":               "",
			"match=" + url.QueryEscape("t?:*"): "t1:a t2:b",
		} {
			var keys []string
			for _, l := range list(t, query).Locks {
				keys = append(keys, l.Key)
			}
			slices.Sort(keys)
			if got := strings.Join(keys, " "); got != exp {
				t.Errorf("%s: listed %q, expected %q", query, got, exp)
			}
		}
	})
	t.Run("pages", func(t *testing.T) {
		var keys []string
		cursor := "0"
		for range 20 {
			page := list(t, "count=1&cursor="+cursor)
			for _, l := range page.Locks {
				keys = append(keys, l.Key)
			}
			if cursor = page.NextCursor; cursor == "0" {
				break
			}
		}
		slices.Sort(keys)
		if exp, got := "t1:a t2:b", strings.Join(keys, " "); cursor != "0" || got != exp {
			t.Errorf("pages of one listed %q (last cursor %s), expected %q once each", got, cursor, exp)
		}
	})
	t.Run("bad parameters", func(t *testing.T) {
		for query, exp := range map[string]string{
			"cursor=x":  `cursor: not a cursor a listing gave: \"x\"`,
			"cursor=-1": "cursor:",
			"count=0":   `count: not a positive integer: \"0\"`,
			"count=ten": "count:",
		} {
			code, _, body := c.get(t, "/locks?"+query)
			if code != http.StatusBadRequest || !strings.Contains(body, exp) {
				t.Errorf("%s: %d %s, expected 400 with %s", query, code, body, exp)
			}
		}
		resp, err := http.Post(c.url+"/locks", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST /locks: %d", resp.StatusCode)
		}
	})
	t.Run("status page sample", func(t *testing.T) {
		s := heldSample(c.page.groups)(ctx)
		rows := s.Held
		if len(rows) != 1 || rows[0].Key != "t1:a" || rows[0].Owner != "tok" || rows[0].Left < 25*time.Second ||
			!slices.Equal(rows[0].Present, []bool{true, true, true}) {
			t.Errorf("sample %+v, expected t1:a held by tok everywhere (t2:b is held nowhere)", rows)
		}
		if s.Undecided != nil || s.Skipped != nil || s.More || s.Err != nil {
			t.Errorf("sample %+v, expected nothing undecided, skipped or left over", s)
		}
	})
}
