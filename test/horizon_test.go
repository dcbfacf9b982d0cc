package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The acceptance of issue 37 through the binary, on real redis-servers: a
// backend restarted empty waits as long as the leases it may have lost,
// which the other backends' lease horizons ({lockproxy}:horizon) bound,
// not max_ttl. Both tests run with restart quarantine on, over backends
// left as lockproxy init leaves them (initBackends).

// horizonBackendTimeout is the harness's backend timeout for a loaded CI
// box (newCluster's); the settle delay grows with it.
const horizonBackendTimeout = 500 * time.Millisecond

// backendState returns backend i's fields in INFO backends of the proxy
// that cli talks to; nil when the proxy did not answer.
func backendState(t *testing.T, cli *redis.Client, i int) map[string]string {
	t.Helper()
	info, err := cli.Info(t.Context(), "backends").Result()
	if err != nil {
		return nil
	}
	return backendFields(info, i)
}

// waitAllUp waits until the proxy counts each of its n backends.
func waitAllUp(t *testing.T, cli *redis.Client, n int) {
	t.Helper()
	redistest.Eventually(t, func() string {
		for i := range n {
			if st := backendState(t, cli, i); st["state"] != "up" {
				return fmt.Sprintf("backend %d is %v", i, st)
			}
		}
		return ""
	})
}

// latestHorizon is the latest lease horizon (ms, the servers' clock: this
// machine's) that servers record; 0 when none does.
func latestHorizon(t *testing.T, servers []*redistest.Server) int64 {
	t.Helper()
	var latest int64
	for _, s := range servers {
		h, err := s.Client(t).Get(t.Context(), "{lockproxy}:horizon").Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		latest = max(latest, h)
	}
	return latest
}

// TestHorizonRestartAfterShortLocks: with default settings (max_ttl
// among them) and only 2 s locks taken, a backend restarted empty counts
// again about 2 s later, not max_ttl later, and never before the horizon
// that the others recorded when it restarted.
func TestHorizonRestartAfterShortLocks(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	args := []string{"-backends", list, "-backend-timeout", horizonBackendTimeout.String()}
	initBackends(t, servers, args...)
	p := startProxy(t, args...)
	cli := p.Client(t)
	waitAllUp(t, cli, 3)
	const lease = 2 * time.Second
	for i := range 5 {
		if got := do(t, cli, "SET", fmt.Sprint("horizon:short:", i), "t", "NX", "PX", lease.Milliseconds()); got != "OK" {
			t.Fatalf("SET NX PX 2000: %s", got)
		}
	}
	horizon := latestHorizon(t, servers[1:])
	if horizon == 0 {
		t.Fatal("the backends record no horizon for the locks just taken")
	}

	restarted := time.Now()
	servers[0].Restart()
	// Until the proxy sees the new process, INFO still shows the old one
	// up. An empty data set carries no marker: the wait is "unmarked".
	redistest.Eventually(t, func() string {
		if st := backendState(t, cli, 0); st["state"] != "quarantined" {
			return fmt.Sprintf("backend 0 restarted, and INFO shows %v", st)
		}
		return ""
	})
	// The bound: the 2 s leases and their drift allowance (1% at the
	// default drift_factor, and 2 ms: 22 ms), the settle delay after the loss
	// (backend_timeout and twice its drift allowance) before a read of the
	// witnesses proves anything, the read period (1 s) in which the proxy
	// notices the restart, and 2 s of slack for a loaded machine: 5.5 s,
	// against the default max_ttl of 24 h.
	drift := func(d time.Duration) time.Duration { return d/100 + 2*time.Millisecond }
	bound := lease + drift(lease) + horizonBackendTimeout + 2*drift(horizonBackendTimeout) + time.Second + 2*time.Second
	var up time.Time
	for up.IsZero() {
		st := backendState(t, cli, 0)
		switch {
		case st["state"] == "up":
			up = time.Now()
		case time.Since(restarted) > bound+10*time.Second:
			t.Fatalf("backend 0 does not count %v after its restart: INFO shows %v", time.Since(restarted), st)
		default:
			time.Sleep(20 * time.Millisecond) // polling INFO: the count has no event to wait on
		}
	}
	took := up.Sub(restarted)
	maxTTL := regexp.MustCompile(`max_ttl=(\S+)`).FindStringSubmatch(p.Log())[1]
	t.Logf("restarted empty after only %v locks: counts again %v later (bound %v, max_ttl %s)", lease, took.Round(time.Millisecond), bound, maxTTL)
	if took > bound {
		t.Fatalf("backend 0 counted again %v after its restart, beyond %v: the horizon did not shorten its wait", took, bound)
	}
	if at := up.UnixMilli(); at < horizon {
		t.Fatalf("backend 0 counted at %d ms, before the horizon %d ms that the others recorded at its restart", at, horizon)
	}
}

// TestHorizonRestartWaitsForLongLock: while one 5-minute lock is held
// through the proxy, a backend restarted empty waits for that lock's
// remaining lease, as INFO shows, not for max_ttl; and it does not count
// 10 s later.
func TestHorizonRestartWaitsForLongLock(t *testing.T) {
	proxyTest(t)
	servers, list := backends(t, 3)
	const maxTTL = 24 * time.Hour // the default, which admits the 5-minute lock
	args := []string{"-backends", list, "-backend-timeout", horizonBackendTimeout.String()}
	initBackends(t, servers, args...)
	p := startProxy(t, args...)
	cli := p.Client(t)
	waitAllUp(t, cli, 3)
	const lease = 5 * time.Minute
	taken := time.Now()
	if got := do(t, cli, "SET", "horizon:long", "holder", "NX", "PX", lease.Milliseconds()); got != "OK" {
		t.Fatalf("SET NX PX 300000: %s", got)
	}

	servers[0].Restart()
	// First the full wait (max_ttl), then the wait the witnesses prove.
	var left time.Duration
	redistest.Eventually(t, func() string {
		st := backendState(t, cli, 0)
		s, err := strconv.Atoi(st["quarantine_left_s"])
		if st["state"] != "quarantined" || st["wait_for"] != "horizon" || st["witnesses"] != "2/2" || err != nil || time.Duration(s)*time.Second > time.Hour {
			return fmt.Sprintf("backend 0 restarted, and INFO shows %v", st)
		}
		left = time.Duration(s) * time.Second
		return ""
	})
	// INFO rounds the seconds up; the end is the lease's plus its drift
	// allowance (3 s for 5 minutes).
	remaining := lease - time.Since(taken)
	drift := lease/100 + 2*time.Millisecond
	t.Logf("restarted empty while a %v lock has %v left: waits %v (max_ttl %v)", lease, remaining.Round(time.Second), left, maxTTL)
	if left < remaining-2*time.Second || left > remaining+drift+3*time.Second {
		t.Fatalf("backend 0 waits %v; the lock's lease has %v left", left, remaining)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if st := backendState(t, cli, 0); st["state"] == "up" {
			t.Fatalf("backend 0 counts %v after the 5-minute lock was taken: INFO shows %v", time.Since(taken), st)
		}
		time.Sleep(250 * time.Millisecond) // a stretch in which nothing may happen: watched, not awaited
	}
	if got := do(t, cli, "GET", "horizon:long"); got != "holder" {
		t.Fatalf("the 5-minute lock reads %q", got)
	}
}

// The safety run's mixed phase (issue 37): clients take short locks (200
// ms to 2 s) and a few long ones (tens of seconds, minutes in a long run,
// extended), while backends restart empty one at a time, each as soon as
// the last one counts again; restart quarantine on, a max_ttl of 10
// minutes (or twice the longest lock) that only the horizons can shorten.
//
// Each restart is the hazard a horizon must cover: two backends are cut
// off (the absent pair) until a long lock is granted on the other three
// alone (the bare quorum); then one of those three restarts empty and the
// pair comes back. The restarted backend and the pair, which never had the
// lock, are a quorum without it: the restarted one must not count while
// the long lock's lease lasts, which only the two others of the bare
// quorum record. With the horizons ignored (the negative control) it
// counts a second or two after its loss, and a client waiting for the
// long lock is granted it beside its holder.

// longLeaseMin is the shortest long lock; longLeaseMax the longest, which
// grows with -safety.duration (two minutes in the 10-minute run).
const longLeaseMin = 5 * time.Second

func longLeaseMax() time.Duration { return max(8*time.Second, *safetyDuration/5) }

// longClients are the clients that take the long locks, on longKeys keys:
// more clients than keys, so that one waits for a long lock another holds.
const longClients, longKeys = 4, 2

// newHorizonPlan returns the mixed phase's plan. A lock is a long one on
// a long key for the first longClients clients, extended halfway through
// its validity when held that long, held 3 s or more, so that in the
// negative control a second client is granted it while the first still
// holds it, and 4.6 s at most by default, so that each bare quorum sees a
// long grant soon; the first of each waits a second, by when the nemesis
// has cut its first pair off (else the first round waits for a long lock
// taken on all five to be released). A short one of 200 ms to 2 s on the
// standard keys, held as in the standard run, for the others.
func newHorizonPlan() func(id int, rng *rand.Rand) lockPlan {
	started := make([]bool, longClients) // each client reads and writes only its own
	return func(id int, rng *rand.Rand) lockPlan {
		between := func(lo, hi time.Duration) time.Duration {
			return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Truncate(time.Millisecond)
		}
		if id >= longClients {
			return varyHold(lockPlan{key: fmt.Sprintf("safety:%d", rng.IntN(*safetyKeys)), ttl: between(200*time.Millisecond, 2*time.Second)}, rng)
		}
		p := lockPlan{key: fmt.Sprintf("safety:long:%d", rng.IntN(longKeys)), ttl: between(longLeaseMin, longLeaseMax()),
			hold: between(3*time.Second, 3*time.Second+longLeaseMax()/5), extend: true}
		if !started[id] {
			started[id], p.after = true, time.Second
		}
		return p
	}
}

// Fault descriptions that the mixed phase records, which its tests count.
const (
	faultLongGranted = "a long lock granted on the bare quorum"
	faultProven      = "the horizons bound the wait"
	faultCountsAgain = "counts again"
)

// horizonRestarts is the mixed phase's nemesis, for about d. Each round
// cuts the pair that kept the last round's long lock off: the next bare
// quorum is then the backend restarted last and the pair that never had
// that lock, so that in the negative control a client is granted it there
// for as long as the round lasts, not only in the moment between the
// restarted backend counting again and the next cut.
func horizonRestarts(ctx context.Context, e *safetyEnv, d time.Duration) {
	end := time.Now().Add(d)
	cli := redis.NewClient(&redis.Options{Addr: e.proxies[0].Addr, MaxRetries: -1})
	defer cli.Close()
	r, kept, absent := 0, []int{1, 2}, []int{3, 4}
	restarted := make([]int, safetyBackends) // the round in which each last restarted
	for round := 1; ctx.Err() == nil && time.Now().Before(end); round++ {
		for _, i := range absent {
			e.drop(i)
		}
		from := e.h.now()
		if !pollUntil(ctx, end, func() bool { return e.h.grantedSince(from, longLeaseMin) }) {
			for _, i := range absent {
				e.restore(i)
			}
			return
		}
		e.record(faultLongGranted, append([]int{r}, kept...)...)
		// The pair comes back after the grant's top-ups (quorum/topup.go),
		// which copy a lock onto the backends that missed it until 128 ms
		// after the grant: else it would hold the lock, and no quorum
		// without it would remain.
		wait(ctx, 500*time.Millisecond)
		e.restart(r)
		for _, i := range absent {
			e.restore(i)
		}
		// Its wait, as the proxy shows it: max_ttl until a read of the
		// witnesses proves a shorter one, at most the longest lease
		// and its drift allowance.
		var st map[string]string
		state := func() bool {
			info, err := cli.Info(ctx, "backends").Result()
			st = backendFields(info, r)
			return err == nil && st != nil
		}
		// Until the proxy sees the new process, INFO shows the old one up.
		if !pollUntil(ctx, end, func() bool { return state() && st["state"] != "up" }) {
			return
		}
		if !pollUntil(ctx, end, func() bool {
			if !state() {
				return false
			}
			left, err := strconv.Atoi(st["quarantine_left_s"])
			proven := err == nil && time.Duration(left)*time.Second <= longLeaseMax()+2*time.Second
			return st["state"] == "up" || (st["state"] == "quarantined" && proven)
		}) {
			return
		}
		e.record(fmt.Sprintf("%s: %s, %ss left", faultProven, st["state"], st["quarantine_left_s"]), r)
		if !pollUntil(ctx, end, func() bool { return state() && st["state"] == "up" }) {
			return
		}
		e.record(faultCountsAgain, r)
		// The next to restart: of the pair that came back, the one
		// restarted longer ago.
		restarted[r] = round
		next := absent[0]
		if restarted[absent[1]] < restarted[next] {
			next = absent[1]
		}
		r, kept, absent = next, []int{r, absent[0] + absent[1] - next}, kept
	}
}

// pollUntil polls cond every 20 ms until it holds (true) or deadline
// passes or ctx ends (false).
func pollUntil(ctx context.Context, deadline time.Time, cond func() bool) bool {
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if cond() {
			return true
		}
		wait(ctx, 20*time.Millisecond)
	}
	return false
}

// grantedSince tells whether an acquisition with a TTL of at least ttl,
// called at or after from, was granted.
func (h *history) grantedSince(from, ttl time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.ops {
		if o.Kind == opAcquire && o.Outcome == outOK && o.Call >= from && o.TTL >= ttl {
			return true
		}
	}
	return false
}

// TestSafetyHorizon is the safety run's mixed phase: no overlap, a
// linearizable history, every checker clean; and the restarted backends'
// waits were bound by the horizons, not max_ttl.
func TestSafetyHorizon(t *testing.T) {
	heavyTest(t)
	v, restarts, proven, back := runHorizonSafety(t, binary, *safetyDuration/2)
	if v.violations > 0 {
		t.Fatalf("%d safety violations", v.violations)
	}
	if proven == 0 {
		t.Fatalf("%d empty restarts, and the proxy never showed a wait that the horizons bound: they wait max_ttl", restarts)
	}
	t.Logf("mixed phase: %d empty restarts, each after a long lock granted on the bare quorum; %d waits bound by the horizons; %d counted again within the run", restarts, proven, back)
}

// TestSafetyHorizonNegativeControl runs the mixed phase on the negative
// controls' build with the horizons ignored: a restarted backend counts a
// second or two after its loss, whatever long lease it may have lost, and
// the checkers must find the overlaps that causes, or the phase proves
// nothing.
func TestSafetyHorizonNegativeControl(t *testing.T) {
	heavyTest(t, ignoreHorizonBinary)
	bin, err := ignoreHorizonBinary()
	if err != nil {
		t.Fatal(err)
	}
	v, restarts, _, back := runHorizonSafety(t, bin, 10*time.Second)
	if v.overlaps == 0 {
		t.Fatalf("with the horizons ignored, %d empty restarts after long grants on the bare quorum (%d counted again) and the checker found no overlap: it cannot be trusted", restarts, back)
	}
	t.Logf("negative control: with the horizons ignored, %d empty restarts after long grants on the bare quorum gave %d overlaps (%d violations in all), as they must", restarts, v.overlaps, v.violations)
}

// runHorizonSafety runs the mixed phase for d with the lockproxy binary
// bin, checks the history, and returns the verdict with how many empty
// restarts there were (each after a long grant on the bare quorum), in how
// many the proxy showed a wait that the horizons bound (or none left), and
// how many counted again. It fails t unless a restart took place.
func runHorizonSafety(t *testing.T, bin string, d time.Duration) (v verdict, restarts, proven, back int) {
	t.Helper()
	schedule := []phase{{"mixed short and long locks, empty restarts", horizonRestarts}}
	setup := safetySetup{binary: bin, maxTTL: max(10*time.Minute, 2*longLeaseMax()), initialised: true, plan: newHorizonPlan()}
	run := runSafetyOn(t, setup, schedule, d)
	ops, faults := run.h.snapshot()
	t.Logf("mixed phase: %d clients (%d of them on long locks of %v to %v, on %d keys), 5 backends, max_ttl %v, %v",
		*safetyClients, longClients, longLeaseMin, longLeaseMax(), longKeys, setup.maxTTL, d)
	report(t, ops, faults)
	v = check(t, ops, run.res.snapshot())
	for _, f := range faults {
		switch {
		case strings.HasPrefix(f.What, "restart backends"):
			restarts++
		case strings.HasPrefix(f.What, faultProven):
			proven++
		case strings.HasPrefix(f.What, faultCountsAgain):
			back++
		}
	}
	var granted, extended int
	for _, o := range ops {
		if o.Outcome == outOK && o.TTL >= longLeaseMin {
			switch o.Kind {
			case opAcquire:
				granted++
			case opExtend:
				extended++
			}
		}
	}
	t.Logf("long locks: %d granted, %d extensions of them", granted, extended)
	// Every restart follows a long grant on the bare quorum.
	if restarts == 0 {
		t.Fatal("no long lock was granted on the bare quorum: the hazard did not take place")
	}
	if v.acquired == 0 {
		t.Fatal("no acquisition succeeded: the run proves nothing")
	}
	return v, restarts, proven, back
}
