package test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestFailoverToAReplicaThatMissedTheLock: backend 0 is a master with a
// real replica (replicaof). A lock is granted on exactly a quorum including
// backend 0; the master dies before its replica got the write, the replica
// is promoted (REPLICAOF NO ONE) and takes the master's address. A second
// client, through the same proxy or through one started after the
// failover, must not get the lock while the first holds it: the promoted
// replica is quarantined for max_ttl, even with restart_quarantine off.
// (quorum's TestFailoverIsQuarantined runs the same scenario with the
// checks off, and a second holder gets the lock.)
func TestFailoverToAReplicaThatMissedTheLock(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 3)
	master, b, c := servers[0], servers[1], servers[2]
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strings.Split(master.Addr(), ":")[1])
	front := newFaultNet(t, []string{master.Addr()})
	args := []string{"-backends", "redis://" + front.Addr(0) + ",redis://" + b.Addr() + ",redis://" + c.Addr(),
		"-restart-quarantine=false", "-max-ttl", "20s", "-backend-timeout", "500ms"}
	first := startProxy(t, args...)
	ctx := t.Context()
	redistest.Eventually(t, func() string {
		r := replica.Client(t)
		if !strings.Contains(r.Info(ctx, "replication").Val(), "master_link_status:up") || r.Exists(ctx, "{lockproxy}:server").Val() != 1 {
			return "the replica has not copied the master's data set, marker included"
		}
		return ""
	})

	// C refuses the first holder (another token, briefly): the lock lands
	// on exactly the master and B, and the stopped replica misses it.
	c.Client(t).Set(ctx, "job", "someone", 1500*time.Millisecond)
	replica.Pause()
	if got := do(t, first.Client(t), "SET", "job", "first", "NX", "PX", 20000); got != "OK" {
		t.Fatalf("first holder: %q", got)
	}
	master.Kill()
	replica.Resume()
	if err := replica.Client(t).Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	front.Redirect(0, replica.Addr())
	redistest.Eventually(t, func() string {
		if c.Client(t).Exists(ctx, "job").Val() != 0 {
			return "C still holds the other token's key"
		}
		return ""
	})

	later := startProxy(t, args...)
	for name, p := range map[string]*proxyProcess{"the same proxy": first, "a proxy started after the failover": later} {
		if got := do(t, p.Client(t), "SET", "job", "second", "NX", "PX", 1000); got == "OK" {
			t.Fatalf("%s granted a second holder while the first holds the lock", name)
		}
		p.waitLog(t, regexp.MustCompile(`backend quarantined.*promoted`))
		if info := redisCLI(t, p.Addr, "INFO", "backends"); !strings.Contains(info, "backend0:addr="+front.Addr(0)+",state=quarantined") {
			t.Errorf("%s: INFO backends does not show the promoted replica quarantined:\n%s", name, info)
		}
	}
}

// TestReplicaBackendIsRefused: a replica listed as a backend does not count
// and is sent no lock commands; the log says why, once, in these words.
func TestReplicaBackendIsRefused(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 3)
	// A deployment whose third backend was made a replica since its set
	// was recorded (a first start records nothing until every backend
	// answers as a master).
	replica := redistest.Start(t)
	list := "redis://" + servers[0].Addr() + ",redis://" + servers[1].Addr() + ",redis://" + replica.Addr()
	first := startProxy(t, "-backends", list, "-restart-quarantine=false")
	waitForQuorum(t, first)
	first.Kill()
	if err := replica.Client(t).Do(t.Context(), "REPLICAOF", "127.0.0.1", strings.Split(servers[2].Addr(), ":")[1]).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() string {
		if !strings.Contains(replica.Client(t).Info(t.Context(), "replication").Val(), "master_link_status:up") {
			return "the replica does not follow its master yet"
		}
		return ""
	})
	p := startProxy(t, "-backends", list, "-restart-quarantine=false")
	line := p.waitLog(t, regexp.MustCompile(`.*it is a replica.*`))[0]
	const want = `level=ERROR msg="backend does not count toward quorum and is sent no lock commands: it is a replica, and lockproxy counts only masters; checked again on every reconnection (once promoted it counts after its quarantine)" backend=` +
		"%s role=slave"
	if exp := strings.Replace(want, "%s", replica.Addr(), 1); !strings.HasSuffix(line, exp) {
		t.Fatalf("log line:\n%s\nwant it to end with:\n%s", line, exp)
	}
	// The greeting's identity script (read only, on a replica) told it was
	// one; nothing runs on it after that.
	scripts := commandCalls(t, replica, "evalsha")
	if got := do(t, p.Client(t), "SET", "job", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("SET with two masters of three: %q", got)
	}
	if info := redisCLI(t, p.Addr, "INFO", "backends"); !strings.Contains(info, "backend2:addr="+replica.Addr()+",state=replica") {
		t.Errorf("INFO backends does not show the replica:\n%s", info)
	}
	if n := commandCalls(t, replica, "evalsha"); n != scripts {
		t.Errorf("the replica ran %d lock scripts", n-scripts)
	}
	if n := strings.Count(p.Log(), "it is a replica"); n != 1 {
		t.Errorf("%d log lines about the replica, want 1", n)
	}
}

// TestEvictingBackendIsLogged: a backend whose maxmemory-policy may evict
// keys with a TTL still counts, and the log says once why it must not.
func TestEvictingBackendIsLogged(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 2)
	evicting := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
	// A backend timeout that a loaded machine's greetings fit in: one that
	// timed out would leave the set unrecorded and the SET below refused.
	p := startProxy(t, "-backends", servers[0].URL()+","+servers[1].URL()+","+evicting.URL(), "-restart-quarantine=false",
		"-backend-timeout", "500ms")
	line := p.waitLog(t, regexp.MustCompile(`.*backend may evict locks.*`))[0]
	want := `level=WARN msg="backend may evict locks: its maxmemory-policy evicts keys when memory runs short, and an evicted lock can be granted twice; set maxmemory-policy noeviction (or no maxmemory)" backend=` +
		evicting.Addr() + " maxmemory_policy=volatile-lru"
	if !strings.HasSuffix(line, want) {
		t.Fatalf("log line:\n%s\nwant it to end with:\n%s", line, want)
	}
	if got := do(t, p.Client(t), "SET", "job", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if n := strings.Count(p.Log(), "backend may evict locks"); n != 1 {
		t.Errorf("%d log lines about eviction, want 1:\n%s", n, p.Log())
	}
	if strings.Contains(p.Log(), "backend="+servers[0].Addr()+" maxmemory_policy") {
		t.Error("a backend without maxmemory is logged as evicting")
	}
}
