package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// takeAll takes each lock through e, for ttl, and returns once every
// backend holds it: the last ones may set it after the answer, and after a
// test's change of their keys.
func (c *cluster) takeAll(t *testing.T, e *Engine, ttl time.Duration, locks ...Held) {
	t.Helper()
	for _, l := range locks {
		if _, err := e.Lock(t.Context(), Lock{Op: OpAcquire, Keys: []string{l.Key}, Token: l.Token, TTL: ttl}); err != nil {
			t.Fatalf("acquire %s for %s: %v", l.Key, l.Token, err)
		}
	}
	for _, l := range locks {
		redistest.Eventually(t, func() string {
			if slices.Contains(c.values(t, l.Key), "") {
				return fmt.Sprintf("%s is not on every backend: %q", l.Key, c.values(t, l.Key))
			}
			return ""
		})
	}
}

// TestRenewMany: 250 locks, half taken with fencing and half without (as
// before fencing was turned on), are renewed in one call with a longer TTL,
// in three script calls per backend: each is renewed on every backend with
// validity in (0, ttl), and keeps its value (with its fencing token). An
// engine without fencing renews its own locks too.
func TestRenewMany(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true, Fencing: true})
	plainCfg := c.cfg
	plainCfg.Fencing = false
	plain := newEngine(t, plainCfg)
	ctx := t.Context()

	locks := make([]Held, 250)
	var unfenced []Held
	for i := range locks {
		locks[i] = Held{Key: uniqueKey(t), Token: fmt.Sprintf("holder%d", i)}
		if i%2 == 0 {
			c.takeAll(t, c.engine, 5*time.Second, locks[i])
		} else {
			c.takeAll(t, plain, 5*time.Second, locks[i])
			unfenced = append(unfenced, locks[i])
		}
	}
	values := make([][]string, len(locks))
	for i, l := range locks {
		values[i] = c.values(t, l.Key)
	}

	renew := func(e *Engine, ttl time.Duration, locks []Held, batches int) {
		t.Helper()
		before := commandCalls(t, c.servers[0])["evalsha"]
		got := e.Renew(ctx, Renewal{TTL: ttl, Locks: locks})
		if exp, got := batches, commandCalls(t, c.servers[0])["evalsha"]-before; exp != got {
			t.Errorf("renewing %d locks took %d EVALSHA on a backend, want %d", len(locks), got, exp)
		}
		if exp, got := len(locks), len(got); exp != got {
			t.Fatalf("%d outcomes for %d locks", got, exp)
		}
		for i, r := range got {
			if r.Err != nil || r.Validity <= 0 || r.Validity >= ttl {
				t.Errorf("%s: validity %s, %v; want renewed, validity in (0, %s)", locks[i].Key, r.Validity, r.Err, ttl)
			}
		}
	}
	renew(c.engine, 30*time.Second, locks, 3)
	renew(plain, 40*time.Second, unfenced, 2)

	for i, l := range locks {
		above := 20 * time.Second
		if i%2 == 1 {
			above = 30 * time.Second
		}
		for b, d := range c.direct {
			if pttl := d.PTTL(ctx, l.Key).Val(); pttl <= above {
				t.Errorf("%s on backend %d: PTTL %s after the renewal, want above %s", l.Key, b, pttl, above)
			}
		}
		if msg := expectValues(c.values(t, l.Key), values[i]...); msg != "" {
			t.Errorf("%s after the renewal: %s", l.Key, msg)
		}
	}
}

// TestRenewRefused: in one call, a lock whose key is gone from a quorum, one
// that another token holds, and one another token holds on a quorum are
// refused (ErrNotHeld), and the token's key is rolled back where it still
// held it; a lock held on exactly a quorum is renewed there; a reserved key
// is refused unsent. A TTL outside (0, MaxTTL] refuses every lock, and a
// renewal that leaves no validity is refused.
func TestRenewRefused(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	ctx := t.Context()
	const token = "me"
	lost, taken, split, onQuorum, healthy := uniqueKey(t), uniqueKey(t), uniqueKey(t), uniqueKey(t), uniqueKey(t)
	c.takeAll(t, c.engine, 5*time.Second, Held{Key: lost, Token: token}, Held{Key: onQuorum, Token: token}, Held{Key: healthy, Token: token})
	for _, i := range []int{0, 1} {
		c.direct[i].Del(ctx, lost)
		c.direct[i].Set(ctx, split, "other", time.Minute)
	}
	c.direct[2].Set(ctx, split, token, time.Minute)
	c.takeAll(t, c.engine, time.Minute, Held{Key: taken, Token: "other"})
	c.direct[0].Del(ctx, onQuorum)

	locks := []Held{{Key: lost, Token: token}, {Key: taken, Token: token}, {Key: ReservedPrefix + "x", Token: token}, {Key: split, Token: token}, {Key: onQuorum, Token: token}, {Key: healthy, Token: token}}
	got := c.engine.Renew(ctx, Renewal{TTL: 30 * time.Second, Locks: locks})
	want := []error{ErrNotHeld, ErrNotHeld, ErrReservedKey, ErrNotHeld, nil, nil}
	for i, r := range got {
		if !errors.Is(r.Err, want[i]) || (want[i] == nil) != (r.Err == nil) {
			t.Errorf("%s: %v, want %v", locks[i].Key, r.Err, want[i])
		}
		if exp := want[i] == nil; exp != (r.Validity > 0) {
			t.Errorf("%s: validity %s", locks[i].Key, r.Validity)
		}
	}
	// The yes voters are rolled back before Renew returns.
	for _, check := range []struct {
		key  string
		want []string
	}{
		{lost, []string{"", "", ""}},
		{taken, []string{"other", "other", "other"}},
		{split, []string{"other", "other", ""}},
		{healthy, []string{token, token, token}},
	} {
		if msg := expectValues(c.values(t, check.key), check.want...); msg != "" {
			t.Errorf("%s after the renewal: %s", check.key, msg)
		}
	}
	// The lock renewed on a quorum is given back to the backend that lost
	// it (topup.go).
	redistest.Eventually(t, func() string { return expectValues(c.values(t, onQuorum), token, token, token) })
	for b, d := range c.direct[1:] {
		if pttl := d.PTTL(ctx, onQuorum).Val(); pttl <= 20*time.Second {
			t.Errorf("%s on backend %d: PTTL %s, want renewed", onQuorum, b+1, pttl)
		}
	}

	for _, ttl := range []time.Duration{0, -time.Second, c.engine.MaxTTL() + time.Millisecond} {
		for _, r := range c.engine.Renew(ctx, Renewal{TTL: ttl, Locks: []Held{{Key: healthy, Token: token}, {Key: onQuorum, Token: token}}}) {
			if terr := (*TTLError)(nil); !errors.As(r.Err, &terr) {
				t.Errorf("renewal for %s: %v, want a TTLError", ttl, r.Err)
			}
		}
	}
	if got := c.engine.Renew(ctx, Renewal{TTL: time.Second, Locks: nil}); len(got) != 0 {
		t.Errorf("renewing no locks: %v", got)
	}
	// A TTL of 1ms is less than the drift allowance: no validity is left.
	if got := c.engine.Renew(ctx, Renewal{TTL: time.Millisecond, Locks: []Held{{Key: healthy, Token: token}}}); !errors.Is(got[0].Err, ErrNotHeld) {
		t.Errorf("renewal without validity left: %v, want ErrNotHeld", got[0].Err)
	}
}

// TestRenewUndecided: with a majority of backends hung past ctx, or
// killed, every lock is undecided (a *NoQuorumError, with ctx's error when
// ctx ended) and nothing is rolled back; a lock refused by the backends
// that answered before ctx ended is rolled back on a hung one once it
// replies.
func TestRenewUndecided(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	const token = "me"
	renewSoon := func(locks ...Held) []Renewed {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		return c.engine.Renew(ctx, Renewal{TTL: 30 * time.Second, Locks: locks})
	}

	t.Run("refused while one hangs", func(t *testing.T) {
		key := uniqueKey(t)
		c.takeAll(t, c.engine, 10*time.Second, Held{Key: key, Token: token})
		c.direct[0].Del(t.Context(), key)
		c.direct[1].Del(t.Context(), key)
		c.servers[2].Pause()
		got := renewSoon(Held{Key: key, Token: token})
		c.servers[2].Resume()
		if !errors.Is(got[0].Err, ErrNotHeld) || errors.Is(got[0].Err, ErrNoQuorum) {
			t.Errorf("renewal refused by two of three: %v, want ErrNotHeld", got[0].Err)
		}
		redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "") })
	})

	t.Run("ctx ends with a majority hung", func(t *testing.T) {
		held, absent := uniqueKey(t), uniqueKey(t)
		c.takeAll(t, c.engine, 10*time.Second, Held{Key: held, Token: token}, Held{Key: absent, Token: token})
		c.direct[0].Del(t.Context(), absent)
		c.servers[1].Pause()
		c.servers[2].Pause()
		got := renewSoon(Held{Key: held, Token: token}, Held{Key: absent, Token: token})
		c.servers[1].Resume()
		c.servers[2].Resume()
		for i, r := range got {
			var nq *NoQuorumError
			if !errors.As(r.Err, &nq) || !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Errorf("lock %d: %v, want a NoQuorumError and the deadline", i, r.Err)
			}
		}
		// Not rolled back: the late replies renewed the lock.
		redistest.Eventually(t, func() string {
			return expectValues(c.values(t, held), token, token, token) + c.ttlOnQuorum(t, held, 20*time.Second)
		})
		redistest.Eventually(t, func() string { return expectValues(c.values(t, absent), "", token, token) })
	})

	t.Run("majority killed", func(t *testing.T) {
		held, absent := uniqueKey(t), uniqueKey(t)
		c.takeAll(t, c.engine, 10*time.Second, Held{Key: held, Token: token}, Held{Key: absent, Token: token})
		c.direct[0].Del(t.Context(), absent)
		c.servers[1].Kill()
		c.servers[2].Kill()
		locks := []Held{{Key: held, Token: token}, {Key: absent, Token: token}}
		got := c.engine.Renew(t.Context(), Renewal{TTL: 30 * time.Second, Locks: locks})
		for i, r := range got {
			var nq *NoQuorumError
			if !errors.As(r.Err, &nq) || r.Validity != 0 {
				t.Errorf("%s with 2 of 3 backends down: %v, validity %s; want a NoQuorumError", locks[i].Key, r.Err, r.Validity)
			} else if len(nq.Nodes) != 2 {
				t.Errorf("%s: %d backends named in %v, want the 2 down", locks[i].Key, len(nq.Nodes), nq)
			}
		}
		if exp, got := token, c.value(t, 0, held); exp != got {
			t.Errorf("%s on the live backend: %q, want %q: not rolled back", held, got, exp)
		}
		if pttl := c.direct[0].PTTL(t.Context(), held).Val(); pttl <= 20*time.Second {
			t.Errorf("%s on the live backend: PTTL %s, want renewed there", held, pttl)
		}
	})
}
