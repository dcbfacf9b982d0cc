package test

import (
	"fmt"
	"strconv"
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
	// (1 s + backend_timeout) before a read of the witnesses proves
	// anything, the read period (1 s) in which the proxy notices the
	// restart, and 2 s of slack for a loaded machine: 6.5 s, against a
	// max_ttl of 60 s (24 h once it is the default).
	bound := lease + (lease/100 + 2*time.Millisecond) + time.Second + horizonBackendTimeout + time.Second + 2*time.Second
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
	t.Logf("restarted empty after only %v locks: counts again %v later (bound %v, max_ttl 60s)", lease, took.Round(time.Millisecond), bound)
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
	const maxTTL = 24 * time.Hour
	args := []string{"-backends", list, "-backend-timeout", horizonBackendTimeout.String(), "-max-ttl", maxTTL.String()}
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
		if st["state"] != "quarantined" || err != nil || time.Duration(s)*time.Second > time.Hour {
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
