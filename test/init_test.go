package test

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runInit runs lockproxy init with args (the proxies' own settings, a
// listen address aside) and returns what it printed.
func runInit(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"init"}, args...)...)
	cmd.Env = proxyEnv(nil)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInitColdStart: on fresh backends a proxy with the restart quarantine
// on and the default max_ttl answers NOQUORUM quarantined (a cold start
// waits max_ttl); after lockproxy init on others, one takes a lock at
// once. A second init, once a proxy ran, refuses and writes nothing.
func TestInitColdStart(t *testing.T) {
	proxyTest(t)
	_, cold := backends(t, 3)
	p := startProxy(t, "-backends", cold, "-backend-timeout", "500ms")
	if got := do(t, p.Client(t), "SET", "k", "me", "NX", "PX", 10000); !strings.HasPrefix(got, "ERR:NOQUORUM 0 of 3 backends count (3 answered, 3 quarantined as unmarked (new or emptied; lockproxy init marks new ones)") {
		t.Fatalf("without init: %q, want NOQUORUM quarantined", got)
	}

	servers, list := backends(t, 3)
	out, err := runInit("-backends", list)
	if err != nil || strings.Count(out, ": fresh: set recorded, counts at once") != 3 || !strings.Contains(out, "initialised: start the proxies with this configuration") {
		t.Fatalf("init: %v\n%s", err, out)
	}
	p = startProxy(t, "-backends", list, "-backend-timeout", "500ms")
	if got := do(t, p.Client(t), "SET", "k", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("after init: %q, want OK at once", got)
	}
	if info := redisCLI(t, p.Addr, "INFO", "backends"); strings.Count(info, ",state=up") != 3 {
		t.Errorf("INFO backends after init:\n%s", info)
	}

	before := make([]string, len(servers))
	for i, s := range servers {
		before[i] = s.Client(t).Get(t.Context(), "{lockproxy}:server").Val()
	}
	out, err = runInit("-backends", list)
	if err == nil || strings.Count(out, ": it records the backend set 1:3:") != 3 || !strings.Contains(out, "nothing written: init writes only where every backend is fresh. Its safety is your word that no client holds a lock on them") {
		t.Fatalf("init after the proxy ran: %v, want a refusal naming each record\n%s", err, out)
	}
	for i, s := range servers {
		if got := s.Client(t).Get(t.Context(), "{lockproxy}:server").Val(); got != before[i] {
			t.Errorf("backend %d: marker %q after the refused init, was %q", i, got, before[i])
		}
	}
}

// TestInitRefuses: init writes nothing unless every backend is fresh, and
// says, a line a backend, what it found: a set record, a lockproxy marker
// of an earlier process, a lease horizon.
func TestInitRefuses(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	for _, tc := range []struct {
		name, key, value string
		found            *regexp.Regexp
	}{
		{"a record", "{lockproxy}:set", "1:3:0123456789abcdef:-:h a%3A1%2F0", regexp.MustCompile(`: it records the backend set 1:3:0123456789abcdef\n`)},
		{"a marker of an earlier process", "{lockproxy}:server", "0123abcd:1000:restart", regexp.MustCompile(`: it carries a lockproxy marker of an earlier process \(run_id 0123abcd\)`)},
		{"a horizon", "{lockproxy}:horizon", "", regexp.MustCompile(`: it carries a lease horizon: a lease recorded on it may be held for \d`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := servers[0].Client(t)
			if err := c.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			value := tc.value
			if value == "" { // a horizon: a lease's expiry, by the backend's clock
				value = strconv.FormatInt(c.Time(t.Context()).Val().Add(time.Minute).UnixMilli(), 10)
			}
			c.Set(t.Context(), tc.key, value, time.Minute)
			out, err := runInit("-backends", list)
			if err == nil || !tc.found.MatchString(out) || strings.Count(out, ": fresh\n") != 2 || !strings.Contains(out, "nothing written: init writes only where every backend is fresh") {
				t.Fatalf("init: %v, want a refusal, %s on the first backend and the others fresh\n%s", err, tc.found, out)
			}
			for i, s := range servers {
				if n := s.Client(t).Exists(t.Context(), "{lockproxy}:set").Val(); n != 0 && (i > 0 || tc.key != "{lockproxy}:set") {
					t.Errorf("backend %d carries a record after the refused init", i)
				}
			}
		})
	}
}
