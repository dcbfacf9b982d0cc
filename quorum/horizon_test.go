package quorum

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/redis/go-redis/v9"
)

// setsTTL finds a command in a script that gives a key an expiry.
var setsTTL = regexp.MustCompile(`"(px|pexpire)"`)

// neverRecord are the scripts that set a TTL on what is not a lease that a
// validity rests on: the latches that answer a retried Redisson release
// (hash_drop.lua's, and hash_release.lua's next to the lease it records).
// rw.lua only ever lowers a read-write lock's TTL to its longest hold,
// and rw_drop.lua's expiry is its latch's.
// mark.lua's marks are of waiting, not of locks.
var neverRecord = map[string]bool{"hash_drop": true, "rw": true, "rw_drop": true, "mark": true}

// TestEveryLeaseScriptRecords: every script that gives a key an expiry
// calls horizon(key) after it, and is built with lua/horizon.lua, so that
// a new lease script cannot forget the record that shortens every
// restarted backend's wait.
func TestEveryLeaseScriptRecords(t *testing.T) {
	names, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var leases int
	for _, file := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(file, "lua/"), ".lua")
		code := withoutComments(luaSource(name))
		if !setsTTL.MatchString(code) || neverRecord[name] || name == "horizon" {
			continue
		}
		leases++
		if !strings.Contains(code, "horizon(") {
			t.Errorf("lua/%s.lua sets an expiry but never calls horizon(key): a backend that restarts would not wait for its leases", name)
		}
	}
	for _, s := range allScripts {
		src := s.Source()
		code := withoutComments(src)
		if strings.Contains(code, "horizon(") {
			t.Errorf("a script's horizon call is not written out:\n%.200s", src)
		}
		if strings.Contains(code, "leaseEnd = ") && !strings.HasPrefix(strings.TrimPrefix(src, noticeSource), leaseSource) {
			t.Errorf("a script records the horizon without starting with leaseSource:\n%.200s", src)
		}
	}
	if leases < 15 {
		t.Fatalf("found %d lease scripts: the walk misses them", leases)
	}
}

var luaComment = regexp.MustCompile(`--[^\n]*`)

func withoutComments(src string) string { return luaComment.ReplaceAllString(src, "") }

// TestLuaRecordsHorizon runs every operation that sets a lease, each with
// a longer TTL than the one before, on real redis-servers, and checks
// after each that no lock on any backend expires after that backend's
// horizon: an operation that did not record would leave its lease beyond
// it. The horizon is also at most max_ttl away.
func TestLuaRecordsHorizon(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(fmt.Sprintf("fencing=%v", fencing), func(t *testing.T) {
			c := newCluster(t, 3, Config{MaxTTL: 10 * time.Minute, Fencing: fencing, DisableRestartQuarantine: true})
			ctx := t.Context()
			k := func(i int) string { return fmt.Sprintf("%s:%d", t.Name(), i) }
			ttl := time.Minute
			next := func() time.Duration { ttl += 10 * time.Second; return ttl }
			steps := []struct {
				what string
				do   func() error
			}{
				{"acquire", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{k(1)}, Token: "a", TTL: next()})
					return err
				}},
				{"extend", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpExtend, Keys: []string{k(1)}, Token: "a", TTL: next()})
					return err
				}},
				{"extend by", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpExtendBy, Keys: []string{k(1)}, Token: "a", TTL: 30 * time.Second})
					ttl += 30 * time.Second
					return err
				}},
				{"acquire all", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpAcquireAll, Keys: []string{k(2), k(3)}, Token: "a", TTL: next()})
					return err
				}},
				{"extend all", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpExtendAll, Keys: []string{k(2), k(3)}, Token: "a", TTL: next()})
					return err
				}},
				{"extend or acquire: take", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpExtendOrAcquire, Keys: []string{k(4)}, Token: "a", TTL: next()})
					return err
				}},
				{"extend or acquire: extend", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpExtendOrAcquire, Keys: []string{k(4)}, Token: "a", TTL: next()})
					return err
				}},
				{"acquire or renew: take", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpAcquireOrRenew, Keys: []string{k(5)}, Token: "owner:1", TokenLen: 6, TTL: next()})
					return err
				}},
				{"acquire or renew: renew", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpAcquireOrRenew, Keys: []string{k(5)}, Token: "owner:2", TokenLen: 6, TTL: next()})
					return err
				}},
				{"hash acquire", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpHashAcquire, Keys: []string{k(6)}, Token: "field", TTL: next()})
					return err
				}},
				{"hash re-enter", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpHashAcquire, Keys: []string{k(6)}, Token: "field", TTL: next()})
					return err
				}},
				{"hash release of a re-entered lock", func() error {
					_, err := c.engine.Unlock(ctx, Unlock{Op: OpHashRelease, Keys: []string{k(6)}, Token: "field", TTL: next()})
					return err
				}},
				{"renew", func() error {
					return firstErr(c.engine.Renew(ctx, Renewal{Locks: []Held{{Key: k(1), Token: "a"}, {Key: k(4), Token: "a"}}, TTL: next()}))
				}},
				{"watchdog renew", func() error {
					return firstErr(c.engine.Renew(ctx, Renewal{Locks: []Held{{Key: k(6), Token: "field"}}, TTL: next(), Hash: true}))
				}},
				{"read acquire", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpReadAcquire, Keys: []string{k(7), "{" + k(7) + "}"}, Token: "r", TTL: next()})
					return err
				}},
				{"read renew", func() error {
					return firstErr(c.engine.Renew(ctx, Renewal{Locks: []Held{{Key: k(7), Token: "r", Prefix: "{" + k(7) + "}"}}, TTL: next(), Read: true}))
				}},
				{"write acquire", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpWriteAcquire, Keys: []string{k(8)}, Token: "w", TTL: next()})
					return err
				}},
				{"write re-enter", func() error {
					_, err := c.engine.Lock(ctx, Lock{Op: OpWriteAcquire, Keys: []string{k(8)}, Token: "w", TTL: 30 * time.Second})
					ttl += 30 * time.Second
					return err
				}},
				{"write release of a re-entered lock", func() error {
					_, err := c.engine.Unlock(ctx, Unlock{Op: OpWriteRelease, Keys: []string{k(8)}, Token: "w", TTL: next()})
					return err
				}},
				{"expire by anyone", func() error {
					ok, err := c.engine.Write(ctx, Write{Op: OpExpire, Key: k(5), TTL: next()})
					if err == nil && !ok {
						err = fmt.Errorf("not set")
					}
					return err
				}},
			}
			for _, s := range steps {
				if err := s.do(); err != nil {
					t.Fatalf("%s: %v", s.what, err)
				}
				for i, d := range c.direct {
					checkHorizon(t, d, s.what, i, []string{k(1), k(2), k(3), k(4), k(5), k(6), k(7), k(8)})
				}
			}
		})
	}
}

func firstErr(r []Renewed) error {
	for _, x := range r {
		if x.Err != nil {
			return x.Err
		}
	}
	return nil
}

// checkHorizon fails when a lock on backend d expires after its horizon,
// or the horizon lies more than max_ttl ahead. It reads them in one
// script: a vote that lands after the step's reply (its quorum came
// first) moves the horizon and a lock together, never one without the
// other.
func checkHorizon(t *testing.T, d *redis.Client, step string, i int, keys []string) {
	t.Helper()
	read, err := d.Eval(t.Context(), horizonSnapshot, append([]string{horizonKey}, keys...)).Int64Slice()
	if err != nil {
		t.Fatalf("after %s: backend %d: %v", step, i, err)
	}
	h, expiry, now := read[0], read[1], read[2]
	if h == 0 {
		t.Fatalf("after %s: backend %d has no horizon", step, i)
	}
	if ahead := time.Duration(h-now) * time.Millisecond; ahead > 10*time.Minute {
		t.Fatalf("after %s: backend %d's horizon is %v ahead, beyond max_ttl", step, i, ahead)
	}
	if expiry != h {
		t.Fatalf("after %s: backend %d's horizon %d expires at %d, not at itself", step, i, h, expiry)
	}
	for k, at := range read[3:] {
		if at > h {
			t.Fatalf("after %s: backend %d holds %s until %d, after its horizon %d", step, i, keys[k], at, h)
		}
	}
}

// horizonSnapshot reads, at one instant, the horizon KEYS[1], its expiry,
// the server's time (ms) and the expiry of every other key.
const horizonSnapshot = `local t = redis.call("TIME")
local out = {tonumber(redis.call("GET", KEYS[1]) or "0"), redis.call("PEXPIRETIME", KEYS[1]),
	tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 2, #KEYS do
	out[#out + 1] = redis.call("PEXPIRETIME", KEYS[i])
end
return out`

// settledCluster is three real backends already recorded and marked with
// no wait (as lockproxy init leaves them), and an engine over them with
// restart quarantine on and a long max_ttl: only the horizon can make a
// restarted backend count again before max_ttl.
func settledCluster(t *testing.T) *cluster {
	t.Helper()
	servers := redistest.StartN(t, 3)
	cfg := Config{MaxTTL: 10 * time.Minute, NodeTimeout: 500 * time.Millisecond}
	for _, s := range servers {
		cfg.Backends = append(cfg.Backends, s.URL())
	}
	recordSet(t, cfg, servers...)
	for _, s := range servers {
		markFresh(t, s)
	}
	c := &cluster{servers: servers, cfg: cfg, engine: newEngine(t, cfg)}
	for _, s := range servers {
		c.direct = append(c.direct, s.Client(t))
	}
	waitFor(t, func() bool { return counting(c.engine) == 3 })
	return c
}

// markFresh writes the marker of a server whose data set holds no lease:
// it names the running process, with no wait.
func markFresh(t *testing.T, s *redistest.Server) {
	t.Helper()
	info := s.Client(t).Info(t.Context(), "server").Val()
	runID := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(info)[1]
	if err := s.Client(t).Set(t.Context(), markerKey, runID+":0:restart", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func counting(e *Engine) int {
	n := 0
	for _, b := range e.Backends() {
		if b.State == StateUp {
			n++
		}
	}
	return n
}

// TestSettleAfterShortLocks: while only 2 s locks were taken, a backend
// restarted empty counts again once they are gone (about 2 s, plus the
// settle delay and a read), not after max_ttl; and not before the
// horizon its witnesses recorded at its restart.
func TestSettleAfterShortLocks(t *testing.T) {
	c := settledCluster(t)
	ctx := t.Context()
	for i := range 5 {
		if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{fmt.Sprint(uniqueKey(t), i)}, Token: "t", TTL: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	horizon, _ := c.direct[1].Get(ctx, horizonKey).Int64()
	c.servers[0].Restart()
	restarted := time.Now()
	waitFor(t, func() bool {
		b := c.engine.Backends()[0]
		return b.State == StateQuarantined
	})
	var up time.Time
	redistest.Eventually(t, func() string {
		b := c.engine.Backends()[0]
		if b.State != StateUp {
			return fmt.Sprintf("backend 0 is %s (%v left, waiting for %s, %d/%d witnesses)", b.State, b.QuarantineLeft, b.WaitFor, b.Witnesses, b.WitnessesNeeded)
		}
		up = time.Now()
		return ""
	})
	took := up.Sub(restarted)
	t.Logf("restarted empty: counts again after %v (max_ttl %v)", took, c.cfg.MaxTTL)
	if took > 2*time.Second+c.engine.settleDelay()+3*time.Second {
		t.Fatalf("counted after %v: the horizon did not shorten the wait", took)
	}
	if at := up.UnixMilli(); at < horizon {
		t.Fatalf("counted at %d, before the horizon %d its witnesses recorded", at, horizon)
	}
}

// TestSettleWaitsForLongLease: with one 5-minute lock held, a backend
// restarted empty waits for that lock's lease, which its status says, not
// for max_ttl.
func TestSettleWaitsForLongLease(t *testing.T) {
	c := settledCluster(t)
	ctx := t.Context()
	if _, err := c.engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{uniqueKey(t)}, Token: "t", TTL: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	c.servers[0].Restart()
	redistest.Eventually(t, func() string {
		b := c.engine.Backends()[0]
		if b.State != StateQuarantined || b.WaitFor != WaitHorizon {
			return fmt.Sprintf("backend 0 is %s, waiting for %q (%d/%d witnesses)", b.State, b.WaitFor, b.Witnesses, b.WitnessesNeeded)
		}
		return ""
	})
	b := c.engine.Backends()[0]
	lease := 5*time.Minute - time.Since(taken)
	if b.QuarantineLeft < lease-2*time.Second || b.QuarantineLeft > lease+c.engine.drift(lease)+2*time.Second {
		t.Fatalf("waits %v; the lock's lease has %v left", b.QuarantineLeft, lease)
	}
	if b.Witnesses != 2 || b.WitnessesNeeded != 2 {
		t.Fatalf("witnesses %d/%d, want 2/2", b.Witnesses, b.WitnessesNeeded)
	}
	// Every proxy reads the same end: an engine started now waits as long.
	later := newEngine(t, c.cfg)
	waitFor(t, func() bool { return later.Backends()[0].State == StateQuarantined })
	if left := later.Backends()[0].QuarantineLeft; (left - b.QuarantineLeft).Abs() > 3*time.Second {
		t.Fatalf("an engine started later waits %v, the first %v", left, b.QuarantineLeft)
	}
}

// TestClockRateBackByHorizon: a backend out for a fast clock (its leases
// expired early: a loss, as a restart's) counts again once its rate has
// been in bounds for the window and the longest lease the other backends'
// horizons record is gone: not before that 30 s lease, and well before
// max_ttl. Stepped time, a second a step.
func TestClockRateBackByHorizon(t *testing.T) {
	c := newClockCluster(t, []float64{1.5, 0, 0}, Config{DisableRestartQuarantine: true, MaxTTL: 5 * time.Minute})
	c.step(t, defaultClockParams.interval)
	if st := c.engine.Backends()[0]; st.State != StateClock {
		t.Fatalf("%s after two samples at 1.5", st.State)
	}
	const lease = 30 * time.Second
	if _, err := c.engine.acquire(t.Context(), uniqueKey(t), "me", lease); err != nil {
		t.Fatal(err)
	}
	taken := c.clock.Now()
	c.servers[0].SetClockRate(0)
	c.servers[0].Restart()
	c.connected(t, 0)
	for c.engine.Backends()[0].State != StateUp {
		if c.clock.Since(taken) > c.cfg.MaxTTL {
			t.Fatal("still out after max_ttl")
		}
		c.step(t, defaultClockParams.interval)
	}
	back := c.clock.Since(taken)
	t.Logf("counts again %v after the %v lease was taken (max_ttl %v)", back, lease, c.cfg.MaxTTL)
	if back < lease {
		t.Fatalf("counted %v after the lease was taken, before it ended", back)
	}
	if back > lease+c.engine.drift(lease)+5*time.Second {
		t.Fatalf("counted %v after the lease was taken: the horizon did not shorten the hold", back)
	}
}

// TestSettleScriptAsSettled: lua/settle.lua lowers a marker exactly where
// admit.Settled does, which the model checker explores: only the marker
// the proof's read found, only a loss's wait, only to an earlier end.
func TestSettleScriptAsSettled(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := t.Context()
	far := time.Now().Add(time.Hour).UnixMilli()
	read := admit.Marker{Present: true, Owner: "abc123", Until: far, Reason: admit.ReasonRestart}
	for name, tc := range map[string]struct {
		stored admit.Marker
		in     time.Duration // the proof's end, from now
	}{
		"as read":              {read, time.Second},
		"as read, later end":   {read, 2 * time.Hour},
		"rewritten since":      {admit.Marker{Present: true, Owner: "abc123", Until: far + 1, Reason: admit.ReasonUnmarked}, time.Second},
		"another process":      {admit.Marker{Present: true, Owner: "def456", Until: far, Reason: admit.ReasonRestart}, time.Second},
		"an epoch wait":        {admit.Marker{Present: true, Owner: "abc123", Until: far, Reason: admit.ReasonEpoch}, time.Second},
		"a failover, as read":  {admit.Marker{Present: true, Owner: "abc123", Until: far, Reason: admit.ReasonFailover}, time.Second},
		"an unmarked, as read": {admit.Marker{Present: true, Owner: "abc123", Until: far, Reason: admit.ReasonUnmarked}, time.Second},
		"none":                 {admit.Marker{}, time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			c.Del(ctx, markerKey)
			if tc.stored.Present {
				c.Set(ctx, markerKey, tc.stored.String(), 0)
			}
			asRead := read
			if strings.HasPrefix(name, "a failover") || strings.HasPrefix(name, "an unmarked") || name == "an epoch wait" {
				asRead = tc.stored // read as it stands: only its reason differs
			}
			end := time.Now().Add(tc.in).UnixMilli()
			want := admit.Settled(tc.stored, asRead, end) != tc.stored
			r, err := c.Eval(ctx, settleScript.Source(), []string{markerKey}, asRead.String(), tc.in.Milliseconds()).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if got := r >= 0; got != want {
				t.Fatalf("settle.lua lowered %v, admit.Settled %v", got, want)
			}
			after := admit.ParseMarker(c.Get(ctx, markerKey).Val())
			if lowered := after != tc.stored; lowered != want {
				t.Fatalf("the marker went from %v to %v", tc.stored, after)
			}
		})
	}
}

// TestSettleKeepsAdoptFloor: after an epoch change whose old locks may
// still be held (adopt wrote {lockproxy}:floor), a member restarted empty
// waits at least until that floor: the old epoch's quorums were of
// another set, which this set's witnesses need not meet.
func TestSettleKeepsAdoptFloor(t *testing.T) {
	c := settledCluster(t)
	ctx := t.Context()
	const floor = 20 * time.Second
	at := time.Now().Add(floor).UnixMilli()
	for _, d := range c.direct {
		if err := d.Do(ctx, "SET", floorKey, at, "PXAT", at).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.servers[0].Restart()
	redistest.Eventually(t, func() string {
		b := c.engine.Backends()[0]
		if b.State != StateQuarantined || b.WaitFor != WaitHorizon {
			return fmt.Sprintf("backend 0 is %s, waiting for %q", b.State, b.WaitFor)
		}
		return ""
	})
	left := time.Until(time.UnixMilli(at))
	if b := c.engine.Backends()[0]; b.QuarantineLeft < left-time.Second {
		t.Fatalf("waits %v; the floor is %v away", b.QuarantineLeft, left)
	}
}
