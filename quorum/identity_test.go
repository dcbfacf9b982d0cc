package quorum

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestFailoverIsQuarantined: a lock held on exactly a quorum, one of whose
// masters fails over to a replica that missed the lock's write. The
// promoted replica must not vote for a second holder while the first
// holds the lock, through this engine or one started after the failover,
// even with restart_quarantine off (which trusts persistence, not
// replication). The control run, with the identity checks off, shows the
// second holder they prevent.
func TestFailoverIsQuarantined(t *testing.T) {
	for _, check := range []bool{true, false} {
		name := map[bool]string{true: "identity checked", false: "control: unchecked"}[check]
		t.Run(name, func(t *testing.T) {
			second := failover(t, !check)
			if check && second != nil {
				t.Fatalf("a second holder was granted the lock after the failover: %v", second)
			}
			if !check && second == nil {
				t.Fatal("the control run granted no second holder: the scenario shows nothing")
			}
		})
	}
}

// failover runs the scenario and returns the engines that granted a second
// holder (nil when none did).
func failover(t *testing.T, skipIdentity bool) []string {
	servers := redistest.StartN(t, 3)
	a, b, c := servers[0], servers[1], servers[2]
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strings.Split(a.Addr(), ":")[1])
	front := newRelay(t, a.Addr()) // the address of A's master, which moves to the replica
	cfg := Config{
		Backends:                 []string{front.URL(), b.URL(), c.URL()},
		NodeTimeout:              time.Second,
		MaxTTL:                   20 * time.Second,
		DisableRestartQuarantine: true,
		skipIdentity:             skipIdentity,
	}
	engine := newEngine(t, cfg)
	ctx := t.Context()
	key := uniqueKey(t)

	// The replica has everything A had, the marker included.
	waitFor(t, func() bool {
		return strings.Contains(replica.Client(t).Info(ctx, "replication").Val(), "master_link_status:up") &&
			replica.Client(t).Exists(ctx, markerKey).Val() == 1 || skipIdentity
	})
	// C refuses the first holder (another token, briefly), so that the lock
	// lands on exactly A and B; the replica misses it, being stopped.
	c.Client(t).Set(ctx, key, "someone", 1500*time.Millisecond)
	replica.Pause()
	if _, err := engine.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "first", TTL: 20 * time.Second}); err != nil {
		t.Fatalf("first holder: %v", err)
	}
	// A dies with the write unreplicated; the replica is promoted and takes
	// A's address.
	a.Kill()
	replica.Resume()
	if err := replica.Client(t).Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	front.to(replica.Addr())
	waitFor(t, func() bool { return c.Client(t).Exists(ctx, key).Val() == 0 })

	later := newEngine(t, cfg) // started after the failover: it never saw A
	var granted []string
	for name, e := range map[string]*Engine{"the same engine": engine, "an engine started after the failover": later} {
		// The replica's vote counts at once when unchecked: try until the
		// engine has reconnected to it.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			_, err := e.Lock(ctx, Lock{Op: OpAcquire, Keys: []string{key}, Token: "second " + name, TTL: time.Second})
			if err == nil {
				granted = append(granted, name)
				break
			}
			if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrNoQuorum) {
				t.Fatalf("%s: %v", name, err)
			}
			if !skipIdentity && e.Backends()[0].State == StateQuarantined {
				break // the promoted replica is known, and does not count
			}
			time.Sleep(50 * time.Millisecond) // the engine redials the moved address in its own time
		}
	}
	if !skipIdentity {
		for _, e := range []*Engine{engine, later} {
			if st := e.Backends()[0]; st.State != StateQuarantined || st.QuarantineLeft < 15*time.Second {
				t.Errorf("the promoted replica: %+v; want quarantined for about max_ttl", st)
			}
		}
		if n := engine.Backends()[0].Changes[ChangeFailover]; n != 1 {
			t.Errorf("failovers counted: %d, want 1", n)
		}
	}
	return granted
}
