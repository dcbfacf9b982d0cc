package quorum

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/admit"
)

// adoptGrowth is three backends of epoch 1, whose engine holds a lock of
// 5 s, about to grow to five at epoch 2 (docs/design/horizon.md §4.4).
type adoptGrowth struct {
	clock   *redistest.SteppedClock
	servers []*redistest.Server
	old     *Engine
	next    Config
	lease   time.Duration
}

func newAdoptGrowth(t *testing.T) *adoptGrowth {
	t.Helper()
	g := &adoptGrowth{clock: redistest.NewSteppedClock(time.Now().UTC().Truncate(time.Second)), lease: 5 * time.Second}
	g.servers = redistest.StartWith(t, 5, redistest.Options{Stepped: g.clock})
	var urls []string
	for _, s := range g.servers {
		urls = append(urls, s.URL())
	}
	oldCfg := Config{Backends: urls[:3], NodeTimeout: time.Second, DisableRestartQuarantine: true, clock: g.clock}
	g.old = newEngine(t, oldCfg)
	waitAllCount(t, g.old)
	key := uniqueKey(t)
	if _, err := g.old.acquire(t.Context(), key, "old", g.lease); err != nil {
		t.Fatal(err)
	}
	for i, s := range g.servers[:3] {
		c := s.Client(t)
		if at, h := c.PExpireTime(t.Context(), key).Val(), c.Get(t.Context(), horizonKey).Val(); strconv.FormatInt(at.Milliseconds(), 10) != h {
			t.Fatalf("backend %d: horizon %q, want the lock's expiry %v", i, h, at.Milliseconds())
		}
	}
	g.next = oldCfg
	g.next.Backends, g.next.BackendSetEpoch = urls, 2
	return g
}

// markerLeft is how long the backend's marker keeps it waiting, by its
// own clock, and why.
func markerLeft(t *testing.T, c *redis.Client) (time.Duration, string) {
	t.Helper()
	m := admit.ParseMarker(c.Get(t.Context(), markerKey).Val())
	return time.Duration(m.Until-c.Time(t.Context()).Val().UnixMilli()) * time.Millisecond, m.Reason
}

// TestAdoptWaitsByHorizon: adopting five backends where three were, while
// a 5 s lock of the old epoch is held, the two new backends wait for that
// lease (and its drift allowance), not max_ttl; a re-run of an adopt cut
// short before its second pass writes the same wait; the new engine counts
// them once it is over.
func TestAdoptWaitsByHorizon(t *testing.T) {
	g := newAdoptGrowth(t)
	report, err := Adopt(t.Context(), []Config{g.next}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Horizons) != 1 || report.Horizons[0].Witnesses != 3 || report.Horizons[0].Needed != 2 || len(report.Horizons[0].NotWitnesses) != 0 {
		t.Fatalf("horizons %+v, want 3 witnesses of 2 needed", report.Horizons)
	}
	if h := report.Horizons[0].Longest; h <= g.lease-time.Second || h > g.lease {
		t.Errorf("longest lease %v, want about %v", h, g.lease)
	}
	for i, m := range report.Members {
		switch left, reason := markerLeft(t, g.servers[i].Client(t)); {
		case i < 3 && m.Wait != 0:
			t.Errorf("old member %d: epoch wait %v", i, m.Wait)
		case i >= 3 && (m.Wait <= g.lease-time.Second || m.Wait > g.lease+drift(g.lease, defaultDriftFactor)):
			t.Errorf("new member %d: epoch wait %v, want the lease's %v and its drift allowance", i, m.Wait, g.lease)
		case i >= 3 && (reason != admit.ReasonEpoch || left > m.Wait || left < m.Wait-time.Second):
			t.Errorf("new member %d: marker %s for %v, want epoch for %v", i, reason, left, m.Wait)
		}
	}
	e := newEngine(t, g.next)
	for i, b := range e.Backends()[3:] {
		if b.State != StateEpochWait || b.QuarantineLeft > g.lease+time.Second {
			t.Errorf("new member %d: %s for %v, want epoch_wait for about %v", i+3, b.State, b.QuarantineLeft, g.lease)
		}
	}

	// The same adopt cut short after its decision: member 4 still carries
	// the pending record, which keeps the decision; member 3 lost it.
	decided := admit.PendingFor(e.set, true)
	decided.Decided = report.Members[4].Wait.Milliseconds()
	for _, i := range []int{3, 4} {
		c := g.servers[i].Client(t)
		c.Del(t.Context(), markerKey)
		c.Set(t.Context(), setKey, decided.String(), 0)
	}
	g.servers[3].Client(t).Del(t.Context(), setKey)
	again, err := Adopt(t.Context(), []Config{g.next}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Resumed || !again.Decided || len(again.Horizons) != 0 {
		t.Errorf("re-run: resumed %v, decided %v, horizons %+v", again.Resumed, again.Decided, again.Horizons)
	}
	for i, m := range again.Members {
		if want := report.Members[i].Wait; i >= 3 && m.Wait != want.Truncate(time.Millisecond) {
			t.Errorf("re-run, member %d: epoch wait %v, want %v as decided", i, m.Wait, want)
		}
	}

	for i, s := range g.servers {
		if got, want := s.Client(t).Get(t.Context(), setKey).Val(), admit.Final(e.set).String(); got != want {
			t.Errorf("re-run, member %d: record %q, want %q", i, got, want)
		}
	}
	g.clock.Advance(g.lease + time.Second)
	g.clock.Advance(memberRound)
	waitAllCount(t, e)
	if _, err := e.acquire(t.Context(), uniqueKey(t), "me", time.Second); err != nil {
		t.Errorf("after the lease's wait: %v", err)
	}
}

// TestAdoptUnmarkedWaitsFull: where the old set's records were written by
// an earlier version (no horizon mark), its proxies may have granted
// leases that no horizon recorded: the new backends wait max_ttl and its
// drift allowance, whatever the horizons say, and adopt says why.
func TestAdoptUnmarkedWaitsFull(t *testing.T) {
	g := newAdoptGrowth(t)
	for _, s := range g.servers[:3] {
		c := s.Client(t)
		unmarked := strings.Replace(c.Get(t.Context(), setKey).Val(), ":h ", " ", 1)
		if rec, err := admit.ParseRecord(unmarked); err != nil || rec.Horizon {
			t.Fatalf("unmarked record %q: %+v, %v", unmarked, rec, err)
		}
		c.Set(t.Context(), setKey, unmarked, 0)
	}
	report, err := Adopt(t.Context(), []Config{g.next}, false)
	if err != nil {
		t.Fatal(err)
	}
	full := defaultMaxTTL + drift(defaultMaxTTL, defaultDriftFactor)
	for i, m := range report.Members[3:] {
		if left, _ := markerLeft(t, g.servers[i+3].Client(t)); m.Wait != full || left < full-time.Second {
			t.Errorf("new member %d: epoch wait %v, marker %v; want the full %v", i+3, m.Wait, left, full)
		}
	}
	if len(report.Horizons) != 1 || report.Horizons[0].Witnesses != 0 || len(report.Horizons[0].NotWitnesses) != 3 {
		t.Fatalf("horizons %+v, want no witness of 3 members", report.Horizons)
	}
	for _, why := range report.Horizons[0].NotWitnesses {
		if !strings.HasSuffix(why, "its record of the old set is not marked for horizons (an earlier version wrote it)") {
			t.Errorf("no witness: %q", why)
		}
	}
	e := newEngine(t, g.next)
	g.clock.Advance(g.lease + time.Second)
	for i, b := range e.Backends()[3:] {
		if b.State != StateEpochWait || b.QuarantineLeft < full-g.lease-2*time.Second {
			t.Errorf("new member %d after the lease: %s for %v, want epoch_wait", i+3, b.State, b.QuarantineLeft)
		}
	}
}

// TestAdoptWaitsForEarlierEpoch: two changes of the backend set, the
// second before the first one's old locks are gone. Epoch 1 is five
// backends, and a lock of 20 s granted while two of them (a, b) were
// stopped rests on c, d and e alone. Epoch 2 drops e: no backend waits,
// and its witnesses (a to d) bound the lock. Epoch 3 adds f while c and d
// wait for themselves: a and b are enough witnesses of epoch 2's set, but
// their horizons know nothing of the lock, so f would count at once and
// a, b and f grant it again. The floor that epoch 2's adopt wrote keeps f
// waiting for it.
func TestAdoptWaitsForEarlierEpoch(t *testing.T) {
	clock := redistest.NewSteppedClock(time.Now().UTC().Truncate(time.Second))
	servers := redistest.StartWith(t, 6, redistest.Options{Stepped: clock})
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	cfg := func(epoch int, idx ...int) Config {
		c := Config{NodeTimeout: time.Second, DisableRestartQuarantine: true, clock: clock, BackendSetEpoch: epoch}
		for _, i := range idx {
			c.Backends = append(c.Backends, urls[i])
		}
		return c
	}
	old := newEngine(t, cfg(1, 0, 1, 2, 3, 4))
	waitAllCount(t, old)
	servers[0].Pause()
	servers[1].Pause()
	key, lease := uniqueKey(t), 20*time.Second
	if _, err := old.acquire(t.Context(), key, "epoch 1", lease); err != nil {
		t.Fatal(err)
	}
	servers[0].Resume()
	servers[1].Resume()
	// Their requests ran once they resumed, too late to count: undone, as
	// if they had never reached them.
	for _, s := range servers[:2] {
		c := s.Client(t)
		redistest.Eventually(t, func() string {
			if c.Exists(t.Context(), key).Val() == 0 {
				return "the late request has not run"
			}
			return ""
		})
		c.Del(t.Context(), key, horizonKey)
	}

	two, err := Adopt(t.Context(), []Config{cfg(2, 0, 1, 2, 3)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(two.Horizons) != 1 || two.Horizons[0].Witnesses != 4 || two.Horizons[0].Longest <= lease-2*time.Second {
		t.Fatalf("epoch 2: horizons %+v, want 4 witnesses bounding the lock's %v", two.Horizons, lease)
	}
	for i, s := range servers[:4] {
		if left := s.Client(t).PTTL(t.Context(), floorKey).Val(); left <= lease-2*time.Second {
			t.Errorf("backend %d: floor %v after epoch 2, want the lock's %v", i, left, lease)
		}
	}
	clock.Advance(5 * time.Second)
	for _, i := range []int{2, 3} { // c and d wait for themselves
		c := servers[i].Client(t)
		m := admit.ParseMarker(c.Get(t.Context(), markerKey).Val())
		m.Until, m.Reason = c.Time(t.Context()).Val().Add(time.Hour).UnixMilli(), admit.ReasonRestart
		c.Set(t.Context(), markerKey, m.String(), 0)
	}
	three, err := Adopt(t.Context(), []Config{cfg(3, 0, 1, 2, 3, 5)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(three.Horizons) != 1 || three.Horizons[0].Witnesses != 2 || three.Horizons[0].Longest >= time.Second {
		t.Fatalf("epoch 3: horizons %+v, want a and b, who know nothing of the lock", three.Horizons)
	}
	left := lease - 5*time.Second
	if f := three.Members[4]; f.Wait < left-time.Second || three.Floor < left-time.Second {
		t.Errorf("epoch 3: f waits %v (floor %v), want the epoch 1 lock's %v left", f.Wait, three.Floor, left)
	}
	e := newEngine(t, cfg(3, 0, 1, 2, 3, 5))
	clock.Advance(time.Second)
	if _, err := e.acquire(t.Context(), key, "epoch 3", time.Second); err == nil {
		t.Errorf("epoch 3 granted the lock that epoch 1 holds for %v more", left)
	}
}
