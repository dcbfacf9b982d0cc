package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// groupOf is the shard group of key among n, as lockproxy routes it.
func groupOf(key string, n int) int { return hashslot.Of(key) * n / hashslot.Count }

// groupFlags are the -groups flags of n groups of size servers each.
func groupFlags(servers []*redistest.Server, n, size int) []string {
	var args []string
	for g := range n {
		var urls []string
		for _, s := range servers[g*size : (g+1)*size] {
			urls = append(urls, s.URL())
		}
		args = append(args, "-groups", strings.Join(urls, ","))
	}
	return args
}

// TestShardGroups: two proxies over three shard groups of three real
// redis-servers each. Keys spread over the groups by hash slot, each held
// on its own group's backends only; INFO, /readyz and the metrics show
// each group; the safety workload (runClient, fencing on) runs through
// both proxies while one group loses its majority, and the checkers find
// no two holders and no fencing token out of order; the other groups go on
// serving, and the group without a majority answers NOQUORUM for its keys.
func TestShardGroups(t *testing.T) {
	proxyTest(t)
	const groups, size = 3, 3
	servers := redistest.StartN(t, groups*size)
	args := append(groupFlags(servers, groups, size), "-restart-quarantine=false", "-backend-timeout", "500ms",
		"-fencing", "-max-ttl", maxTTL.String(), "-metrics", "127.0.0.1:0")
	proxies := []*proxyProcess{startProxy(t, args...), startProxy(t, args...)}
	for _, p := range proxies {
		waitForQuorum(t, p)
	}
	ctx := t.Context()

	// Keys spread by slot, each on its group's backends only.
	var perGroup [groups]int
	cli := proxies[0].Client(t)
	for n := range 300 {
		key := fmt.Sprintf("spread:%d", n)
		if got := do(t, cli, "SET", key, "me", "NX", "PX", maxTTL.Milliseconds()); got != "OK" {
			t.Fatalf("SET %s: %q", key, got)
		}
		perGroup[groupOf(key, groups)]++
	}
	for g := range groups {
		if perGroup[g] < 60 || perGroup[g] > 140 {
			t.Errorf("group %d got %d of the 300 keys", g, perGroup[g])
		}
		for _, s := range servers[g*size : (g+1)*size] {
			if n := len(s.Client(t).Keys(ctx, "spread:*").Val()); n != perGroup[g] {
				t.Errorf("a backend of group %d holds %d spread keys, want its group's %d", g, n, perGroup[g])
			}
		}
	}
	t.Logf("300 keys over %d groups: %v", groups, perGroup)

	info := redisCLI(t, proxies[0].Addr, "INFO", "backends")
	for _, want := range []string{"groups:3\r\n", "quorum:2\r\n",
		"group0:slots=0-5460,backends=3,quorum=2,quorum_available=1,backend_set=1:3:",
		"group1:slots=5461-10921,backends=3,quorum=2,quorum_available=1,backend_set=1:3:",
		"group2:slots=10922-16383,backends=3,quorum=2,quorum_available=1,backend_set=1:3:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO backends lacks %q:\n%s", want, info)
		}
	}
	if !regexp.MustCompile(`(?m)^backend8:addr=` + regexp.QuoteMeta(servers[8].Addr()) + `,state=up,.*,group=2,`).MatchString(info) {
		t.Errorf("INFO backends does not put backend 8 in group 2:\n%s", info)
	}

	// The safety workload over both proxies, on keys of every group.
	run := &safetyRun{h: newHistory(), keys: 9}
	run.res = newResourceLog(run.h)
	runCtx, stop := context.WithCancel(ctx)
	var clients sync.WaitGroup
	for c := range 8 {
		addr := proxies[c%2].Addr
		clients.Go(func() { runClient(runCtx, c, addr, run) })
	}
	// The workload's first half, all groups up: a count of grants, not a
	// time.
	awaitGrants(t, run.h, 0, 50)
	run.h.addFault("group 1 majority down", "phase starts")
	downAt := run.h.now()
	servers[3].Kill()
	servers[4].Kill()

	// Group 1 answers NOQUORUM for its keys; the others serve theirs.
	served := map[int]bool{}
	for n := 0; len(served) < groups; n++ {
		key := fmt.Sprintf("after:%d", n)
		g := groupOf(key, groups)
		if served[g] {
			continue
		}
		got := do(t, proxies[1].Client(t), "SET", key, "me", "NX", "PX", maxTTL.Milliseconds())
		switch {
		case g == 1 && !strings.HasPrefix(got, "ERR:NOQUORUM "):
			t.Errorf("SET %s in group 1, its majority down: %q", key, got)
		case g != 1 && got != "OK":
			t.Errorf("SET %s in group %d: %q", key, g, got)
		}
		served[g] = true
	}
	base := "http://" + proxies[0].waitLog(t, metricsLine)[1]
	redistest.Eventually(t, func() string {
		m := scrape(t, base)
		if m[`lockproxy_group_quorum_available{group="1",slots="5461-10921"}`] != 0 || m[`lockproxy_group_quorum_available{group="0",slots="0-5460"}`] != 1 ||
			m["lockproxy_quorum_available"] != 0 {
			return fmt.Sprintf("group quorum metrics with group 1 down: %v", m)
		}
		return ""
	})
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Status string
		Groups []struct {
			Slots            string
			Quorum, Counting int
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || ready.Status != "no quorum" || len(ready.Groups) != 3 ||
		ready.Groups[1].Counting != 1 || ready.Groups[0].Counting != 3 || ready.Groups[1].Slots != "5461-10921" {
		t.Errorf("/readyz with group 1's majority down: %d %+v %v", resp.StatusCode, ready, err)
	}

	page, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	for _, want := range []string{
		`<div class="banner yes" data-group="0">Group 0 (slots 0-5460): quorum available, 3 of 3 backends count, 2 needed</div>`,
		`<div class="banner no" data-group="1">Group 1 (slots 5461-10921): no quorum, 1 of 3 backends count, 2 needed; lock commands on its keys answer NOQUORUM</div>`,
	} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the status page lacks %s", want)
		}
	}

	awaitGrants(t, run.h, downAt, 50) // the workload's second half
	stop()
	clients.Wait()
	ops, faults := run.h.snapshot()
	report(t, ops, faults)
	verdict := check(t, ops, run.res.snapshot())
	if verdict.violations > 0 {
		t.Fatalf("%d safety violations", verdict.violations)
	}
	if verdict.acquired == 0 {
		t.Fatal("no acquisition succeeded: the run proves nothing")
	}
}

// TestShardGroupsOtherLayoutRefused: each group's backend set records its
// slot range, so a proxy that lists the same backends in other groups (here
// the two groups swapped: every key would go to the other group) is
// refused by them and answers NOQUORUM, rather than granting keys that the
// first proxy holds in the other group.
func TestShardGroupsOtherLayoutRefused(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 6)
	common := []string{"-restart-quarantine=false", "-backend-timeout", "500ms"}
	flags := groupFlags(servers, 2, 3)
	a := startProxy(t, append(flags, common...)...)
	waitForQuorum(t, a)
	swapped := []string{flags[0], flags[3], flags[2], flags[1]}
	b := startProxy(t, append(swapped, common...)...)
	b.waitLog(t, regexp.MustCompile(`backend does not count toward quorum: it records another backend set`))
	if got := do(t, a.Client(t), "SET", "job", "first", "NX", "PX", 20000); got != "OK" {
		t.Fatalf("A: %q", got)
	}
	if got := do(t, b.Client(t), "SET", "job", "second", "NX", "PX", 20000); !strings.HasPrefix(got, "ERR:NOQUORUM ") {
		t.Fatalf("B, its groups swapped: %q, want NOQUORUM", got)
	}
}

// TestShardGroupsChangeDrains: going from two groups to three (epoch 2,
// a new group of fresh backends) moves slots between groups, so a lock
// held in its old group is unknown to its new one. lockproxy adopt writes
// the new layout, and since every group's slots changed, every backend
// waits for the old layout's locks (the epoch wait, max_ttl): a key that
// moved is taken through the new proxy only after the lock the old proxy
// granted on it has expired, and the old proxy is refused from the
// adoption on. A proxy started later, with one group's majority down,
// serves the other groups at once: the waits are written on the backends.
func TestShardGroupsChangeDrains(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 9)
	const maxTTL = 3 * time.Second
	common := []string{"-restart-quarantine=false", "-backend-timeout", "500ms", "-max-ttl", maxTTL.String()}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("moved:%d", i); groupOf(k, 2) == 0 && groupOf(k, 3) == 1 {
			key = k
		}
	}
	old := startProxy(t, append(groupFlags(servers, 2, 3), common...)...)
	waitForQuorum(t, old)
	oldClient := old.Client(t)
	sent := time.Now()
	if got := do(t, oldClient, "SET", key, "first", "NX", "PX", maxTTL.Milliseconds()); got != "OK" {
		t.Fatalf("the old layout's proxy: %q", got)
	}

	next := append(groupFlags(servers, 3, 3), append(common, "-backend-set-epoch", "2")...)
	if out, err := runAdopt(next...); err != nil || strings.Count(out, "epoch wait") != 9 {
		t.Fatalf("adopt: %v, want an epoch wait on all 9 backends:\n%s", err, out)
	}
	nextClient := startProxy(t, next...).Client(t)
	if got := do(t, oldClient, "SET", "other", "x", "NX", "PX", 1000); !strings.HasPrefix(got, "ERR:NOQUORUM ") || !strings.Contains(got, "other set") {
		t.Fatalf("the old layout's proxy after the adoption: %q, want NOQUORUM with other set", got)
	}
	var refusals int
	redistest.Eventually(t, func() string {
		got := do(t, nextClient, "SET", key, "second", "NX", "PX", 1000)
		if got == "OK" {
			return ""
		}
		if !strings.HasPrefix(got, "ERR:NOQUORUM ") || !strings.Contains(got, "in the epoch wait") {
			t.Fatalf("the new layout's proxy while draining: %q, want NOQUORUM in the epoch wait", got)
		}
		refusals++
		return "not granted yet: " + got
	})
	if granted := time.Since(sent); granted < maxTTL || refusals == 0 {
		t.Fatalf("the moved key was granted %v after the old proxy took it (its TTL %v), after %d refusals", granted.Round(time.Millisecond), maxTTL, refusals)
	}

	servers[0].Kill()
	servers[1].Kill()
	later := startProxy(t, next...)
	laterClient := later.Client(t)
	for g := range 3 {
		k := ""
		for i := 0; k == ""; i++ {
			if c := fmt.Sprintf("later:%d", i); groupOf(c, 3) == g {
				k = c
			}
		}
		got := do(t, laterClient, "SET", k, "third", "NX", "PX", 1000)
		if want := "OK"; g == 0 && !strings.HasPrefix(got, "ERR:NOQUORUM ") || g > 0 && got != want {
			t.Errorf("a proxy started after the change, group %d's key %s (group 1 without its majority): %q", g+1, k, got)
		}
	}
}
