package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The acceptance of issue 33, through the binary on real redis-servers:
// the wedge after a majority of empty restarts clears within the bound the
// docs/backends.md states, a stray proxy writes nothing, a mistaken epoch is undone,
// and docs/backends.md's procedure for changing the set works step by step, its
// epoch wait shown in INFO, /readyz, the metrics and the log.

// records reads every backend's set record.
func records(t *testing.T, servers []*redistest.Server) []string {
	t.Helper()
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Client(t).Get(t.Context(), "{lockproxy}:set").Val()
	}
	return out
}

// urls is the -backends value of servers idx.
func urls(servers []*redistest.Server, idx ...int) string {
	var u []string
	for _, i := range idx {
		u = append(u, servers[i].URL())
	}
	return strings.Join(u, ",")
}

// infoBackend returns backend i's fields in the proxy's INFO backends.
func infoBackend(t *testing.T, addr string, i int) map[string]string {
	t.Helper()
	fields := backendFields(redisCLI(t, addr, "INFO", "backends"), i)
	if fields == nil {
		t.Fatalf("INFO backends has no backend%d", i)
	}
	return fields
}

// backendFields reads backend i's fields from the text of INFO backends,
// nil when it has none.
func backendFields(info string, i int) map[string]string {
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^backend%d:(.*)\r?$`, i)).FindStringSubmatch(info)
	if m == nil {
		return nil
	}
	fields := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(m[1]), ",") {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	return fields
}

// TestWedgeClears: issue 33's first reproduction. Five backends, max_ttl
// 3 s, restart quarantine on; the proxy on epoch 1, then the same
// backends adopted at epoch 2 and the proxy restarted on it; then three of
// the five restart empty (a rack's power cut). Every one counts again
// within max_ttl, its drift allowance and the second a proxy takes to
// notice (the bound docs/backends.md states), the countdown of each in INFO
// moving and never above max_ttl; the log says when the quorum was lost
// and when it came back.
func TestWedgeClears(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 5)
	const maxTTL = 3 * time.Second
	common := []string{"-backends", list, "-max-ttl", maxTTL.String(), "-backend-timeout", "500ms"}
	p := startProxy(t, common...)
	waitForQuorum(t, p)
	if out, err := runAdopt(append(common, "-backend-set-epoch", "2")...); err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	p.Kill()
	p = startProxy(t, append(common, "-backend-set-epoch", "2")...)
	waitForQuorum(t, p)

	for _, s := range servers[:3] {
		s.Restart()
	}
	restarted := time.Now()
	bound := maxTTL + time.Duration(float64(maxTTL)*0.01) + 2*time.Millisecond + 2*time.Second
	cli := p.Client(t)
	var lefts []int
	redistest.Eventually(t, func() string {
		left, _ := strconv.Atoi(infoBackend(t, p.Addr, 0)["quarantine_left_s"])
		if left > int(maxTTL/time.Second) {
			t.Fatalf("backend 0 waits %d s, longer than max_ttl", left)
		}
		if len(lefts) == 0 || lefts[len(lefts)-1] != left {
			lefts = append(lefts, left)
		}
		if got := do(t, cli, "SET", "after:power:cut", "me", "NX", "PX", 1000); got != "OK" {
			return "the proxy does not take locks yet: " + got
		}
		return ""
	})
	// A loaded machine adds its own delay to the bound; twice the second
	// of slack is still far from the wedge's for ever.
	if took := time.Since(restarted); took > bound+time.Second {
		t.Errorf("locks were granted again %v after the restarts; the bound is %v", took.Round(time.Millisecond), bound)
	}
	if len(lefts) < 2 {
		t.Errorf("the countdown did not move: %v", lefts)
	}
	redistest.Eventually(t, func() string {
		for i := range servers {
			if st := infoBackend(t, p.Addr, i)["state"]; st != "up" {
				return fmt.Sprintf("backend %d: %s", i, st)
			}
		}
		return ""
	})
	p.waitLog(t, regexp.MustCompile(`level=WARN msg="quorum lost: too few backends count toward quorum; lock commands answer NOQUORUM until enough do" counting=2 backends=5 quorum=3 cause="127\.0\.0\.1:\d+ [a-z_ ()]+"`))
	p.waitLog(t, regexp.MustCompile(`level=INFO msg="quorum regained: enough backends count toward quorum again for lock commands to be decided" counting=[345] backends=5 quorum=3 cause="127\.0\.0\.1:\d+(, 127\.0\.0\.1:\d+)* now count"`))
}

// TestStrayProxyWritesNothing: issue 33's second reproduction. A proxy
// started by mistake with a higher epoch and a list of the three real
// backends and two addresses that do not answer runs for six seconds
// beside the deployment: it writes no record, says what it misses, and
// the deployment never stops granting.
func TestStrayProxyWritesNothing(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	a := startProxy(t, "-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms")
	waitForQuorum(t, a)
	before := records(t, servers)
	stray := startProxy(t, "-backends", list+",redis://127.0.0.1:1,redis://127.0.0.1:2", "-backend-set-epoch", "7",
		"-restart-quarantine=false", "-backend-timeout", "500ms")
	cli, strayCli := a.Client(t), stray.Client(t)
	for end, n := time.Now().Add(6*time.Second), 0; time.Now().Before(end); n++ {
		key := fmt.Sprintf("deployment:%d", n)
		if got := do(t, cli, "SET", key, "me", "NX", "PX", 5000); got != "OK" {
			t.Fatalf("the deployment's SET %s with the stray beside it: %s", key, got)
		}
		if got := do(t, strayCli, "SET", key+":stray", "me", "NX", "PX", 5000); !strings.HasPrefix(got, "ERR:NOQUORUM 0 of 5 backends count") {
			t.Fatalf("the stray's SET: %s, want NOQUORUM", got)
		}
		do(t, cli, "DEL", key)
		time.Sleep(50 * time.Millisecond) // a client's pace, not synchronisation
	}
	if got := records(t, servers); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("records %q after the stray, were %q", got, before)
	}
	// The kinds come in the order their votes came.
	got := do(t, strayCli, "SET", "stray", "me", "NX", "PX", 5000)
	for _, want := range []string{"ERR:NOQUORUM 0 of 5 backends count (3 answered, ", "3 not adopted", "2 connection refused", "); 3 needed"} {
		if !strings.Contains(got, want) {
			t.Errorf("the stray: %q, want it to say %q", got, want)
		}
	}
	stray.waitLog(t, regexp.MustCompile(`msg="no quorum yet: too few backends count toward quorum; lock commands answer NOQUORUM until enough do" counting=0 backends=5 quorum=3 not_counting="127\.0\.0\.1:\d+ not_adopted, 127\.0\.0\.1:\d+ not_adopted, 127\.0\.0\.1:\d+ not_adopted, 127\.0\.0\.1:1 down \(connection refused\), 127\.0\.0\.1:2 down \(connection refused\)"`))
}

// TestUndoMistakenEpoch: docs/backends.md's way back from a wrong adopt. Epoch
// 2 replaced backend 2 by backend 3, by mistake, and a proxy was started
// on it; adopting epoch 3 with the right list undoes it: the right
// backends count again within the epoch wait, the mistaken proxy is
// refused, and a lock taken before is never granted twice.
func TestUndoMistakenEpoch(t *testing.T) {
	proxyTest(t)
	servers, _ := backends(t, 4)
	const maxTTL = 5 * time.Second
	common := []string{"-max-ttl", maxTTL.String(), "-restart-quarantine=false", "-backend-timeout", "500ms"}
	right := append([]string{"-backends", urls(servers, 0, 1, 2)}, common...)
	wrong := append([]string{"-backends", urls(servers, 0, 1, 3), "-backend-set-epoch", "2"}, common...)
	a := startProxy(t, right...)
	waitForQuorum(t, a)
	if got := do(t, a.Client(t), "SET", "held", "first", "NX", "PX", maxTTL.Milliseconds()); got != "OK" {
		t.Fatalf("first holder: %s", got)
	}
	if out, err := runAdopt(wrong...); err != nil {
		t.Fatalf("the mistaken adopt: %v\n%s", err, out)
	}
	b := startProxy(t, wrong...)
	if got := do(t, a.Client(t), "SET", "other", "x", "NX", "PX", 1000); !strings.HasPrefix(got, "ERR:NOQUORUM ") {
		t.Errorf("the right proxy after the mistaken adopt: %q, want NOQUORUM", got)
	}
	if got := do(t, b.Client(t), "SET", "held", "second", "NX", "PX", 1000); got == "OK" {
		t.Fatal("the mistaken epoch granted a lock held")
	}

	out, err := runAdopt(append(right, "-backend-set-epoch", "3")...)
	if err != nil {
		t.Fatalf("the undo: %v\n%s", err, out)
	}
	undone := time.Now()
	a.Kill()
	a = startProxy(t, append(right, "-backend-set-epoch", "3")...)
	if got := do(t, a.Client(t), "SET", "held", "third", "NX", "PX", 1000); got == "OK" {
		t.Fatal("the undone epoch granted a lock held")
	}
	redistest.Eventually(t, func() string {
		for i := range 3 {
			if st := infoBackend(t, a.Addr, i)["state"]; st != "up" {
				return fmt.Sprintf("backend %d: %s", i, st)
			}
		}
		return ""
	})
	if took := time.Since(undone); took > maxTTL+2*time.Second {
		t.Errorf("the right backends counted %v after the undo, longer than the epoch wait", took.Round(time.Millisecond))
	}
	if got := do(t, a.Client(t), "SET", "after", "me", "NX", "PX", 1000); got != "OK" {
		t.Errorf("after the undo: %q", got)
	}
	if got := do(t, b.Client(t), "SET", "mistaken", "me", "NX", "PX", 1000); !strings.HasPrefix(got, "ERR:NOQUORUM ") {
		t.Errorf("the mistaken proxy after the undo: %q, want NOQUORUM", got)
	}
}

// TestChangeSetProcedure: docs/backends.md's procedure for growing the set from
// three backends to five, step by step, with configuration files; the
// epoch wait of the two new backends, in INFO, /readyz, the metrics and
// the log, with a countdown that moves.
func TestChangeSetProcedure(t *testing.T) {
	proxyTest(t)
	servers, _ := backends(t, 5)
	dir := t.TempDir()
	config := func(name string, epoch int, idx ...int) string {
		var quoted []string
		for _, i := range idx {
			quoted = append(quoted, strconv.Quote(servers[i].URL()))
		}
		path := filepath.Join(dir, name)
		text := fmt.Sprintf("backends = [%s]\nbackend_set_epoch = %d\nmax_ttl = \"4s\"\nrestart_quarantine = false\nbackend_timeout = \"500ms\"\n", strings.Join(quoted, ", "), epoch)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	oldCfg, newCfg := config("old.toml", 1, 0, 1, 2), config("new.toml", 2, 0, 1, 2, 3, 4)
	p0 := startProxy(t, "-config", oldCfg)
	p1 := startProxy(t, "-config", oldCfg)
	waitForQuorum(t, p0)
	if got := do(t, p0.Client(t), "SET", "held", "before", "NX", "PX", 4000); got != "OK" {
		t.Fatalf("a lock before the change: %s", got)
	}

	// 1. Start the new backends (done above), 2. look before leaping.
	before := records(t, servers)
	out, err := runAdopt("-config", newCfg, "-dry-run")
	if err != nil || !strings.Contains(out, "dry run: nothing written") || !strings.Contains(out, "epoch wait 4s") {
		t.Fatalf("adopt -dry-run: %v\n%s", err, out)
	}
	if got := records(t, servers); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("the dry run wrote %q", got)
	}
	// 3. Adopt.
	if out, err = runAdopt("-config", newCfg); err != nil || !strings.Contains(out, "adopted: restart every proxy") {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	if got := do(t, p1.Client(t), "SET", "other", "x", "NX", "PX", 1000); !strings.Contains(got, "3 other set") {
		t.Errorf("an old proxy after adopt: %q, want NOQUORUM ... 3 other set", got)
	}
	// 4. Restart the proxies, one at a time, with the new configuration.
	p1.Kill()
	p1 = startProxy(t, "-config", newCfg, "-metrics", "127.0.0.1:0")
	if got := do(t, p1.Client(t), "SET", "fresh", "x", "NX", "PX", 1000); got != "OK" {
		t.Errorf("a new proxy at once (its quorum of three is the old members): %q", got)
	}
	if got := do(t, p1.Client(t), "SET", "held", "after", "NX", "PX", 1000); got == "OK" {
		t.Error("a lock taken before the change was granted again")
	}
	first := infoBackend(t, p1.Addr, 3)
	if first["state"] != "epoch_wait" || first["wait_reason"] != "epoch" {
		t.Errorf("a new backend in INFO: %v, want state=epoch_wait, wait_reason=epoch", first)
	}
	// One line for the two new backends, each with its countdown or one for both.
	p1.waitLog(t, regexp.MustCompile(`level=WARN msg="backend in epoch wait: the backend set changed, and locks granted in the old epoch may still be held; its replies count toward quorum from then on" backends=`+
		regexp.QuoteMeta(servers[3].Addr()+","+servers[4].Addr())+` counts_in=\ds(,\ds)? counts_at=`))
	metrics := p1.waitLog(t, regexp.MustCompile(`msg="metrics and health listening" addr=(\S+)`))[1]
	readyz := func() map[string]any {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return body
	}
	backend3 := readyz()["backends"].([]any)[3].(map[string]any)
	if backend3["state"] != "epoch_wait" || backend3["reason"] != "epoch" || backend3["quarantine_left_s"].(float64) <= 0 {
		t.Errorf("a new backend in /readyz: %v", backend3)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`lockproxy_backend_state{backend=%q,state="epoch_wait"} 1`, servers[3].Addr()),
		fmt.Sprintf(`lockproxy_backend_state{backend=%q,state="up"} 1`, servers[0].Addr()),
	} {
		if !strings.Contains(string(scrape), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !regexp.MustCompile(fmt.Sprintf(`lockproxy_backend_wait_seconds\{backend=%q,wait_for="epoch"\} [1-5]\n`, servers[3].Addr())).Match(scrape) {
		t.Errorf("/metrics lacks a wait of 1 to 5 s for backend 3")
	}
	redistest.Eventually(t, func() string {
		if now := infoBackend(t, p1.Addr, 3); now["quarantine_left_s"] == first["quarantine_left_s"] {
			return "the countdown stands at " + now["quarantine_left_s"]
		}
		return ""
	})
	p0.Kill()
	p0 = startProxy(t, "-config", newCfg)
	redistest.Eventually(t, func() string {
		for _, p := range []*proxyProcess{p0, p1} {
			for i := range 5 {
				if st := infoBackend(t, p.Addr, i)["state"]; st != "up" {
					return fmt.Sprintf("backend %d: %s", i, st)
				}
			}
		}
		return ""
	})
	if got := redisCLI(t, p0.Addr, "INFO", "backends"); !strings.Contains(got, "backend_set:2:5:") {
		t.Errorf("INFO after the change: %s", got)
	}
}

// TestIdleProxySeesBackendReturn: a proxy that serves no request redials
// a backend that went down in the background, and shows it back within
// about a second, its quarantine counting down from then.
func TestIdleProxySeesBackendReturn(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	p := startProxy(t, "-backends", list, "-max-ttl", "3s", "-backend-timeout", "500ms")
	waitForQuorum(t, p)
	servers[0].Kill()
	redistest.Eventually(t, func() string {
		if st := infoBackend(t, p.Addr, 0)["state"]; st != "down" {
			return "backend 0: " + st
		}
		return ""
	})
	servers[0].Restart()
	back := time.Now()
	redistest.Eventually(t, func() string {
		if st := infoBackend(t, p.Addr, 0)["state"]; st != "quarantined" {
			return "backend 0: " + st
		}
		return ""
	})
	if seen := time.Since(back); seen > 3*time.Second {
		t.Errorf("the idle proxy showed the backend back %v after it was", seen.Round(time.Millisecond))
	}
}
