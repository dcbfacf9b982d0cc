package quorum

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/admit"
)

// TestLuaAgreesWithAdmit: what runs on the backends does what the model
// checker explores. The greeting's marker (lua/identity.lua) is
// admit.Mark's, adopt's epoch wait (lua/adopt.lua) admit.Wait's, and the
// lock scripts' set check (lua/setcheck.lua) admit.Allows's, case by case
// on a real redis-server.
func TestLuaAgreesWithAdmit(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	runID := strings.TrimSpace(regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(c.Info(ctx, "server").Val())[1])
	now := func() int64 {
		tm := c.Time(ctx).Val()
		return tm.UnixMilli()
	}
	const q, f = int64(60_000), int64(90_000)
	markers := []func(now int64) string{
		func(int64) string { return "" },
		func(n int64) string { return runID + ":" + strconv.FormatInt(n+5000, 10) + ":restart" },
		func(n int64) string { return runID + ":" + strconv.FormatInt(n-5000, 10) + ":unmarked" },
		func(n int64) string { return "0123abcd:" + strconv.FormatInt(n+500_000, 10) + ":epoch" },
		func(n int64) string { return "0123abcd:" + strconv.FormatInt(n-500_000, 10) + ":restart" },
		func(n int64) string { return "0123abcd:" + strconv.FormatInt(n+5000, 10) }, // an earlier version's
		func(int64) string { return "garbage" },
	}
	// The marker's end is by the server's clock, read just before: both
	// sides may differ by the milliseconds between.
	close := func(a, b admit.Marker) bool {
		d := a.Until - b.Until
		return a.Owner == b.Owner && a.Reason == b.Reason && d > -1000 && d < 1000
	}
	for i, mk := range markers {
		t.Run(fmt.Sprintf("identity marker %d", i), func(t *testing.T) {
			before := mk(now())
			if before == "" {
				c.Del(ctx, markerKey)
			} else {
				c.Set(ctx, markerKey, before, 0)
			}
			want := admit.Mark(admit.ParseMarker(before), runID, now(), q, f, false)
			if _, err := c.Eval(ctx, luaSource("identity"), []string{markerKey, setKey, fenceSeedKey}, q, f).Result(); err != nil {
				t.Fatal(err)
			}
			got := admit.ParseMarker(c.Get(ctx, markerKey).Val())
			if !close(got, want) {
				t.Errorf("marker %q: identity.lua left %+v, admit.Mark %+v", before, got, want)
			}
		})
		t.Run(fmt.Sprintf("adopt wait %d", i), func(t *testing.T) {
			before := mk(now())
			if before == "" || !strings.HasPrefix(before, runID) {
				return // adopt's greeting has made the marker name the server
			}
			c.Set(ctx, markerKey, before, 0)
			c.Set(ctx, setKey, "pending", 0)
			want := admit.Wait(admit.ParseMarker(before), now(), 30_000)
			if n, err := c.Eval(ctx, luaSource("adopt"), []string{setKey, markerKey}, "pending", "final", 30_000).Int(); err != nil || n != 1 {
				t.Fatalf("adopt.lua: %v %v", n, err)
			}
			if got := admit.ParseMarker(c.Get(ctx, markerKey).Val()); !close(got, want) {
				t.Errorf("marker %q: adopt.lua left %+v, admit.Wait %+v", before, got, want)
			}
		})
	}
	ours := admit.NewSet(2, []string{"a:1/0", "b:1/0", "c:1/0"}, "")
	records := []admit.Record{
		{}, admit.Final(ours), admit.PendingFor(ours, true),
		admit.Final(admit.NewSet(1, []string{"a:1/0", "b:1/0", "c:1/0"}, "")),
		admit.Final(admit.NewSet(3, []string{"a:1/0", "b:1/0"}, "")),
		admit.Final(admit.NewSet(2, []string{"a:1/0", "b:1/0", "d:1/0"}, "")),
	}
	// An engine of the tests' control, which reads and writes no record,
	// runs the lock script.
	n := newEngine(t, Config{Backends: []string{srv.URL()}, NodeTimeout: time.Second, DisableRestartQuarantine: true, skipIdentity: true}).nodes[0]
	for _, r := range records {
		if r.Present {
			c.Set(ctx, setKey, r.String(), 0)
		} else {
			c.Del(ctx, setKey)
		}
		_, err := n.run(ctx, acquireScript, []string{uniqueKey(t)}, "me", 10000, ours.Token())
		allowed := err == nil
		if want := admit.Allows(ours, r); allowed != want {
			t.Errorf("record %q: the set check allowed %v (%v), admit.Allows %v", r, allowed, err, want)
		}
	}
}

// TestClaimsAfterMajorityLoss: issue 33's wedge, on the engine. Five
// backends, the set adopted at epoch 2, then three of them restart empty:
// every one counts again once its quarantine is over, the set recorded on
// it again from the two that kept it, and never a wait without an end.
func TestClaimsAfterMajorityLoss(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1, 1, 1}, Config{BackendSetEpoch: 1})
	c.step(t, defaultMaxTTL)
	waitAllCount(t, c.engine)
	two := c.cfg
	two.BackendSetEpoch = 2
	if _, err := Adopt(t.Context(), []Config{two}, false); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, two)
	// Connected before the step: a backend that connects just after the
	// step's tick is not sampled at its time, and step would wait for it.
	for i := range c.servers {
		c.connectedOf(t, e, i)
	}
	bound := defaultMaxTTL + e.drift(defaultMaxTTL)
	c.step(t, bound, e) // the epoch wait
	waitAllCount(t, e)
	for i, s := range c.servers[:3] {
		s.Restart()
		c.connectedOf(t, e, i)
		c.connected(t, i) // the old epoch's engine samples them too
	}
	for i, b := range e.Backends() {
		if b.State == StateQuarantined && b.QuarantineLeft > defaultMaxTTL {
			t.Fatalf("backend %d quarantined for %v, longer than max_ttl", i, b.QuarantineLeft)
		}
	}
	c.step(t, bound, e)
	for range 3 {
		c.step(t, memberRound, e)
	}
	redistest.Eventually(t, func() string {
		for i, b := range e.Backends() {
			if b.State != StateUp {
				return fmt.Sprintf("backend %d: %s %d rounds after max_ttl and the drift allowance", i, b.State, 3)
			}
		}
		return ""
	})
	for _, s := range c.servers {
		if got, want := s.Client(t).Get(t.Context(), setKey).Val(), admit.Final(e.set).String(); got != want {
			t.Errorf("record %q, want %q", got, want)
		}
	}
}

// TestStrayEngineWritesNothing: an engine started by mistake with a higher
// epoch and a list of the three real backends and two that do not answer
// writes nothing on any of them, even on one that lost its data set, and
// the deployment's engine goes on counting every backend.
func TestStrayEngineWritesNothing(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	waitAllCount(t, c.engine)
	before := make([]string, 3)
	for i, s := range c.servers {
		before[i] = s.Client(t).Get(t.Context(), setKey).Val()
	}
	var log syncBuffer
	stray := c.cfg
	stray.BackendSetEpoch = 2
	stray.Backends = append(append([]string(nil), c.cfg.Backends...), "redis://127.0.0.1:1", "redis://127.0.0.1:2")
	stray.Logger = slog.New(slog.NewTextHandler(&log, nil))
	s := newEngine(t, stray)
	if _, err := s.acquire(t.Context(), uniqueKey(t), "stray", time.Second); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("the stray engine's acquire: %v, want NOQUORUM", err)
	}
	c.servers[0].Restart() // a record the stray could take, were it to write
	waitAllCount(t, c.engine)
	for range 3 * time.Second / memberRound {
		s.askRecords()
		time.Sleep(memberRound) // the stray's rounds, which must write nothing
		for i, srv := range c.servers {
			if got := srv.Client(t).Get(t.Context(), setKey).Val(); got != before[i] {
				t.Fatalf("backend %d records %q, was %q", i, got, before[i])
			}
		}
	}
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Fatalf("the deployment's acquire: %v", err)
	}
	for _, want := range []string{
		`msg="backend does not count toward quorum: it records an older epoch than this proxy's; a new epoch counts once lockproxy adopt has written it to every backend (docs/backends.md: Changing the backend set)"`,
		`msg="no quorum yet: too few backends count toward quorum; lock commands answer NOQUORUM until enough do" counting=0 backends=5 quorum=3 not_counting="`,
		`127.0.0.1:1 down (connection refused), 127.0.0.1:2 down (connection refused)"`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the stray's log lacks %s:\n%s", want, log.String())
		}
	}
}

// TestAdoptRefuses: adopt writes nothing unless every backend of the new
// configuration answers as a Redis master, no backend records a newer
// epoch or the same epoch with other members, and the new set keeps
// enough members of the old one.
func TestAdoptRefuses(t *testing.T) {
	servers := redistest.StartN(t, 5)
	url := func(idx ...int) []string {
		var urls []string
		for _, i := range idx {
			urls = append(urls, servers[i].URL())
		}
		return urls
	}
	cfg := Config{Backends: url(0, 1, 2), NodeTimeout: time.Second, BackendSetEpoch: 3}
	if _, err := Adopt(t.Context(), []Config{cfg}, false); err != nil {
		t.Fatal(err)
	}
	records := func() []string {
		var out []string
		for _, s := range servers {
			out = append(out, s.Client(t).Get(t.Context(), setKey).Val())
		}
		return out
	}
	before := records()
	for _, tc := range []struct {
		name  string
		cfg   Config
		error string
	}{
		{"a backend does not answer", Config{Backends: append(url(0, 1, 2), "redis://127.0.0.1:1"), BackendSetEpoch: 4},
			`nothing written: every backend of the new configuration must answer as a Redis master: backend 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused`},
		{"a lower epoch", Config{Backends: url(0, 1, 2, 3, 4), BackendSetEpoch: 2},
			`nothing written: backend ` + servers[0].Addr() + `: it records epoch 3 (3 members, `},
		{"the same epoch, other members", Config{Backends: url(0, 1, 3), BackendSetEpoch: 3},
			`nothing written: backend ` + servers[0].Addr() + `: it records epoch 3 (3 members, `},
		{"two of three replaced", Config{Backends: url(0, 3, 4), BackendSetEpoch: 4},
			`nothing written: the new backends keep 1 of the 3 members of epoch 3's set `},
		{"the same server twice", Config{Backends: append(url(0, 1, 2), strings.Replace(servers[2].URL(), "127.0.0.1", "localhost", 1)), BackendSetEpoch: 4},
			`nothing written: backends `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.NodeTimeout = time.Second
			_, err := Adopt(t.Context(), []Config{tc.cfg}, false)
			if err == nil || !strings.HasPrefix(err.Error(), tc.error) {
				t.Errorf("adopt: %v\nwant an error starting %q", err, tc.error)
			}
			if got := records(); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("records %q, were %q", got, before)
			}
		})
	}
}

// TestAdoptGrows: adopting five backends where three were: the old
// epoch's engine is refused at once, the new one counts the three old
// members at once (any three of the five include an old one... all three
// here, its quorum) and the two new ones after the epoch wait, which its
// state shows with a countdown that moves; a lock the old epoch granted
// before is not granted again before it expires.
func TestAdoptGrows(t *testing.T) {
	clock := redistest.NewSteppedClock(time.Now().UTC().Truncate(time.Second))
	servers := redistest.StartWith(t, 5, redistest.Options{Stepped: clock})
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	const maxTTL = defaultMaxTTL
	oldCfg := Config{Backends: urls[:3], NodeTimeout: time.Second, MaxTTL: maxTTL, DisableRestartQuarantine: true, clock: clock}
	old := newEngine(t, oldCfg)
	waitAllCount(t, old)
	key := uniqueKey(t)
	if _, err := old.acquire(t.Context(), key, "first", maxTTL); err != nil {
		t.Fatal(err)
	}
	newCfg := oldCfg
	newCfg.Backends, newCfg.BackendSetEpoch = urls, 2
	dry, err := Adopt(t.Context(), []Config{newCfg}, true)
	if err != nil || !dry.DryRun || servers[0].Client(t).Get(t.Context(), setKey).Val() != admit.Final(old.set).String() {
		t.Fatalf("dry run: %+v, %v; it must write nothing", dry, err)
	}
	report, err := Adopt(t.Context(), []Config{newCfg}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{old.set.Name()}; fmt.Sprint(report.Stopped) != fmt.Sprint(want) {
		t.Errorf("stopped %v, want %v", report.Stopped, want)
	}
	for i, m := range report.Members {
		if wait := m.Wait > 0; wait != (i >= 3) {
			t.Errorf("backend %d: epoch wait %v", i, m.Wait)
		}
	}
	if _, err := old.acquire(t.Context(), uniqueKey(t), "old", time.Second); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("the old epoch's engine after adopt: %v, want NOQUORUM", err)
	}
	e := newEngine(t, newCfg)
	var first time.Duration
	for i, b := range e.Backends() {
		switch {
		case i < 3 && b.State != StateUp:
			t.Errorf("old member %d: %s, want up", i, b.State)
		case i >= 3 && (b.State != StateEpochWait || b.QuarantineLeft <= 0 || b.QuarantineLeft > maxTTL+e.drift(maxTTL)):
			t.Errorf("new member %d: %s for %v, want epoch_wait for at most max_ttl", i, b.State, b.QuarantineLeft)
		case i == 3:
			first = b.QuarantineLeft
		}
	}
	if _, err := e.acquire(t.Context(), key, "second", time.Second); err != ErrNotAcquired {
		t.Errorf("the old epoch's lock through the new engine: %v, want not acquired", err)
	}
	clock.Advance(time.Second)
	if left := e.Backends()[3].QuarantineLeft; left >= first {
		t.Errorf("the countdown stands at %v a second after %v", left, first)
	}
	clock.Advance(first - 2*time.Second)
	if st := e.Backends()[3].State; st != StateEpochWait {
		t.Errorf("new member 3 a second before the epoch wait's end: %s", st)
	}
	// The wait starts where the set is recorded on the new members: at
	// the adopt, or at the new engine's first round of the records.
	clock.Advance(time.Second + memberRound)
	waitAllCount(t, e)
	if _, err := e.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Errorf("after the epoch wait: %v", err)
	}
}

// TestQuorumLostAndRegainedLines: one line when a quorum is lost, naming
// the backend whose change lost it, and one when it is regained, in these
// words.
func TestQuorumLostAndRegainedLines(t *testing.T) {
	var log syncBuffer
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))})
	waitAllCount(t, c.engine)
	other := admit.Final(admit.NewSet(9, []string{"elsewhere:1/0"}, "")).String()
	state := func(i int, want State) func() string {
		return func() string {
			if got := c.engine.Backends()[i].State; got != want {
				return fmt.Sprintf("backend %d: %s, want %s", i, got, want)
			}
			return ""
		}
	}
	ours := c.servers[0].Client(t).Get(t.Context(), setKey).Val()
	for _, i := range []int{1, 2} {
		c.servers[i].Client(t).Set(t.Context(), setKey, other, 0)
		redistest.Eventually(t, state(i, StateOtherSet))
	}
	c.servers[2].Client(t).Set(t.Context(), setKey, ours, 0)
	redistest.Eventually(t, state(2, StateUp))
	lost := fmt.Sprintf(`level=WARN msg="quorum lost: too few backends count toward quorum; lock commands answer NOQUORUM until enough do" counting=1 backends=3 quorum=2 cause="%s other_set"`+"\n", c.servers[2].Addr())
	regained := fmt.Sprintf(`level=INFO msg="quorum regained: enough backends count toward quorum again for lock commands to be decided" counting=2 backends=3 quorum=2 cause="%s now count"`+"\n", c.servers[2].Addr())
	// The state changes before the engine hears of it and logs.
	redistest.Eventually(t, func() string {
		if !strings.Contains(log.String(), regained) {
			return "not logged yet: " + regained
		}
		return ""
	})
	for _, want := range []string{lost, regained} {
		if n := strings.Count(log.String(), want); n != 1 {
			t.Errorf("%d lines\n%sin\n%s", n, want, log.String())
		}
	}
}

// TestIdleEngineRedials: an engine that serves no request sees a backend
// that came back within about a second, and its quarantine starts then.
func TestIdleEngineRedials(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{})
	c.step(t, defaultMaxTTL)
	waitAllCount(t, c.engine)
	c.servers[0].Kill()
	redistest.Eventually(t, func() string {
		if st := c.engine.Backends()[0].State; st != StateDown {
			return "backend 0: " + st.String()
		}
		return ""
	})
	c.servers[0].Restart()
	// One round of stepped time: its read of the records dials.
	c.step(t, memberRound)
	redistest.Eventually(t, func() string {
		if st := c.engine.Backends()[0].State; st != StateQuarantined {
			return "backend 0: " + st.String()
		}
		return ""
	})
}

// TestEmptiedBackendSeen: a backend emptied while the engine stays
// connected (FLUSHALL) lost its marker and its record with its locks: the
// engine sees it within a second, quarantines it from then, and records
// the set on it again.
func TestEmptiedBackendSeen(t *testing.T) {
	c := newSteppedCluster(t, []float64{1, 1, 1}, Config{})
	c.step(t, defaultMaxTTL)
	waitAllCount(t, c.engine)
	if err := c.direct[0].FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	c.step(t, memberRound) // the round's read sees it
	redistest.Eventually(t, func() string {
		if b := c.engine.Backends()[0]; b.State != StateQuarantined || b.Changes[ChangeUnmarked] != 2 {
			return fmt.Sprintf("backend 0: %s, %d unmarked data sets seen", b.State, b.Changes[ChangeUnmarked])
		}
		return ""
	})
	if got, want := c.direct[0].Get(t.Context(), setKey).Val(), admit.Final(c.engine.set).String(); got != want {
		t.Errorf("record %q, want %q", got, want)
	}
}
