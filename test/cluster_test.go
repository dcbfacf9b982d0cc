package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// clusterPair is two lockproxy instances in cluster mode over the same
// backends, two shard groups of three: each instance announces its own
// address, and both list both.
type clusterPair struct {
	servers []*redistest.Server
	proxies []*proxyProcess
}

// startClusterPair starts 6 backends and two proxies over them in cluster
// mode, with the backends as two shard groups of 3; then it kills one
// backend of the group of the contract's contended key, so that every
// lock on it is taken with a backend of its group down.
func startClusterPair(t *testing.T) *clusterPair {
	t.Helper()
	const groups, size = 2, 3
	servers := redistest.StartN(t, groups*size)
	addrs := freeAddrs(t, 2)
	nodes := strings.Join(addrs, ",")
	cp := &clusterPair{servers: servers}
	for _, addr := range addrs {
		args := append(groupFlags(servers, groups, size), "-restart-quarantine=false", "-backend-timeout", "500ms", "-cluster-nodes", nodes)
		cp.proxies = append(cp.proxies, startProxyOn(t, addr, listeningLine, nil, args...))
	}
	// The first started before the second listened: it gives the second
	// its slots once its probe finds it.
	for _, p := range cp.proxies {
		redistest.Eventually(t, func() string {
			if out := redisCLI(t, p.Addr, "CLUSTER", "INFO"); !strings.Contains(out, "cluster_size:2") {
				return "CLUSTER INFO of " + p.Addr + ": " + out
			}
			return ""
		})
	}
	servers[groupOf(contendedKey, groups)*size].Kill()
	return cp
}

// contendedKey is the key the compatibility contract's workers contend for.
const contendedKey = "compat:contended"

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago: a cluster's nodes must be named before they start.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}

// clusterAddrs are the node addresses a CLUSTER SLOTS answer names, in
// slot order.
func clusterAddrs(t *testing.T, slots []redis.ClusterSlot) []string {
	t.Helper()
	var out []string
	for _, s := range slots {
		if len(s.Nodes) != 1 {
			t.Fatalf("slots %d-%d: %d nodes, want one master and no replicas", s.Start, s.End, len(s.Nodes))
		}
		out = append(out, s.Nodes[0].Addr)
	}
	return out
}

// TestClusterGoRedis runs go-redis's ClusterClient, unchanged, against two
// proxy instances in cluster mode over two shard groups of 3 backends,
// one killed in the contended key's group:
// each client is seeded with one instance and finds both; workers on
// clients seeded differently contend for one lock (checkLockLog proves
// no overlap); keys spread over both instances by slot; a command whose
// keys hash to different slots gets CROSSSLOT; and when the instance that
// serves the contended key's slot is killed, the clients go on through the
// other.
func TestClusterGoRedis(t *testing.T) {
	clientTest(t)
	cp := startClusterPair(t)
	ctx := t.Context()
	addrs := []string{cp.proxies[0].Addr, cp.proxies[1].Addr}
	newClient := func(seed string) *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{seed}, MaxRetryBackoff: 50 * time.Millisecond})
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	for _, seed := range addrs {
		slots, err := newClient(seed).ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := clusterAddrs(t, slots); !slices.Equal(got, addrs) || slots[0].Start != 0 || slots[1].End != 16383 {
			t.Fatalf("CLUSTER SLOTS through %s: %+v; want both instances, in order, covering every slot", seed, slots)
		}
	}

	log := filepath.Join(t.TempDir(), "holders.log")
	const workers, rounds = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		cc := newClient(addrs[w%2])
		wg.Go(func() {
			if err := clusterContend(ctx, cc, log, rounds, w); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkLockLog(t, log, workers*rounds)

	// Keys spread over both instances, by the slot of each.
	cc := newClient(addrs[0])
	before := []int64{acquiredOn(t, addrs[0]), acquiredOn(t, addrs[1])}
	for i := range 64 {
		if err := cc.SetArgs(ctx, fmt.Sprintf("spread:%d", i), "me", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err(); err != nil {
			t.Fatalf("SET spread:%d: %v", i, err)
		}
	}
	for i, addr := range addrs {
		if n := acquiredOn(t, addr) - before[i]; n < 16 {
			t.Errorf("%s granted %d of the 64 spread keys", addr, n)
		}
	}
	if err := cc.Do(ctx, "DEL", "a", "b").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT ") {
		t.Errorf("DEL a b: %v; want CROSSSLOT", err)
	}
	if n, err := cc.Del(ctx, "{spread}a", "{spread}b").Result(); err != nil || n != 0 {
		t.Errorf("DEL {spread}a {spread}b: %d, %v", n, err)
	}

	// The instance serving the contended key's slot goes; the other serves
	// it once the client has refreshed its map.
	slot, err := cc.ClusterKeySlot(ctx, "compat:contended").Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := 0
	if slot > 8191 {
		owner = 1
	}
	cp.proxies[owner].Kill()
	// go-redis refreshes its map every ClusterStateReloadInterval (60 s by
	// default), not on a refused connection: docs/cluster.md says to shorten it.
	both := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetryBackoff: 50 * time.Millisecond, ClusterStateReloadInterval: 200 * time.Millisecond})
	defer both.Close()
	redistest.Eventually(t, func() string {
		err := both.SetArgs(ctx, "compat:contended", "after", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err()
		if err != nil {
			return "SET NX after the instance went: " + err.Error()
		}
		return ""
	})
	slots, err := both.ClusterSlots(ctx).Result()
	if err != nil || !slices.Equal(clusterAddrs(t, slots), addrs[1-owner:2-owner]) {
		t.Errorf("CLUSTER SLOTS after %s went: %+v, %v; want the other alone", addrs[owner], slots, err)
	}
}

// acquiredOn is the acquisitions the proxy at addr granted so far.
func acquiredOn(t *testing.T, addr string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^lock_acquired:(\d+)`).FindStringSubmatch(redisCLI(t, addr, "INFO", "stats"))
	if m == nil {
		t.Fatalf("no lock_acquired in INFO stats of %s", addr)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// clusterContend is the contend contract of compat_test.go with go-redis's
// cluster client: SET NX PX to take "compat:contended", Lua
// compare-and-delete to release it.
func clusterContend(ctx context.Context, cc *redis.ClusterClient, log string, rounds, worker int) error {
	unlock := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for round := range rounds {
		token := fmt.Sprintf("w%d-%d", worker, round)
		for {
			ok, err := cc.SetNX(ctx, "compat:contended", token, 10*time.Second).Result()
			if err != nil {
				return err
			}
			if ok {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		who := fmt.Sprintf("%d-%d", worker, round)
		fmt.Fprintf(f, "enter %s\n", who)
		fmt.Fprintf(f, "exit %s\n", who)
		n, err := unlock.Run(ctx, cc, []string{"compat:contended"}, token).Int()
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("release: the lock was not held")
		}
	}
	return nil
}

// clusterSuite runs each client's suite (the contract of compat_test.go,
// ADDR being the seed instances) against two proxy instances in cluster
// mode over two shard groups of 3 backends, one killed in the contended
// key's group: the contending workers are seeded with the two instances in
// turn, the scenario with the first, and every program hears of both
// instances in LOCKPROXY_CLUSTER_NODES.
func clusterSuite(t *testing.T, clients []compatClient) {
	t.Helper()
	cp := startClusterPair(t)
	addrs := cp.proxies[0].Addr + "," + cp.proxies[1].Addr
	for _, client := range clients {
		t.Run(client.name, func(t *testing.T) {
			runSuite(t, addrs, client, []string{"LOCKPROXY_CLUSTER_NODES=" + addrs})
		})
	}
}

// TestClusterPython runs redis-py's RedisCluster (8.1.0 in RESP2 and
// RESP3, 5.3.1 in RESP2) with its Lock, unchanged: clusterSuite.
func TestClusterPython(t *testing.T) {
	clientTest(t)
	python, interpreter, dir := pyInterpreter(t)
	program := filepath.Join(dir, "redispy_cluster.py")
	if _, err := os.Stat(program); err != nil { // for go test's cache
		t.Fatal(err)
	}
	var clients []compatClient
	for _, v := range []struct{ venv, version, protocol string }{{"redis8", "8.1.0", "2"}, {"redis8", "8.1.0", "3"}, {"redis5", "5.3.1", "2"}} {
		venv := pyVenv(t, python, interpreter, dir, v.venv)
		clients = append(clients, compatClient{name: fmt.Sprintf("redis-py-%s-RedisCluster-resp%s", v.version, v.protocol), command: func(args ...string) *exec.Cmd {
			cmd := exec.Command(venv, append([]string{program}, args...)...)
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1", "REDISPY_PROTOCOL="+v.protocol)
			return cmd
		}})
	}
	clusterSuite(t, clients)
}

// TestClusterNode runs ioredis 5's Cluster client with the lock recipe,
// unchanged: clusterSuite.
func TestClusterNode(t *testing.T) {
	clientTest(t)
	dir := nodeModules(t)
	clusterSuite(t, []compatClient{nodeClient(dir, "ioredis-5-Cluster-recipe", "ioredis-cluster.js")})
}

// TestClusterJava runs JedisCluster (Jedis 8) and Lettuce 6's
// RedisClusterClient in RESP3 and RESP2 with the lock recipe, unchanged:
// clusterSuite.
func TestClusterJava(t *testing.T) {
	clientTest(t)
	dir := javaBuild(t)
	program := func(name, module, main string, props ...string) compatClient {
		return compatClient{name: name, command: func(args ...string) *exec.Cmd {
			jvm := slices.Concat(javaFlags, props, []string{"-cp", javaClasspath(dir, module), main}, args)
			return exec.Command("java", jvm...)
		}}
	}
	clusterSuite(t, []compatClient{
		program("jedis-8-JedisCluster-recipe", "jedis-8", "compat.JedisClusterRecipe"),
		program("lettuce-6-RedisClusterClient-recipe-resp3", "lettuce-6", "compat.LettuceClusterRecipe", "-Dcompat.resp=3"),
		program("lettuce-6-RedisClusterClient-recipe-resp2", "lettuce-6", "compat.LettuceClusterRecipe", "-Dcompat.resp=2"),
	})
}
