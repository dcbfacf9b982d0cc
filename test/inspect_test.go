package test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// listedLock is one entry of a LOCK.LIST page, read from its RESP3 map.
type listedLock struct {
	key, owner, state string // owner "" when null
	validity          int64
	values            []string // per backend: its value, "-" when none
	pttls             []int64  // per backend; -3 when null (not seen)
}

// lockList runs LOCK.LIST cursor args... and returns the next cursor and
// the page's locks.
func lockList(t *testing.T, cli *redis.Client, cursor string, args ...any) (string, []listedLock) {
	t.Helper()
	v, err := cli.Do(t.Context(), append([]any{"LOCK.LIST", cursor}, args...)...).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("LOCK.LIST %s %v: %v %v", cursor, args, v, err)
	}
	var out []listedLock
	for _, e := range v[1].([]any) {
		m := e.(map[any]any)
		l := listedLock{key: m["key"].(string), state: m["state"].(string), validity: m["validity_ms"].(int64)}
		if o, ok := m["owner"].(string); ok {
			l.owner = o
		}
		for _, b := range m["backends"].([]any) {
			bm := b.(map[any]any)
			val, ok := bm["value"].(string)
			if !ok {
				val = "-"
			}
			pttl, ok := bm["pttl_ms"].(int64)
			if !ok {
				pttl = -3
			}
			l.values, l.pttls = append(l.values, val), append(l.pttls, pttl)
		}
		out = append(out, l)
	}
	return v[0].(string), out
}

// lockListAll pages through a whole LOCK.LIST listing.
func lockListAll(t *testing.T, cli *redis.Client, args ...any) map[string]listedLock {
	t.Helper()
	all := map[string]listedLock{}
	cursor := "0"
	for range 1000 {
		var page []listedLock
		cursor, page = lockList(t, cli, cursor, args...)
		for _, l := range page {
			if _, dup := all[l.key]; dup {
				t.Fatalf("%q listed twice", l.key)
			}
			all[l.key] = l
		}
		if cursor == "0" {
			return all
		}
	}
	t.Fatal("the listing does not end")
	return nil
}

// TestInspectTwoProxies: locks taken through two proxies over the same
// backends, by two tenants with key prefixes and an administrator without
// one, are listed through either proxy with their owners and remaining
// times; each tenant sees only its own, without its prefix; a key missing
// on one backend shows it there; GET /locks says the same as JSON, and
// redis-cli --scan lists a tenant's held keys.
func TestInspectTwoProxies(t *testing.T) {
	proxyTest(t)
	pass := sha256Hex("pw")
	users := []string{"-users", "t1:sha256:" + pass + ":t1:", "-users", "t2:sha256:" + pass + ":t2:", "-users", "admin:sha256:" + pass}
	c := newCluster(t, 3, append(users, "-metrics", "127.0.0.1:0")...)
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	b := startProxy(t, append(users, "-backends", strings.Join(urls, ","), "-restart-quarantine=false", "-backend-timeout", "500ms")...)
	as := func(p *proxyProcess, user string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: p.Addr, Username: user, Password: "pw", MaxRetries: -1})
		t.Cleanup(func() { r.Close() })
		return r
	}
	for _, s := range []struct {
		p         *proxyProcess
		user, key string
		token     string
		ttl       time.Duration
	}{
		{c.proxy, "t1", "job:1", "w1", 30 * time.Second},
		{b, "t2", "job:1", "w2", 20 * time.Second},
		{b, "admin", "plain", "w3", 10 * time.Second},
		{c.proxy, "admin", "partial", "w4", 30 * time.Second},
	} {
		if ok, err := as(s.p, s.user).SetNX(t.Context(), s.key, s.token, s.ttl).Result(); !ok || err != nil {
			t.Fatalf("%s SET %s: %v %v", s.user, s.key, ok, err)
		}
	}
	c.servers[2].Client(t).Del(t.Context(), "partial")

	type want struct {
		owner  string
		ttl    int64 // ms the lock was taken for
		values string
	}
	check := func(t *testing.T, all map[string]listedLock, exp map[string]want) {
		t.Helper()
		var keys, expKeys []string
		for k := range all {
			keys = append(keys, k)
		}
		for k := range exp {
			expKeys = append(expKeys, k)
		}
		slices.Sort(keys)
		slices.Sort(expKeys)
		if !slices.Equal(keys, expKeys) {
			t.Fatalf("listed %q, expected %q", keys, expKeys)
		}
		for k, w := range exp {
			l := all[k]
			// As PTTL: the quorum-th longest TTL less the drift allowance
			// (1% + 2 ms), and not much less after the time it took.
			maxValidity := w.ttl - w.ttl/100 - 2
			if l.owner != w.owner || l.state != "held" || l.validity > maxValidity || l.validity < maxValidity-5000 {
				t.Errorf("%s: owner %q, %s, validity %d ms; expected %q, held, at most %d ms", k, l.owner, l.state, l.validity, w.owner, maxValidity)
			}
			if got := strings.Join(l.values, ","); got != w.values {
				t.Errorf("%s: backends hold %s, expected %s", k, got, w.values)
			}
			for i, v := range l.values {
				if v != "-" && (l.pttls[i] <= l.validity || l.pttls[i] > w.ttl) {
					t.Errorf("%s: backend %d gives %d ms left, expected more than the validity %d", k, i, l.pttls[i], l.validity)
				}
				if v == "-" && l.pttls[i] != -2 {
					t.Errorf("%s: backend %d without the key gives pttl_ms %d, expected -2", k, i, l.pttls[i])
				}
			}
		}
	}
	everything := map[string]want{
		"t1:job:1": {"w1", 30000, "w1,w1,w1"},
		"t2:job:1": {"w2", 20000, "w2,w2,w2"},
		"plain":    {"w3", 10000, "w3,w3,w3"},
		"partial":  {"w4", 30000, "w4,w4,-"},
	}
	for _, p := range []*proxyProcess{c.proxy, b} {
		t.Run("admin through "+p.Addr, func(t *testing.T) {
			check(t, lockListAll(t, as(p, "admin"), "COUNT", 1), everything)
		})
		t.Run("tenants through "+p.Addr, func(t *testing.T) {
			check(t, lockListAll(t, as(p, "t1")), map[string]want{"job:1": {"w1", 30000, "w1,w1,w1"}})
			check(t, lockListAll(t, as(p, "t2"), "MATCH", "job:*"), map[string]want{"job:1": {"w2", 20000, "w2,w2,w2"}})
			check(t, lockListAll(t, as(p, "t2"), "MATCH", "t2:*"), map[string]want{})
		})
	}
	t.Run("GET /locks", func(t *testing.T) {
		base := "http://" + c.proxy.waitLog(t, metricsLine)[1]
		resp, err := http.Get(base + "/locks?prefix=t1:&count=100")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page struct {
			NextCursor string `json:"next_cursor"`
			Locks      []struct {
				Key        string  `json:"key"`
				Owner      *string `json:"owner"`
				State      string  `json:"state"`
				ValidityMS int64   `json:"validity_ms"`
				Backends   []struct {
					Addr  string  `json:"addr"`
					Value *string `json:"value"`
				} `json:"backends"`
			} `json:"locks"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /locks: %s %v", resp.Status, err)
		}
		if len(page.Locks) != 1 || page.NextCursor != "0" {
			t.Fatalf("GET /locks?prefix=t1: %+v, expected t1:job:1 alone on one page", page)
		}
		l := page.Locks[0]
		if l.Key != "t1:job:1" || l.Owner == nil || *l.Owner != "w1" || l.State != "held" || l.ValidityMS < 20000 || len(l.Backends) != 3 ||
			l.Backends[1].Addr != c.servers[1].Addr() || *l.Backends[1].Value != "w1" {
			t.Errorf("GET /locks: %+v", l)
		}
	})
	t.Run("redis-cli --scan", func(t *testing.T) {
		if got := redisCLI(t, b.Addr, "--user", "t1", "--pass", "pw", "--no-auth-warning", "--scan"); got != "job:1" {
			t.Errorf("redis-cli --scan as t1: %q, expected job:1", got)
		}
		if got := redisCLI(t, b.Addr, "--user", "t1", "--pass", "pw", "--no-auth-warning", "KEYS", "*"); got != "job:1" {
			t.Errorf("redis-cli KEYS * as t1: %q, expected job:1", got)
		}
	})
}

// TestInspectBounded: 100,000 locks, seeded on every backend, are listed
// page by page through the proxy, each exactly once; every page holds at
// most about COUNT locks and costs each backend a bounded number of SCANs
// and scripts, and KEYS is never called.
func TestInspectBounded(t *testing.T) {
	heavyTest(t)
	const locks, count = 100_000, 1000
	// newCluster's, seeded before the proxy starts: each backend runs
	// seed's script for a few hundred milliseconds, in which it answers
	// no one, and a proxy would take that for a timeout.
	servers, list := backends(t, 3)
	for _, s := range servers {
		seed(t, s, locks)
	}
	c := &cluster{servers: servers, proxy: startProxy(t, "-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms")}
	cli := c.proxy.Client(t)
	calls := func() [][3]int64 {
		out := make([][3]int64, len(c.servers))
		for i, s := range c.servers {
			out[i] = [3]int64{commandCalls(t, s, "scan"), commandCalls(t, s, "evalsha") + commandCalls(t, s, "eval"), commandCalls(t, s, "keys")}
		}
		return out
	}
	seen := make(map[string]bool, locks)
	cursor, pages := "0", 0
	start := time.Now()
	for {
		before := calls()
		var page []listedLock
		cursor, page = lockList(t, cli, cursor, "COUNT", count)
		after := calls()
		pages++
		if len(page) > count*3/2 {
			t.Fatalf("page %d: %d locks for COUNT %d", pages, len(page), count)
		}
		for i := range after {
			// listRounds (4) SCANs and twice as many scripts at most; the
			// script's first run on a connection is an EVALSHA answered
			// NOSCRIPT, then an EVAL.
			if scans, scripts := after[i][0]-before[i][0], after[i][1]-before[i][1]; scans > 4 || scripts > 10 {
				t.Fatalf("page %d: backend %d ran %d SCANs and %d scripts", pages, i, scans, scripts)
			}
		}
		for _, l := range page {
			if seen[l.key] {
				t.Fatalf("%q listed twice", l.key)
			}
			if l.owner != "w" || l.state != "held" {
				t.Fatalf("%q: owner %q, %s", l.key, l.owner, l.state)
			}
			seen[l.key] = true
		}
		if cursor == "0" {
			break
		}
		if pages > 2*locks/count*len(c.servers) {
			t.Fatalf("%d pages and counting", pages)
		}
	}
	if len(seen) != locks {
		t.Fatalf("listed %d locks of %d", len(seen), locks)
	}
	for i, s := range c.servers {
		if n := commandCalls(t, s, "keys"); n != 0 {
			t.Errorf("backend %d ran KEYS %d times", i, n)
		}
	}
	t.Logf("%d locks in %d pages in %s", locks, pages, time.Since(start))
}

// seed sets lock:0 .. lock:n-1 to "w" for a minute on s, in one script
// that the backend runs: 100,000 SETs pipelined from the race-built test
// took seconds of the heavy test's turn, a fixed preparation, not what it
// tests.
func seed(t *testing.T, s *redistest.Server, n int) {
	t.Helper()
	const script = `for i = 0, ARGV[1] - 1 do redis.call('SET', 'lock:' .. i, 'w', 'PX', ARGV[2]) end
return redis.call('DBSIZE')`
	if got, err := s.Client(t).Eval(t.Context(), script, nil, n, time.Minute.Milliseconds()).Int(); err != nil || got < n {
		t.Fatalf("seeding %s: %d keys, %v", s.Addr(), got, err)
	}
}
