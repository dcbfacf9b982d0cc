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
