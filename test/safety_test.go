package test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The safety run: C clients split across two proxy instances in front of the
// same 5 real redis-servers contend for K keys while a nemesis injects one
// fault phase after another. Every operation is recorded; the checkers in
// checker_test.go then prove that no two holders' validity overlapped.
var (
	safetyDuration = flag.Duration("safety.duration", 30*time.Second, "length of the safety run, all fault phases together (make test-long: 10m)")
	safetyClients  = flag.Int("safety.clients", 16, "clients in the safety run")
	safetyKeys     = flag.Int("safety.keys", 3, "keys the safety run's clients contend for")
)

const (
	safetyBackends = 5
	// lockTTL is short so that expiry, extension and quarantine all happen
	// many times within a minute; maxTTL is the quarantine of a restarted
	// backend.
	lockTTL = 600 * time.Millisecond
	maxTTL  = 2 * time.Second
)

// safetyEnv is what the nemesis acts on.
type safetyEnv struct {
	t        *testing.T
	h        *history
	backends []*redistest.Server
	net      *faultNet
	proxies  []*proxyProcess
	binary   string   // the proxies' binary
	args     []string // the proxies' flags, to restart one
}

// safetySetup is what a safety run varies besides its schedule.
type safetySetup struct {
	binary   string                                  // the lockproxy to run; "": the one TestMain built
	backends []int                                   // the proxies' backends, of the 5; nil: all
	during   func(ctx context.Context, e *safetyEnv) // runs beside the clients while the schedule does; may be nil
	flags    []string                                // the proxies' flags, besides those of every run
	maxTTL   time.Duration                           // the proxies' max_ttl; 0: maxTTL
	// initialised: the backends are left as lockproxy init leaves them
	// (initBackends) before the proxies start, so that a run with a long
	// max_ttl does not wait it out first.
	initialised bool
	plan        func(id int, rng *rand.Rand) lockPlan // what the clients take; nil: standardPlan
}

// phase is one stretch of the run with its own faults. run acts for about
// d and must undo its faults before it returns.
type phase struct {
	name string
	run  func(ctx context.Context, e *safetyEnv, d time.Duration)
}

// phases is the nemesis schedule of the main run: each fault alone, then in
// combination.
var phases = []phase{
	{"baseline", func(ctx context.Context, e *safetyEnv, d time.Duration) { wait(ctx, d) }},
	{"kill minority", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		e.kill(0, 1)
		wait(ctx, d/2)
		e.restart(0, 1) // without persistence: they come back empty
		wait(ctx, d/2)
	}},
	{"kill majority", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		e.kill(2, 3, 4)
		wait(ctx, d/3)
		e.restart(2, 3, 4)
		wait(ctx, 2*d/3)
	}},
	{"pause", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		e.pause(1)
		wait(ctx, d/3)
		e.pause(3)
		wait(ctx, d/3)
		e.resume(1, 3)
		wait(ctx, d/3)
	}},
	{"restart without persistence", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		restartHazard(ctx, e, d)
	}},
	{"latency", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		e.latency(0, 20*time.Millisecond, 20*time.Millisecond)
		e.latency(4, 40*time.Millisecond, 40*time.Millisecond)
		wait(ctx, d)
		e.clearNet(0, 4)
	}},
	{"dropped connections", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		end := time.Now().Add(d)
		for ctx.Err() == nil && time.Now().Before(end) {
			i := rand.IntN(safetyBackends)
			e.drop(i)
			wait(ctx, 300*time.Millisecond)
			e.restore(i)
			wait(ctx, 200*time.Millisecond)
		}
	}},
	{"proxy crash", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		wait(ctx, d/4)
		e.crashProxy(1)
		wait(ctx, d/4)
		e.restartProxy(1)
		wait(ctx, d/2)
	}},
	{"combined", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		e.pause(2)
		e.latency(0, 30*time.Millisecond, 30*time.Millisecond)
		e.drop(4)
		wait(ctx, d/2)
		e.resume(2)
		e.restore(4)
		e.clearNet(0)
		e.kill(1)
		wait(ctx, d/4)
		e.restart(1)
		wait(ctx, d/4)
	}},
}

// restartHazard repeats the Redlock restart hazard: with two backends down,
// locks are taken on the other three; then one of those three and the two
// down ones come back empty. Without quarantine, a second client can take
// a lock the first still holds on the two untouched backends.
func restartHazard(ctx context.Context, e *safetyEnv, d time.Duration) {
	end := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		e.kill(3, 4)
		wait(ctx, lockTTL/2)
		e.kill(2)
		e.restart(2, 3, 4)
		wait(ctx, maxTTL+lockTTL)
	}
}

// wait sleeps for d or until ctx ends: the nemesis paces itself by wall
// time, which is what it simulates.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (e *safetyEnv) record(what string, idx ...int) {
	e.h.addFault(e.h.phase(), fmt.Sprintf("%s %v", what, idx))
}

func (e *safetyEnv) kill(idx ...int) {
	e.record("kill -9 backends", idx...)
	for _, i := range idx {
		e.backends[i].Kill()
	}
}

func (e *safetyEnv) restart(idx ...int) {
	e.record("restart backends without persistence", idx...)
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(e.backends[i].Restart)
	}
	wg.Wait()
}

func (e *safetyEnv) pause(idx ...int) {
	e.record("SIGSTOP backends", idx...)
	for _, i := range idx {
		e.backends[i].Pause()
	}
}

func (e *safetyEnv) resume(idx ...int) {
	e.record("SIGCONT backends", idx...)
	for _, i := range idx {
		e.backends[i].Resume()
	}
}

func (e *safetyEnv) latency(i int, latency, jitter time.Duration) {
	e.record(fmt.Sprintf("latency %s±%s to backend", latency, jitter), i)
	e.net.Latency(i, latency, jitter)
}

func (e *safetyEnv) clearNet(idx ...int) {
	e.record("clear network faults to backends", idx...)
	for _, i := range idx {
		e.net.Clear(i)
	}
}

func (e *safetyEnv) drop(i int) {
	e.record("drop connections to backend", i)
	e.net.Drop(i)
}

func (e *safetyEnv) restore(i int) {
	e.record("restore connections to backend", i)
	e.net.Restore(i)
}

func (e *safetyEnv) crashProxy(i int) {
	e.record("kill -9 proxy", i)
	e.proxies[i].Kill()
}

func (e *safetyEnv) restartProxy(i int) {
	e.record("restart proxy", i)
	addr := e.proxies[i].Addr
	e.proxies[i] = startBinary(e.t, e.binary, addr, listeningLine, nil, e.args...)
}

// safetyRun is one run: its history and resource log when it ended, how
// many keys its clients contend for, and what each lock they take is
// (nil: standardPlan).
type safetyRun struct {
	h    *history
	res  *resourceLog
	keys int
	plan func(id int, rng *rand.Rand) lockPlan
}

// lockPlan is one lock a client takes: its key and TTL, how long it holds
// it, and whether it extends it (once, halfway through its validity); and
// how long the client waits before it asks.
type lockPlan struct {
	key              string
	ttl, hold, after time.Duration
	extend           bool
}

// standardPlan is the main run's lock: lockTTL on one of keys, held for a
// moment, past its expiry now and then (the next holder's token must stop
// its writes), or extended.
func standardPlan(keys int, rng *rand.Rand) lockPlan {
	return varyHold(lockPlan{key: fmt.Sprintf("safety:%d", rng.IntN(keys)), ttl: lockTTL}, rng)
}

// varyHold gives p the standard run's holds, by its TTL: up to a third of
// it mostly, 3 in 20 past its expiry, 5 in 20 extended halfway.
func varyHold(p lockPlan, rng *rand.Rand) lockPlan {
	p.hold = time.Duration(rng.Int64N(int64(p.ttl / 3)))
	switch r := rng.IntN(20); {
	case r < 3:
		p.hold = p.ttl * 3 / 2
	case r < 8:
		p.hold, p.extend = p.ttl, true
	}
	return p
}

// runSafety runs the schedule with the proxies on all 5 backends.
func runSafety(t *testing.T, schedule []phase, total time.Duration, extra ...string) *safetyRun {
	t.Helper()
	return runSafetyOn(t, safetySetup{flags: extra}, schedule, total)
}

// waitForQuorum waits until the proxy takes locks: fresh backends are in
// restart quarantine for max_ttl.
func waitForQuorum(t *testing.T, p *proxyProcess) {
	t.Helper()
	cli := p.Client(t)
	redistest.Eventually(t, func() string {
		token := fmt.Sprint(time.Now().UnixNano())
		if got := do(t, cli, "SET", "safety:probe", token, "NX", "PX", 100); got != "OK" && got != "nil" {
			return "the proxy does not take locks yet: " + got
		}
		return ""
	})
}

// runClient loops until ctx ends: acquire a random key with a fresh token,
// hold it for a random time (sometimes past its TTL), writing to the
// protected resource with the lock's fencing token until the resource
// refuses it, sometimes extend, then release. It does not stop writing at
// its own deadline: the resource's fencing has to.
func runClient(ctx context.Context, id int, addr string, run *safetyRun) {
	cli := safetyClient(addr)
	defer cli.Close()
	h := run.h
	rng := rand.New(rand.NewPCG(uint64(id), 42))
	plan := run.plan
	if plan == nil {
		plan = func(_ int, rng *rand.Rand) lockPlan { return standardPlan(run.keys, rng) }
	}
	for n := 0; ctx.Err() == nil; n++ {
		p := plan(id, rng)
		key, ttl := p.key, p.ttl
		wait(ctx, p.after)
		token := fmt.Sprintf("c%d-%d", id, n)
		acquire := tryAcquire(ctx, h, cli, id, key, token, ttl)
		if acquire.Outcome != outOK {
			// Back off as lock libraries do, so that the figures show the
			// system, not a retry storm.
			wait(ctx, time.Duration(10+rng.IntN(40))*time.Millisecond)
			continue
		}
		deadline := acquire.Call + ttl - driftOf(ttl)
		hold, extend := p.hold, p.extend
		holding := true
		for until := h.now() + hold; holding && h.now() < until && ctx.Err() == nil; {
			holding = run.res.write(key, token, acquire.Fence)
			if now := h.now(); extend && holding && now > deadline-ttl/2 && now < deadline {
				extend = false
				ext := h.call(id, key, token, opExtend, ttl)
				reply, err := cli.Do(ctx, "SET", key, token, "IFEQ", token, "PX", ttl.Milliseconds()).Result()
				if h.done(ext, reply, err) == outOK {
					deadline = max(deadline, ext.Call+ttl-driftOf(ttl))
				} else {
					holding = false // a failed extension is rolled back: the lock is gone
				}
			}
			wait(ctx, 10*time.Millisecond)
		}
		release := h.call(id, key, token, opRelease, 0)
		reply, err := cli.Eval(context.WithoutCancel(ctx), compareAndDelete, []string{key}, token).Result()
		h.done(release, reply, err)
	}
}

// safetyClient is a safety run's client of the proxy at addr: one
// connection, no retries (a retry would hide what the proxy answered), and
// LOCK.ACQUIRE answering the lock's fencing token, which checkFences checks.
func safetyClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Do(ctx, "CLIENT", "FENCING", "ON").Err() },
	})
}

// tryAcquire asks cli for key with token for ttl, records it in h as
// client id's, and returns the record.
func tryAcquire(ctx context.Context, h *history, cli *redis.Client, id int, key, token string, ttl time.Duration) *op {
	acquire := h.call(id, key, token, opAcquire, ttl)
	reply, err := cli.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", ttl.Milliseconds()).Result()
	if fence, ok := reply.(int64); ok && err == nil {
		acquire.Fence, reply = fence, "OK"
	}
	h.done(acquire, reply, err)
	return acquire
}

// call starts recording an operation.
func (h *history) call(client int, key, token string, kind opKind, ttl time.Duration) *op {
	return &op{Client: client, Key: key, Token: token, Kind: kind, TTL: ttl, Call: h.now(), Phase: h.phase()}
}

// done records the reply to o and returns its outcome.
func (h *history) done(o *op, reply any, err error) outcome {
	o.Return = h.now()
	var rerr redis.Error
	switch {
	case err == nil && (reply == "OK" || reply == int64(1)):
		o.Outcome = outOK
	case errors.Is(err, redis.Nil), err == nil:
		o.Outcome = outHeld
	case errors.As(err, &rerr), errors.Is(err, syscall.ECONNREFUSED):
		o.Outcome = outError // an error reply, or never sent: not done
	default:
		o.Outcome = outUnknown
	}
	h.add(*o)
	return o.Outcome
}

// phase is the nemesis phase in force now.
func (h *history) phase() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.faults) == 0 {
		return "setup"
	}
	return h.faults[len(h.faults)-1].Phase
}

// TestSafety is the safety run: every fault phase, then the checkers.
// Select a longer run with -safety.duration=10m (and a -timeout above it).
func TestSafety(t *testing.T) {
	heavyTest(t)
	run := runSafety(t, phases, *safetyDuration)
	ops, faults := run.h.snapshot()
	t.Logf("safety run: %d clients over 2 proxies, 5 backends, %d keys, TTL %s, max_ttl %s, %s",
		*safetyClients, *safetyKeys, lockTTL, maxTTL, *safetyDuration)
	report(t, ops, faults)
	verdict := check(t, ops, run.res.snapshot())
	if verdict.violations > 0 {
		t.Fatalf("%d safety violations", verdict.violations)
	}
	if verdict.acquired == 0 {
		t.Fatal("no acquisition succeeded: the run proves nothing")
	}
}

// TestSafetyNegativeControl repeats the restart hazard with quarantine
// turned off: the checker must find the overlap it causes, or it proves
// nothing.
// It runs alone (no heavyTest): beside other tests, its clients once
// came too slowly to meet in the hazard's window, and it found nothing.
func TestSafetyNegativeControl(t *testing.T) {
	hazard := []phase{{"restart without persistence, no quarantine", func(ctx context.Context, e *safetyEnv, d time.Duration) {
		restartHazard(ctx, e, d)
	}}}
	run := runSafety(t, hazard, max(*safetyDuration/4, 15*time.Second), "-restart-quarantine=false")
	ops, faults := run.h.snapshot()
	report(t, ops, faults)
	verdict := check(t, ops, run.res.snapshot())
	if verdict.violations == 0 {
		t.Fatal("the checker found no violation of the known restart hazard: it cannot be trusted")
	}
	t.Logf("negative control: the checker caught the restart hazard (%d violations), as it must", verdict.violations)
}

// TestSafetyBrokenFenceNegativeControl: the checkers must catch fencing
// tokens that go back, on the binary. Backend 0's fencing counter is put an
// hour ahead of the others', then backend 0 is killed. lockproxy carries
// the largest token minted to a quorum, so its tokens stay above the hour
// once backend 0 is gone: no violation. The negative controls' build with
// its brokenFence hook (quorum/hooks.go) takes the token of the lowest-numbered backend
// that granted and writes nothing back: every grant after the kill gets a
// token an hour below those granted on backend 0 before it, so checkFences
// and the fenced resource must both report it, or they prove nothing.
func TestSafetyBrokenFenceNegativeControl(t *testing.T) {
	heavyTest(t, brokenFenceBinary)
	t.Run("lockproxy", func(t *testing.T) {
		if v := runFenceDrift(t, binary); v.violations > 0 {
			t.Fatalf("%d safety violations", v.violations)
		}
	})
	t.Run("broken fencing", func(t *testing.T) {
		broken, err := brokenFenceBinary()
		if err != nil {
			t.Fatal(err)
		}
		v := runFenceDrift(t, broken)
		if v.fences == 0 || v.resource == 0 {
			t.Fatalf("with tokens that go back, checkFences found %d violations and the resource checks %d: they cannot be trusted", v.fences, v.resource)
		}
		t.Logf("negative control: with tokens that go back, checkFences found %d violations and the resource checks %d, as they must", v.fences, v.resource)
	})
}

// runFenceDrift is the run of TestSafetyBrokenFenceNegativeControl with
// the lockproxy binary bin; it fails t unless the scenario took place, and
// returns the verdict.
func runFenceDrift(t *testing.T, bin string) verdict {
	t.Helper()
	var ahead int64 // what backend 0's counter was set to
	schedule := []phase{
		{"backend 0's fencing counter an hour ahead", func(ctx context.Context, e *safetyEnv, d time.Duration) {
			ahead = time.Now().Add(time.Hour).UnixMicro()
			e.record(fmt.Sprintf("SET %s %d on backend", fenceCounterKey, ahead), 0)
			if err := e.backends[0].Client(e.t).Set(ctx, fenceCounterKey, ahead, 0).Err(); err != nil {
				e.t.Errorf("setting backend 0's fencing counter: %v", err)
			}
			wait(ctx, d)
		}},
		{"backend 0 killed", func(ctx context.Context, e *safetyEnv, d time.Duration) {
			e.kill(0)
			wait(ctx, d)
		}},
	}
	run := runSafetyOn(t, safetySetup{binary: bin}, schedule, 8*time.Second)
	ops, faults := run.h.snapshot()
	report(t, ops, faults)
	v := check(t, ops, run.res.snapshot())
	// A token minted from backend 0's counter was granted before the kill,
	// and locks were granted after it.
	var aheadBefore, after int
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			switch {
			case o.Phase == schedule[1].name:
				after++
			case o.Phase == schedule[0].name && o.Fence > ahead:
				aheadBefore++
			}
		}
	}
	if aheadBefore == 0 || after == 0 {
		t.Fatalf("%d grants with a token from backend 0's counter before the kill, %d grants after it: the scenario did not happen", aheadBefore, after)
	}
	return v
}

// fenceCounterKey is where a backend keeps its fencing counter
// (quorum/fence.go).
const fenceCounterKey = "{lockproxy}:fence"

// verdict is what the checkers found: violations counts them all,
// overlaps, fences and resource those of checkOverlaps, checkFences and of
// the resource checks.
type verdict struct{ acquired, violations, overlaps, fences, resource int }

// check runs the checkers and logs what each found.
func check(t *testing.T, ops []op, log map[string][]resourceEntry) verdict {
	t.Helper()
	var v verdict
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			v.acquired++
		}
	}
	overlaps := checkOverlaps(holdings(ops))
	logFound(t, "overlaps", overlaps)
	reportResource(t, log, ops)
	interleavings := checkResource(log)
	logFound(t, "protected resource interleavings", interleavings)
	fenced := checkFencedWrites(log, ops)
	logFound(t, "protected resource writes fenced wrongly", fenced)
	fences := checkFences(ops)
	logFound(t, "fencing tokens not above an earlier grant's", fences)
	result, info := checkLinearizable(ops, time.Minute)
	t.Logf("linearizability (porcupine, lease-register model): %v", result)
	for _, line := range describeLinearization(ops, result, info) {
		t.Logf("  %s", line)
	}
	v.overlaps, v.fences, v.resource = len(overlaps), len(fences), len(interleavings)+len(fenced)
	v.violations = v.overlaps + v.resource + v.fences
	if result == porcupine.Illegal {
		v.violations++
	}
	return v
}

// logFound logs how many a checker found, and the first five.
func logFound[T any](t *testing.T, what string, found []T) {
	t.Helper()
	t.Logf("%s: %d", what, len(found))
	for i, f := range found {
		if i == 5 {
			t.Logf("  ... and %d more", len(found)-5)
			break
		}
		t.Logf("  %v", f)
	}
}

// report prints, per fault phase, what the clients attempted and got.
func report(t *testing.T, ops []op, faults []fault) {
	t.Helper()
	var order []string
	byPhase := map[string][]op{}
	for _, o := range ops {
		if o.Kind != opAcquire {
			continue
		}
		if _, ok := byPhase[o.Phase]; !ok {
			order = append(order, o.Phase)
		}
		byPhase[o.Phase] = append(byPhase[o.Phase], o)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %9s %8s %8s %8s %8s %9s %9s\n", "phase", "attempted", "ok", "held", "error", "unknown", "p50", "p99")
	for _, name := range order {
		acq := byPhase[name]
		var n [4]int
		lat := make([]time.Duration, 0, len(acq))
		for _, o := range acq {
			n[o.Outcome]++
			lat = append(lat, o.Return-o.Call)
		}
		slices.Sort(lat)
		pct := func(k int) string { return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(len(acq))) }
		fmt.Fprintf(&b, "%-44s %9d %8s %8s %8s %8s %9s %9s\n", name, len(acq),
			pct(n[outOK]), pct(n[outHeld]), pct(n[outError]), pct(n[outUnknown]),
			percentile(lat, 0.50), percentile(lat, 0.99))
	}
	t.Logf("acquisitions per fault phase:\n%s", b.String())
	var fb strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&fb, "  %8.3fs  %-44s %s\n", f.At.Seconds(), f.Phase, f.What)
	}
	t.Logf("nemesis schedule:\n%s", fb.String())
}

// reportResource prints, per phase, how many writes the protected
// resource accepted and refused, and how many of them came after the
// writer's holding (holdings) had ended: a run in which it never refused
// a late write did not test its fencing.
func reportResource(t *testing.T, log map[string][]resourceEntry, ops []op) {
	t.Helper()
	type counts struct {
		first                                  time.Duration
		accepted, refused, lateOK, lateRefused int
	}
	held := map[[2]string]holding{}
	for key, hs := range holdings(ops) {
		for _, h := range hs {
			held[[2]string{key, h.Token}] = h
		}
	}
	byPhase := map[string]*counts{}
	var total counts
	for key, entries := range log {
		for _, e := range entries {
			c := byPhase[e.Phase]
			if c == nil {
				c = &counts{first: e.At}
				byPhase[e.Phase] = c
			}
			c.first = min(c.first, e.At)
			late := e.At >= held[[2]string{key, e.Token}].End
			for _, c := range []*counts{c, &total} {
				switch {
				case e.Refused && late:
					c.lateRefused++
					fallthrough
				case e.Refused:
					c.refused++
				case late:
					c.lateOK++
					fallthrough
				default:
					c.accepted++
				}
			}
		}
	}
	order := slices.SortedFunc(maps.Keys(byPhase), func(a, b string) int { return cmp.Compare(byPhase[a].first, byPhase[b].first) })
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %9s %8s %14s %14s\n", "phase", "accepted", "refused", "late accepted", "late refused")
	for _, name := range order {
		c := byPhase[name]
		fmt.Fprintf(&b, "%-44s %9d %8d %14d %14d\n", name, c.accepted, c.refused, c.lateOK, c.lateRefused)
	}
	t.Logf("protected resource, fenced by token: %d writes accepted, %d refused (late: made after the writer's holding ended):\n%s",
		total.accepted, total.refused, b.String())
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Round(100 * time.Microsecond)
}
