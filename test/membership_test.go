package test

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestTwoBackendSets: proxy A counts backends {0,1,2}, proxy B {0,1,2,3,4},
// both at the first epoch, as two hosts configured apart would. Without
// the set record both grant the same key (B finds its quorum of 3 in
// 2, 3 and 4 while A holds 0 and 1). With it, A's records on 0, 1 and 2
// refuse B there, B writes no record of its own on 3 and 4 and answers
// NOQUORUM naming the other set, and logs why once per backend, in these
// words.
func TestTwoBackendSets(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 5)
	url := func(idx ...int) string {
		var urls []string
		for _, i := range idx {
			urls = append(urls, servers[i].URL())
		}
		return strings.Join(urls, ",")
	}
	common := []string{"-restart-quarantine=false", "-backend-timeout", "500ms"}
	a := startProxy(t, append([]string{"-backends", url(0, 1, 2)}, common...)...)
	waitForQuorum(t, a)
	b := startProxy(t, append([]string{"-backends", url(0, 1, 2, 3, 4)}, common...)...)
	b.waitLog(t, regexp.MustCompile(`backend does not count toward quorum: it records another backend set`))

	// A holds the lock on 0 and 1 only (2 holds another token for a while),
	// which is where two sets disagree.
	ctx := t.Context()
	servers[2].Client(t).Set(ctx, "job", "someone", 2*time.Second)
	if got := do(t, a.Client(t), "SET", "job", "first", "NX", "PX", 20000); got != "OK" {
		t.Fatalf("A: %q", got)
	}
	redistest.Eventually(t, func() string {
		if servers[2].Client(t).Exists(ctx, "job").Val() != 0 {
			return "backend 2 still holds the other token"
		}
		return ""
	})
	// B sees another set's records, so it records its own nowhere, not
	// even on the two backends that have none: they do not count either.
	for _, key := range []string{"job", "another"} {
		got := do(t, b.Client(t), "SET", key, "second", "NX", "PX", 20000)
		for _, want := range []string{"ERR:NOQUORUM 0 of 5 backends count (5 answered, ", "3 other set", "2 unrecorded", "); 3 needed"} {
			if !strings.Contains(got, want) {
				t.Fatalf("B, SET %s: %q, want it to say %q", key, got, want)
			}
		}
	}
	for _, s := range servers[3:] {
		if rec := s.Client(t).Get(ctx, "{lockproxy}:set").Val(); rec != "" {
			t.Errorf("B recorded %q on a backend that had no record", rec)
		}
	}
	if got := do(t, a.Client(t), "GET", "job"); got != "first" {
		t.Fatalf("A's lock: %q", got)
	}

	// At B's start, one line names the three.
	want := fmt.Sprintf(`level=ERROR msg="backend does not count toward quorum: it records another backend set than this proxy's; every proxy must list the same backends with the same backend_set_epoch, and a change of backends is adopted (lockproxy adopt; docs/backends.md: Changing the backend set)" backends=%s,%s,%s recorded="1:3:`,
		servers[0].Addr(), servers[1].Addr(), servers[2].Addr())
	if n, all := strings.Count(b.Log(), want), strings.Count(b.Log(), "it records another backend set than this proxy's"); n != 1 || all != 1 {
		t.Errorf("%d log lines with\n%s\nand %d about another set, want 1 and 1, in\n%s", n, want, all, b.Log())
	}
	infoA, infoB := redisCLI(t, a.Addr, "INFO", "backends"), redisCLI(t, b.Addr, "INFO", "backends")
	setA := regexp.MustCompile(`backend_set:1:3:[0-9a-f]{16}\r?\n`).FindString(infoA)
	setB := regexp.MustCompile(`backend_set:1:5:[0-9a-f]{16}\r?\n`).FindString(infoB)
	if setA == "" || setB == "" {
		t.Fatalf("INFO backends does not name each proxy's set:\n%s\n%s", infoA, infoB)
	}
	if !strings.Contains(infoB, "backends_other_set:3") {
		t.Errorf("B's INFO backends does not count 3 backends of another set:\n%s", infoB)
	}
}

// url lists backends idx of f as a -backends value.
func (f *faultNet) url(idx ...int) string {
	urls := make([]string, len(idx))
	for j, i := range idx {
		urls[j] = "redis://" + f.Addr(i)
	}
	return strings.Join(urls, ",")
}

// changeSet is the safety run over a change of the backend set, made as
// docs/backends.md's procedure says: both proxies run the old set at epoch 1;
// lockproxy adopt writes the new set at epoch 2, proxy 1 is restarted with
// it and runs beside proxy 0 (old set, refused from then on) for a while,
// then proxy 0 is restarted with the new set too.
// Throughout, connections to one old member after another are dropped and
// restored, so that the old set's locks are held on bare quorums of it,
// which is where a quorum of the new set could miss them.
func changeSet(oldSet, newSet []int) []phase {
	churn := func(ctx context.Context, e *safetyEnv, d time.Duration) {
		end := time.Now().Add(d)
		for i := 0; ctx.Err() == nil && time.Now().Before(end); i++ {
			b := oldSet[i%len(oldSet)]
			e.drop(b)
			wait(ctx, 300*time.Millisecond)
			e.restore(b)
			wait(ctx, 200*time.Millisecond)
		}
	}
	restartWith := func(e *safetyEnv, p int, set []int, epoch int) {
		e.args = append([]string{"-backends", e.net.url(set...), "-backend-set-epoch", fmt.Sprint(epoch)}, e.args[2:]...)
		e.crashProxy(p)
		e.restartProxy(p)
	}
	adopt := func(ctx context.Context, e *safetyEnv, set []int, epoch int) {
		args := append([]string{"-backends", e.net.url(set...), "-backend-set-epoch", fmt.Sprint(epoch)}, e.args[2:]...)
		// Every backend must answer: the churn of the phase before may have
		// left one dropped a moment.
		for ctx.Err() == nil {
			out, err := runAdopt(args...)
			if err == nil {
				e.h.addFault(e.h.phase(), "lockproxy adopt: epoch "+fmt.Sprint(epoch))
				return
			}
			e.t.Logf("adopt: %v\n%s", err, out)
			wait(ctx, 100*time.Millisecond)
		}
	}
	return []phase{
		{"old set", func(ctx context.Context, e *safetyEnv, d time.Duration) { churn(ctx, e, d) }},
		{"proxy 1 on the new set, proxy 0 on the old", func(ctx context.Context, e *safetyEnv, d time.Duration) {
			adopt(ctx, e, newSet, 2)
			restartWith(e, 1, newSet, 2)
			churn(ctx, e, d)
		}},
		{"both on the new set", func(ctx context.Context, e *safetyEnv, d time.Duration) {
			restartWith(e, 0, newSet, 2)
			churn(ctx, e, d)
		}},
	}
}

// runChangeSet runs changeSet over 5 backends, the proxies starting on
// oldSet, and checks the history; it returns the verdict.
func runChangeSet(t *testing.T, oldSet, newSet []int, during func(ctx context.Context, e *safetyEnv)) verdict {
	t.Helper()
	return runChangeSetWith(t, "", oldSet, newSet, during)
}

// runChangeSetWith is runChangeSet with the lockproxy binary bin ("": the
// one TestMain built).
func runChangeSetWith(t *testing.T, bin string, oldSet, newSet []int, during func(ctx context.Context, e *safetyEnv)) verdict {
	t.Helper()
	schedule := changeSet(oldSet, newSet)
	run := runSafetyOn(t, safetySetup{binary: bin, backends: oldSet, during: during}, schedule, max(*safetyDuration/3, 18*time.Second))
	ops, faults := run.h.snapshot()
	report(t, ops, faults)
	v := check(t, ops, run.res.snapshot())
	if v.acquired == 0 {
		t.Fatal("no acquisition succeeded: the run proves nothing")
	}
	granted := map[string]int{}
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			granted[o.Phase]++
		}
	}
	for _, ph := range schedule {
		if granted[ph.name] == 0 {
			t.Errorf("phase %q: no acquisition succeeded", ph.name)
		}
	}
	return v
}

// TestSafetyGrowThreeToFive: the safety workload while the set grows from
// backends {0,1,2} to {0,1,2,3,4}: zero overlaps.
func TestSafetyGrowThreeToFive(t *testing.T) {
	heavyTest(t)
	if v := runChangeSet(t, []int{0, 1, 2}, []int{0, 1, 2, 3, 4}, nil); v.violations > 0 {
		t.Fatalf("%d safety violations", v.violations)
	}
}

// TestSafetyReplaceOne: the safety workload while backend 2 of {0,1,2} is
// replaced by backend 3: zero overlaps.
func TestSafetyReplaceOne(t *testing.T) {
	heavyTest(t)
	if v := runChangeSet(t, []int{0, 1, 2}, []int{0, 1, 3}, nil); v.violations > 0 {
		t.Fatalf("%d safety violations", v.violations)
	}
}

// TestSafetyChangeSetNegativeControl: the same growth with a lockproxy
// built to count every backend whatever set it records (the negative
// controls' build, with its brokenSet hook), which is what proxies did before the records
// existed: each counted its own list. The checker must find the overlaps
// the two sets cause, or the runs above prove nothing.
func TestSafetyChangeSetNegativeControl(t *testing.T) {
	heavyTest(t, brokenSetBinary)
	bin, err := brokenSetBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The workload's clients meet on a free key by chance, and a loaded
	// machine once gave them no meeting across the two sets in a run. Two
	// more clients, one per proxy, ask for a fresh key at the same moment,
	// round after round: with the proxies on two sets and nothing checking
	// them, each wins a quorum of its own set about a third of the time.
	race := func(ctx context.Context, e *safetyEnv) {
		clis := []*redis.Client{safetyClient(e.proxies[0].Addr), safetyClient(e.proxies[1].Addr)}
		for _, cli := range clis {
			defer cli.Close()
		}
		for n := 0; ctx.Err() == nil; n++ {
			key := fmt.Sprintf("safety:race:%d", n)
			var both sync.WaitGroup
			for i, cli := range clis {
				both.Go(func() { tryAcquire(ctx, e.h, cli, *safetyClients+i, key, fmt.Sprintf("r%d-%d", i, n), lockTTL) })
			}
			both.Wait()
			wait(ctx, 20*time.Millisecond)
		}
	}
	v := runChangeSetWith(t, bin, []int{0, 1, 2}, []int{0, 1, 2, 3, 4}, race)
	if v.violations == 0 {
		t.Fatal("the checker found no overlap with the set check broken: it cannot be trusted")
	}
	t.Logf("negative control: with the set check broken, the checker found %d violations, as it must", v.violations)
}

// runSafetyOn starts the 5 backends behind the fault network, two proxies
// as setup says, the clients, setup.during until the schedule ends, and
// the nemesis over the schedule.
func runSafetyOn(t *testing.T, setup safetySetup, schedule []phase, total time.Duration) *safetyRun {
	t.Helper()
	backends := redistest.StartN(t, safetyBackends)
	upstreams := make([]string, len(backends))
	idx := setup.backends
	for i, b := range backends {
		upstreams[i] = b.Addr()
		if setup.backends == nil {
			idx = append(idx, i)
		}
	}
	fnet := newFaultNet(t, upstreams)
	// Fencing on: the checkers check every grant's token (checkFences).
	args := append([]string{"-backends", fnet.url(idx...), "-max-ttl", cmp.Or(setup.maxTTL, maxTTL).String(), "-backend-timeout", "100ms", "-fencing"}, setup.flags...)
	if setup.initialised {
		initBackends(t, backends, args...)
	}
	e := &safetyEnv{t: t, h: newHistory(), backends: backends, net: fnet, binary: cmp.Or(setup.binary, binary), args: args}
	e.proxies = []*proxyProcess{
		startBinary(t, e.binary, "127.0.0.1:0", listeningLine, nil, args...),
		startBinary(t, e.binary, "127.0.0.1:0", listeningLine, nil, args...),
	}
	for _, p := range e.proxies {
		waitForQuorum(t, p)
	}

	run := &safetyRun{h: e.h, res: newResourceLog(e.h), keys: *safetyKeys, plan: setup.plan}
	ctx, cancel := context.WithCancel(t.Context())
	var clients sync.WaitGroup
	for c := range *safetyClients {
		// Each client stays with its proxy's address, across a restart of it.
		addr := e.proxies[c%len(e.proxies)].Addr
		clients.Go(func() { runClient(ctx, c, addr, run) })
	}
	if setup.during != nil {
		clients.Go(func() { setup.during(ctx, e) })
	}
	per := total / time.Duration(len(schedule))
	for _, ph := range schedule {
		e.h.addFault(ph.name, "phase starts")
		ph.run(t.Context(), e, per)
	}
	cancel()
	clients.Wait()
	return run
}
