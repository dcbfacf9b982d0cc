package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// previousRelease is the commit that v0.1.0 names, the release before this
// one: main as the i18-* branches forked from it on 2026-11-23, whose
// [0.1.0] section the CHANGELOG wrote as "what lockproxy does today", its
// [Unreleased] section then naming what those branches added. The same day's
// later commits (to 0a2002a) changed nothing of what a proxy stores on the
// backends or how it reads it (quorum/lua, members.go, admit.go).
const previousRelease = "596f215b77e00b07d19cf26ac183774761f77fc3"

// previousBinary builds lockproxy at previousRelease, once per package run:
// git archive into a temporary directory, then go build with that
// release's go.mod (the module cache is shared), without -race, as users
// run a release; niced, as negativeControlBinary is. A checkout without
// the history (a shallow clone, a source tarball) cannot build it: the
// test skips there, saying why (.ci/run unshallows a shallow clone first);
// a full clone that lacks the commit fails it, as a rewritten history
// would leave the CHANGELOG's upgrade notes resting on nothing.
var previousBinary = sync.OnceValues(func() (string, error) {
	if out, err := exec.Command("git", "cat-file", "-e", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		err = fmt.Errorf("the mixed-version test builds v0.1.0 from commit %s of the git history, which this checkout lacks (%v: %s): it needs a full clone (git fetch --unshallow)", previousRelease, err, strings.TrimSpace(string(out)))
		if withoutHistory() {
			return "", fmt.Errorf("%w: %w", errNoHistory, err)
		}
		return "", err
	}
	dir := filepath.Join(filepath.Dir(binary), "v0.1.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	extract := fmt.Sprintf("git archive %s | tar -x -C %q", previousRelease, dir)
	archive := exec.Command("sh", "-ec", extract)
	archive.Dir = ".." // the whole tree: run in test/, git archive takes test/ alone
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", extract, err, out)
	}
	bin := filepath.Join(dir, "lockproxy-v0.1.0")
	build := exec.Command("nice", "-n", "19", "go", "build", "-buildvcs=false", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building v0.1.0 (%s): %v\n%s", previousRelease, err, out)
	}
	previousBuildTime = time.Since(start)
	return bin, nil
})

// errNoHistory marks a checkout that holds no git history to build the
// previous release from.
var errNoHistory = errors.New("no git history")

// withoutHistory reports whether this checkout is a shallow clone or no
// git checkout at all.
func withoutHistory() bool {
	out, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output()
	return err != nil || strings.TrimSpace(string(out)) == "true"
}

// previousBuildTime is how long previousBinary took, for the log.
var previousBuildTime time.Duration

// TestMixedVersions: a rolling upgrade from 0.1.0, as the CHANGELOG's
// 0.2.0 "Upgrading" section tells it, over the same three real
// redis-servers. Each version answers what that section says:
//   - a 0.2.0 proxy counts at once the backends whose set record and marker
//     0.1.0 wrote, and rewrites neither;
//   - a lock taken through either version is refused through the other,
//     and compare-and-delete through the other releases it; clients of both
//     contending for the same keys never hold one at once (checkOverlaps);
//   - a backend restarted empty while both run gets its record from 0.2.0,
//     marked (":h"), which 0.1.0 cannot read: 0.1.0 counts it down, and its
//     failed greeting rewrites the backend's marker in 0.1.0's format; both
//     still take locks on the other two; a second backend restarted so
//     leaves 0.1.0 without a quorum, and 0.2.0 with one;
//   - once the last 0.1.0 proxy is gone, a 0.2.0 proxy counts all three;
//   - with fencing, 0.1.0 reads a lock 0.2.0 took as its token, a NUL byte
//     and 19 digits, and cannot release it; FENCE through one version
//     answers nil for the other's lock, and 0.2.0's tokens are larger
//     than 0.1.0's (the fenced subtest).
//
// It builds 0.1.0 before taking its place among the proxy tests, so that
// it waits on the compiler without holding a place.
func TestMixedVersions(t *testing.T) {
	proxyTests.Add(1)
	t.Cleanup(proxyTests.Done)
	t.Parallel()
	old, err := previousBinary()
	if errors.Is(err, errNoHistory) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("building v0.1.0 took %v", previousBuildTime.Round(100*time.Millisecond))
	take(t, proxySlots)
	t.Run("plain", func(t *testing.T) { mixedPlain(t, old) })
	t.Run("fenced", func(t *testing.T) { mixedFenced(t, old) })
}

// mixedMaxTTL is every proxy's max_ttl: 0.1.0's cold start waits it.
const mixedMaxTTL = 2 * time.Second

var (
	oldRecord = regexp.MustCompile(`^1:3:[0-9a-f]{16}:\d+:0:0$`)         // epoch:N:fingerprint:since:previous:previousN
	newRecord = regexp.MustCompile(`^1:3:[0-9a-f]{16}:-:h \S+,\S+,\S+$`) // epoch:N:fingerprint:slots:h members
	oldMarker = regexp.MustCompile(`^[0-9a-f]{40}:\d+$`)                 // run_id:until
	newMarker = regexp.MustCompile(`^[0-9a-f]{40}:\d+:[a-z]+$`)          // run_id:until:reason
)

func mixedPlain(t *testing.T, old string) {
	servers, list := backends(t, 3)
	args := []string{"-backends", list, "-max-ttl", mixedMaxTTL.String(), "-backend-timeout", "500ms"}
	o := startBinary(t, old, "127.0.0.1:0", listeningLine, nil, args...)
	waitForQuorum(t, o)
	stored := func(key string) []string {
		out := make([]string, len(servers))
		for i, s := range servers {
			out[i], _ = s.Client(t).Get(t.Context(), key).Result()
		}
		return out
	}
	sets, markers := stored("{lockproxy}:set"), stored("{lockproxy}:server")
	for i := range servers {
		if !oldRecord.MatchString(sets[i]) || !oldMarker.MatchString(markers[i]) {
			t.Fatalf("backend %d after 0.1.0's start: record %q, marker %q; want 0.1.0's formats", i, sets[i], markers[i])
		}
	}

	n := startBinary(t, binary, "127.0.0.1:0", listeningLine, nil, args...)
	ncli, ocli := n.Client(t), o.Client(t)
	waitAllUp(t, ncli, 3)
	if got := stored("{lockproxy}:set"); !slices.Equal(got, sets) {
		t.Fatalf("0.2.0 rewrote the set records 0.1.0 wrote: %q, was %q", got, sets)
	}
	if got := stored("{lockproxy}:server"); !slices.Equal(got, markers) {
		t.Fatalf("0.2.0 rewrote the markers 0.1.0 wrote: %q, was %q", got, markers)
	}
	for _, c := range []struct {
		name         string
		taker, other *redis.Client
	}{{"0.1.0 then 0.2.0", ocli, ncli}, {"0.2.0 then 0.1.0", ncli, ocli}} {
		key := "mixed:" + c.name
		steps := []struct{ got, want string }{
			{do(t, c.taker, "SET", key, "a", "NX", "PX", 1500), "OK"},
			{do(t, c.other, "SET", key, "b", "NX", "PX", 1500), "nil"},
			{do(t, c.other, "GET", key), "a"},
			{do(t, c.other, "EVAL", compareAndDelete, 1, key, "a"), "1"},
			{do(t, c.taker, "SET", key, "c", "NX", "PX", 1500), "OK"},
		}
		for i, s := range steps {
			if s.got != s.want {
				t.Fatalf("%s, step %d (take, refuse, read, release by the other, take again): %q, want %q", c.name, i, s.got, s.want)
			}
		}
	}

	// Clients 0 and 1 use 0.1.0, 2 and 3 0.2.0, over the same two keys.
	h := newHistory()
	contend := func(ids ...int) (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for _, id := range ids {
			addr := o.Addr
			if id >= 2 {
				addr = n.Addr
			}
			wg.Go(func() { mixedClient(ctx, h, id, addr) })
		}
		return func() { cancel(); wg.Wait() }
	}
	granted := func(from time.Duration, ids ...int) func() string {
		return func() string {
			ops, _ := h.snapshot()
			for _, id := range ids {
				if !slices.ContainsFunc(ops, func(o op) bool {
					return o.Client == id && o.Kind == opAcquire && o.Outcome == outOK && o.Call >= from
				}) {
					return fmt.Sprintf("client %d has no grant since %v", id, from)
				}
			}
			return ""
		}
	}
	stop := contend(0, 1, 2, 3)
	redistest.Eventually(t, granted(0, 0, 1, 2, 3))
	awaitGrants(t, h, 0, 40)
	stop()

	// Backend 2 restarts empty while only 0.2.0 is busy: it redials every
	// second and records its set there before 0.1.0, which redials on a
	// request, greets it.
	servers[2].Restart()
	restart := h.now()
	stopNew := contend(2, 3)
	redistest.Eventually(t, func() string {
		if got := stored("{lockproxy}:set")[2]; !newRecord.MatchString(got) {
			return fmt.Sprintf("restarted backend 2 records %q, want 0.2.0's marked record", got)
		}
		return ""
	})
	if got := stored("{lockproxy}:server")[2]; !newMarker.MatchString(got) {
		t.Fatalf("restarted backend 2's marker %q, want 0.2.0's format", got)
	}
	stopOld := contend(0, 1)
	redistest.Eventually(t, granted(restart, 0, 1, 2, 3))
	redistest.Eventually(t, func() string {
		if got := stored("{lockproxy}:server")[2]; !oldMarker.MatchString(got) {
			return fmt.Sprintf("backend 2's marker %q: 0.1.0 has not greeted it", got)
		}
		return ""
	})
	if st := backendState(t, ocli, 2); st["state"] != "down" {
		t.Errorf("0.1.0 counts backend 2, whose record 0.2.0 wrote: %v", st)
	}
	if got := stored("{lockproxy}:set")[2]; !newRecord.MatchString(got) {
		t.Errorf("backend 2's record %q after 0.1.0 greeted it, want 0.2.0's", got)
	}
	awaitGrants(t, h, restart, 40)
	stopOld()
	stopNew()

	// A second backend restarted so leaves 0.1.0 one of three: NOQUORUM,
	// while 0.2.0 counts the two it marked.
	servers[1].Restart()
	redistest.Eventually(t, func() string {
		if got := stored("{lockproxy}:set")[1]; !newRecord.MatchString(got) {
			return fmt.Sprintf("restarted backend 1 records %q, want 0.2.0's marked record", got)
		}
		return ""
	})
	if got := do(t, ocli, "SET", "mixed:second", "a", "NX", "PX", 1500); !strings.HasPrefix(got, "ERR:NOQUORUM") {
		t.Errorf("0.1.0 with two of three backends recorded by 0.2.0: %q, want NOQUORUM", got)
	}
	redistest.Eventually(t, func() string {
		if got := do(t, ncli, "SET", "mixed:second", "b", "NX", "PX", 1500); got != "OK" {
			return "0.2.0 does not take a lock after the second restart: " + got
		}
		return ""
	})

	// The last 0.1.0 proxy leaves; another 0.2.0 one counts all three,
	// records of both versions, 0.1.0's marker on backend 2 and 0.2.0's on
	// backend 1.
	o.Kill()
	waitAllUp(t, startBinary(t, binary, "127.0.0.1:0", listeningLine, nil, args...).Client(t), 3)

	ops, _ := h.snapshot()
	if found := checkOverlaps(holdings(ops)); len(found) > 0 {
		t.Errorf("%d overlapping holdings between 0.1.0's and 0.2.0's clients:", len(found))
		for _, x := range found[:min(len(found), 10)] {
			t.Error(x)
		}
	}
	counts := map[string]int{}
	for _, x := range ops {
		if x.Kind == opAcquire {
			counts[fmt.Sprintf("v0.%d.0 %v", 1+x.Client/2, []string{"granted", "held", "error", "unknown"}[x.Outcome])]++
		}
	}
	t.Logf("acquisitions: %v", counts)
}

// mixedClient takes one of two keys through the proxy at addr, holds it
// for up to 20 ms and releases it with compare-and-delete, recording each
// operation in h, until ctx ends.
func mixedClient(ctx context.Context, h *history, id int, addr string) {
	cli := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: 2 * time.Second})
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(id), 38))
	const ttl = 500 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		key, token := fmt.Sprintf("mixed:%d", rng.IntN(2)), fmt.Sprintf("c%d-%d", id, i)
		acquire := h.call(id, key, token, opAcquire, ttl)
		reply, err := cli.Do(ctx, "SET", key, token, "NX", "PX", ttl.Milliseconds()).Result()
		if h.done(acquire, reply, err) != outOK {
			wait(ctx, time.Duration(5+rng.IntN(10))*time.Millisecond)
			continue
		}
		wait(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
		release := h.call(id, key, token, opRelease, 0)
		reply, err = cli.Eval(context.WithoutCancel(ctx), compareAndDelete, []string{key}, token).Result()
		h.done(release, reply, err)
	}
}

// mixedFenced: with fencing, the two versions keep a lock's token in
// different places (0.1.0 in a key of its own, 0.2.0 in the lock's value),
// so neither can mix with the other, though neither grants a lock the other
// holds: the CHANGELOG tells fenced deployments to replace every proxy at
// once.
func mixedFenced(t *testing.T, old string) {
	_, list := backends(t, 3)
	args := []string{"-backends", list, "-max-ttl", mixedMaxTTL.String(), "-backend-timeout", "500ms", "-fencing"}
	o := startBinary(t, old, "127.0.0.1:0", listeningLine, nil, args...)
	waitForQuorum(t, o)
	n := startBinary(t, binary, "127.0.0.1:0", listeningLine, nil, args...)
	ocli, ncli := o.Client(t), n.Client(t)
	waitAllUp(t, ncli, 3)

	if got := do(t, ocli, "SET", "f:old", "a", "NX", "PX", 1500); got != "OK" {
		t.Fatalf("SET through 0.1.0: %q", got)
	}
	oldFence, err := ocli.Do(t.Context(), "FENCE", "f:old", "a").Int64()
	if err != nil || oldFence <= 0 {
		t.Fatalf("FENCE through 0.1.0 of its lock: %d, %v", oldFence, err)
	}
	for _, s := range []struct{ what, got, want string }{
		{"SET NX through 0.2.0", do(t, ncli, "SET", "f:old", "b", "NX", "PX", 1500), "nil"},
		{"FENCE through 0.2.0", do(t, ncli, "FENCE", "f:old", "a"), "nil"},
		{"compare-and-delete through 0.2.0", do(t, ncli, "EVAL", compareAndDelete, 1, "f:old", "a"), "1"},
	} {
		if s.got != s.want {
			t.Errorf("0.1.0's fenced lock, %s: %q, want %q", s.what, s.got, s.want)
		}
	}

	if got := do(t, ncli, "SET", "f:new", "c", "NX", "PX", 1500); got != "OK" {
		t.Fatalf("SET through 0.2.0: %q", got)
	}
	fence, err := ncli.Do(t.Context(), "FENCE", "f:new", "c").Int64()
	if err != nil || fence <= oldFence {
		t.Fatalf("FENCE through 0.2.0 of its lock taken after 0.1.0's %d: %d, %v; want a larger token", oldFence, fence, err)
	}
	for _, s := range []struct{ what, got, want string }{
		{"GET through 0.1.0", do(t, ocli, "GET", "f:new"), fmt.Sprintf("c\x00%019d", fence)},
		{"SET NX through 0.1.0", do(t, ocli, "SET", "f:new", "d", "NX", "PX", 1500), "nil"},
		{"FENCE through 0.1.0", do(t, ocli, "FENCE", "f:new", "c"), "nil"},
		{"compare-and-delete through 0.1.0", do(t, ocli, "EVAL", compareAndDelete, 1, "f:new", "c"), "0"},
		{"GET through 0.2.0 after that", do(t, ncli, "GET", "f:new"), "c"},
	} {
		if s.got != s.want {
			t.Errorf("0.2.0's fenced lock, %s: %q, want %q", s.what, s.got, s.want)
		}
	}
}
