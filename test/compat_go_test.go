package test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestCompatGo runs the Go lock clients of BRIEF §5 in process, unchanged and
// with their default options: the go-redis v9 recipe, bsm/redislock v0.9.4
// and go-redsync/redsync v4 with one pool (go-redis v9). Every row runs
// against one plain redis-server ("direct", the control that shows what the
// client does against Redis itself) and against the proxy over 5 real
// backends, with all of them up and with one killed, as compatSuite does.
// The contention rows follow the contend contract of compat_test.go: several
// workers take one lock in turn and log "enter"/"exit" lines that
// checkLockLog proves never overlap.
func TestCompatGo(t *testing.T) {
	clientTest(t)
	t.Run("direct", func(t *testing.T) {
		s := redistest.Start(t)
		runGoRows(t, goTarget{addr: s.Addr()})
	})
	for _, down := range []int{0, 1} {
		t.Run(fmt.Sprintf("proxy/backends_down=%d", down), func(t *testing.T) {
			c := newCluster(t, 5)
			for i := range down {
				c.servers[i].Kill()
			}
			runGoRows(t, goTarget{addr: c.proxy.Addr, cluster: c})
		})
	}
	t.Run("proxy/backends_down=3", func(t *testing.T) {
		c := newCluster(t, 5)
		for i := range 3 {
			c.servers[i].Kill()
		}
		t.Run("go-redis/noquorum-not-retried", func(t *testing.T) { goRedisNoQuorum(t, c.proxy.Addr) })
		t.Run("redsync/noquorum", func(t *testing.T) { redsyncNoQuorum(t, c.proxy.Addr) })
	})
}

// proxyPendingGo lists the rows that fail through the proxy only because it
// does not recognise yet a script the library sends. Through the proxy such a
// row must fail with the proxy's "does not run this script" error; once it
// passes, the test fails until the row is removed from this list, so the
// list never hides a failure. The direct rows always run as they are. Empty
// since the proxy recognises bsm/redislock's obtain and pttl scripts and
// redsync's release (-1) and extend-or-reacquire scripts.
var proxyPendingGo = []string{}

// pendingScriptError is what the proxy answers to a script it does not
// recognise (proxy/scripts.go).
const pendingScriptError = "does not run this script"

// goTarget is where the clients connect: one redis-server or the proxy.
type goTarget struct {
	addr    string
	cluster *cluster // nil for one redis-server
}

// goEnv is what a row gets: a fresh key of its own and clients of the target.
type goEnv struct {
	t       *testing.T
	addr    string
	key     string
	cluster *cluster // nil for one redis-server
}

// backends describes what each backend holds for the row's key, for
// failure messages of rows through the proxy.
func (e *goEnv) backends() string {
	if e.cluster == nil {
		return ""
	}
	return fmt.Sprintf(" (backends hold %q)", e.cluster.held(e.t, e.key))
}

// client returns a go-redis v9 client with the options users leave as they
// are: RESP3 via HELLO 3, MaxRetries 3 (the default).
func (e *goEnv) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	e.t.Cleanup(func() { c.Close() })
	return c
}

// goRow is one check of one client, named "<client>/<check>". run returns
// the first thing that is not as it is against one Redis.
type goRow struct {
	name string
	run  func(ctx context.Context, e *goEnv) error
}

var goRows = []goRow{
	{"go-redis/scenario", goRedisScenario},
	{"go-redis/contention", goRedisContention},
	{"go-redis-watch/scenario", goRedisWatchScenario},
	{"go-redis-watch/contention", goRedisWatchContention},
	{"bsm-redislock/obtain-refresh-ttl-release", bsmObtainRefreshTTLRelease},
	{"bsm-redislock/held-elsewhere", bsmHeldElsewhere},
	{"bsm-redislock/release-by-non-owner", bsmReleaseByNonOwner},
	{"bsm-redislock/reobtain-same-token", bsmReobtainSameToken},
	{"bsm-redislock/contention", bsmContention},
	{"redsync/lock-extend-valid", redsyncLockExtendValid},
	{"redsync/held-elsewhere", redsyncHeldElsewhere},
	{"redsync/unlock", redsyncUnlock},
	{"redsync/unlock-by-other-value", redsyncUnlockByOtherValue},
	{"redsync/unlock-after-expiry", redsyncUnlockAfterExpiry},
	{"redsync/extend-setnx", redsyncExtendSetNX},
	{"redsync/contention", redsyncContention},
}

// runGoRows runs every row against target, inverting the expectation of
// the rows in proxyPendingGo when target is the proxy.
func runGoRows(t *testing.T, target goTarget) {
	for _, pending := range proxyPendingGo {
		if !slices.ContainsFunc(goRows, func(r goRow) bool { return r.name == pending }) {
			t.Errorf("proxyPendingGo names %q, which is no row", pending)
		}
	}
	for _, row := range goRows {
		t.Run(row.name, func(t *testing.T) {
			e := &goEnv{t: t, addr: target.addr, key: "compat:go:" + row.name, cluster: target.cluster}
			err := row.run(t.Context(), e)
			pending := target.cluster != nil && slices.Contains(proxyPendingGo, row.name)
			switch {
			case !pending && err != nil:
				t.Fatal(err)
			case pending && err == nil:
				t.Fatalf("%s passes through the proxy now: remove it from proxyPendingGo", row.name)
			case pending && !strings.Contains(err.Error(), pendingScriptError):
				t.Fatalf("%s is in proxyPendingGo, which allows only the proxy's %q error, but it failed so: %v",
					row.name, pendingScriptError, err)
			case pending:
				t.Logf("pending (in proxyPendingGo): %v", err)
			}
		})
	}
}

// token returns a random lock value for the recipe.
func token() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// getValue returns key's value, "" when it is absent.
func getValue(ctx context.Context, cli *redis.Client, key string) (string, error) {
	v, err := cli.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// expectValue checks that key holds want ("" for absent).
func expectValue(ctx context.Context, cli *redis.Client, key, want, when string) error {
	got, err := getValue(ctx, cli, key)
	if err != nil || got != want {
		return fmt.Errorf("%s: GET %s = %q, %v; expected %q", when, key, got, err, want)
	}
	return nil
}

// waitAbsent waits until key has expired, then a little longer: through
// the proxy, GET is nil once fewer than a quorum hold the key, and the
// backends' copies expire a few milliseconds apart.
func waitAbsent(ctx context.Context, cli *redis.Client, key string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := getValue(ctx, cli, key)
		if err == nil && v == "" {
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has not expired: GET = %q, %v", key, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// contend runs workers goroutines that each take the lock rounds times with
// hold (which returns a release function), log each holding as the contend
// contract does, and release it; then checkLockLog proves the holdings never
// overlapped. It returns the first worker error. A worker's failure cancels
// the others' ctx, so a lock left held does not keep them waiting.
func contend(ctx context.Context, e *goEnv, workers, rounds int,
	hold func(ctx context.Context, worker int) (release func() error, err error)) error {
	path := filepath.Join(e.t.TempDir(), "holders.log")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for w := range workers {
		wg.Go(func() {
			log, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				fail(err)
				return
			}
			defer log.Close()
			for r := range rounds {
				release, err := hold(ctx, w)
				if err != nil {
					fail(fmt.Errorf("worker %d round %d: taking the lock: %w", w, r, err))
					return
				}
				if _, err := fmt.Fprintf(log, "enter %d-%d\n", w, r); err != nil {
					fail(err)
					return
				}
				time.Sleep(time.Duration(mathrand.IntN(500)) * time.Microsecond)
				if _, err := fmt.Fprintf(log, "exit %d-%d\n", w, r); err != nil {
					fail(err)
					return
				}
				if err := release(); err != nil {
					fail(fmt.Errorf("worker %d round %d: releasing the lock: %w", w, r, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		// Still prove the holdings so far never overlapped: an overlap is
		// the worse failure, whatever stopped the workers.
		if logged, err := os.ReadFile(path); err == nil {
			checkLockLog(e.t, path, strings.Count(string(logged), "enter "))
		}
		return first
	}
	checkLockLog(e.t, path, workers*rounds)
	return nil
}

// retryPause is how long a contending worker waits before trying again.
func retryPause() time.Duration {
	return time.Duration(500+mathrand.IntN(1500)) * time.Microsecond
}

const contendWorkers, contendRounds = 4, 25

// ---- go-redis v9 recipe ----

// The recipe's scripts as a go-redis user writes them (redis.io's
// distributed-locks page), sent by Script.Run: EVALSHA, then EVAL on NOSCRIPT.
var (
	recipeRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
else
	return 0
end`)
	recipeExtend = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("pexpire", KEYS[1], ARGV[2])
else
	return 0
end`)
)

// goRedisScenario: acquire (SET NX EX and SET NX PX), extend, refusals of a
// second owner, release.
func goRedisScenario(ctx context.Context, e *goEnv) error {
	cli, k := e.client(), e.key
	a, b := token(), token()
	// SetNX with whole seconds sends "set k v ex 10 nx".
	if ok, err := cli.SetNX(ctx, k, a, 10*time.Second).Result(); err != nil || !ok {
		return fmt.Errorf("SetNX by the first owner: %v, %v; expected true", ok, err)
	}
	if ok, err := cli.SetNX(ctx, k, b, 10*time.Second).Result(); err != nil || ok {
		return fmt.Errorf("SetNX while held: %v, %v; expected false", ok, err)
	}
	// SetArgs NX with milliseconds sends "set k v px 1500 nx".
	if v, err := cli.SetArgs(ctx, k, b, redis.SetArgs{Mode: "NX", TTL: 1500 * time.Millisecond}).Result(); !errors.Is(err, redis.Nil) {
		return fmt.Errorf("SET NX PX while held: %q, %v; expected redis.Nil", v, err)
	}
	if n, err := recipeExtend.Run(ctx, cli, []string{k}, a, 20000).Int(); err != nil || n != 1 {
		return fmt.Errorf("extend by the owner: %d, %v; expected 1", n, err)
	}
	if ttl, err := cli.PTTL(ctx, k).Result(); err != nil || ttl <= 10*time.Second || ttl > 20*time.Second {
		return fmt.Errorf("PTTL after extending to 20s: %v, %v", ttl, err)
	}
	if n, err := recipeExtend.Run(ctx, cli, []string{k}, b, 20000).Int(); err != nil || n != 0 {
		return fmt.Errorf("extend by another token: %d, %v; expected 0", n, err)
	}
	if n, err := recipeRelease.Run(ctx, cli, []string{k}, b).Int(); err != nil || n != 0 {
		return fmt.Errorf("release by another token: %d, %v; expected 0", n, err)
	}
	if err := expectValue(ctx, cli, k, a, "after the refused release"); err != nil {
		return err
	}
	if n, err := recipeRelease.Run(ctx, cli, []string{k}, a).Int(); err != nil || n != 1 {
		return fmt.Errorf("release by the owner: %d, %v; expected 1", n, err)
	}
	if err := expectValue(ctx, cli, k, "", "after release"); err != nil {
		return err
	}
	if n, err := recipeRelease.Run(ctx, cli, []string{k}, a).Int(); err != nil || n != 0 {
		return fmt.Errorf("second release: %d, %v; expected 0", n, err)
	}
	if v, err := cli.SetArgs(ctx, k, b, redis.SetArgs{Mode: "NX", TTL: 1500 * time.Millisecond}).Result(); err != nil || v != "OK" {
		return fmt.Errorf("SET NX PX once free: %q, %v; expected OK", v, err)
	}
	if n, err := recipeRelease.Run(ctx, cli, []string{k}, b).Int(); err != nil || n != 1 {
		return fmt.Errorf("release by the second owner: %d, %v; expected 1", n, err)
	}
	return nil
}

func goRedisContention(ctx context.Context, e *goEnv) error {
	return setNXContention(ctx, e, func(cli *redis.Client, tok string) error {
		if n, err := recipeRelease.Run(ctx, cli, []string{e.key}, tok).Int(); err != nil || n != 1 {
			return fmt.Errorf("%d, %v", n, err)
		}
		return nil
	})
}

// setNXContention is the contention row of a recipe that acquires with
// SetNX and releases with release, which returns what went wrong.
func setNXContention(ctx context.Context, e *goEnv, release func(cli *redis.Client, tok string) error) error {
	clients := make([]*redis.Client, contendWorkers)
	for i := range clients {
		clients[i] = e.client()
	}
	return contend(ctx, e, contendWorkers, contendRounds, func(ctx context.Context, w int) (func() error, error) {
		// One token per holding, kept across retries as redsync and
		// redislock keep theirs.
		cli, tok := clients[w], token()
		for {
			ok, err := cli.SetNX(ctx, e.key, tok, 10*time.Second).Result()
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			time.Sleep(retryPause())
		}
		return func() error {
			if err := release(cli, tok); err != nil {
				return fmt.Errorf("release by the holder %s: %v%s", tok, err, e.backends())
			}
			return nil
		}, nil
	})
}

// errNotOwner is what watchRecipe returns when the key holds another value.
var errNotOwner = errors.New("the lock is not ours")

// watchRecipe is go-redis's optimistic transaction (Client.Watch, Tx.Get,
// Tx.TxPipelined) run on key when it holds tok: WATCH, GET, and MULTI, op,
// EXEC. It returns errNotOwner when the GET saw another value, and
// redis.TxFailedErr when EXEC answered that the key changed.
func watchRecipe(ctx context.Context, cli *redis.Client, key, tok string, op func(redis.Pipeliner)) error {
	return cli.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) || (err == nil && v != tok) {
			return errNotOwner
		}
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			op(p)
			return nil
		})
		return err
	}, key)
}

// goRedisWatchScenario: acquire with SET NX PX, extend and release with
// the WATCH recipe, refused for another token.
func goRedisWatchScenario(ctx context.Context, e *goEnv) error {
	cli, k := e.client(), e.key
	a, b := token(), token()
	if ok, err := cli.SetNX(ctx, k, a, 10*time.Second).Result(); err != nil || !ok {
		return fmt.Errorf("SetNX by the first owner: %v, %v; expected true", ok, err)
	}
	pexpire := func(p redis.Pipeliner) { p.PExpire(ctx, k, 20*time.Second) }
	del := func(p redis.Pipeliner) { p.Del(ctx, k) }
	if err := watchRecipe(ctx, cli, k, a, pexpire); err != nil {
		return fmt.Errorf("extend by the owner: %v", err)
	}
	if ttl, err := cli.PTTL(ctx, k).Result(); err != nil || ttl <= 10*time.Second || ttl > 20*time.Second {
		return fmt.Errorf("PTTL after extending to 20s: %v, %v", ttl, err)
	}
	if err := watchRecipe(ctx, cli, k, b, pexpire); !errors.Is(err, errNotOwner) {
		return fmt.Errorf("extend by another token: %v; expected errNotOwner", err)
	}
	if err := watchRecipe(ctx, cli, k, b, del); !errors.Is(err, errNotOwner) {
		return fmt.Errorf("release by another token: %v; expected errNotOwner", err)
	}
	if err := expectValue(ctx, cli, k, a, "after the refused release"); err != nil {
		return err
	}
	if err := watchRecipe(ctx, cli, k, a, del); err != nil {
		return fmt.Errorf("release by the owner: %v", err)
	}
	if err := expectValue(ctx, cli, k, "", "after release"); err != nil {
		return err
	}
	if err := watchRecipe(ctx, cli, k, a, del); !errors.Is(err, errNotOwner) {
		return fmt.Errorf("second release: %v; expected errNotOwner", err)
	}
	return nil
}

func goRedisWatchContention(ctx context.Context, e *goEnv) error {
	return setNXContention(ctx, e, func(cli *redis.Client, tok string) error {
		return watchRecipe(ctx, cli, e.key, tok, func(p redis.Pipeliner) { p.Del(ctx, e.key) })
	})
}

// writeLog is a net.Conn that records what the client writes.
type writeLog struct {
	net.Conn
	mu  *sync.Mutex
	out *strings.Builder
}

func (c writeLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// goRedisNoQuorum: with 3 of 5 backends down, a default go-redis client
// (MaxRetries 3) sees NOQUORUM at once and does not retry it: go-redis
// retries LOADING, READONLY, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, NOREPLICAS
// and connection errors (error.go shouldRetry), so each command must be on
// the wire exactly once.
func goRedisNoQuorum(t *testing.T, addr string) {
	var (
		mu    sync.Mutex
		wrote strings.Builder
	)
	cli := redis.NewClient(&redis.Options{
		Addr: addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return writeLog{Conn: c, mu: &mu, out: &wrote}, nil
		},
	})
	t.Cleanup(func() { cli.Close() })
	sent := func(command string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(wrote.String(), fmt.Sprintf("$%d\r\n%s\r\n", len(command), command))
	}
	ctx, key := t.Context(), "compat:go:noquorum"

	ok, err := cli.SetNX(ctx, key, token(), 10*time.Second).Result()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM ") {
		t.Fatalf("SetNX with 3 of 5 backends down: %v, %v; expected a NOQUORUM error", ok, err)
	}
	if n := sent("set"); n != 1 {
		t.Errorf("go-redis sent SET %d times for one SetNX answered NOQUORUM, expected once (not retried)", n)
	}
	n, err := recipeRelease.Run(ctx, cli, []string{key}, token()).Int()
	if err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM ") {
		t.Fatalf("release script with 3 of 5 backends down: %d, %v; expected a NOQUORUM error", n, err)
	}
	if evalsha, eval := sent("evalsha"), sent("eval"); evalsha != 1 || eval != 1 {
		t.Errorf("go-redis sent EVALSHA %d and EVAL %d times for one Script.Run answered NOQUORUM, expected once each", evalsha, eval)
	}
	t.Logf("NOQUORUM as go-redis reports it: %v", err)
}

// ---- bsm/redislock v0.9.4 ----

func bsmObtainRefreshTTLRelease(ctx context.Context, e *goEnv) error {
	cli := e.client()
	locker := redislock.New(cli)
	lock, err := locker.Obtain(ctx, e.key, 10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("Obtain: %w", err)
	}
	if err := expectValue(ctx, cli, e.key, lock.Token(), "after Obtain"); err != nil {
		return err
	}
	if ttl, err := lock.TTL(ctx); err != nil || ttl <= 5*time.Second || ttl > 10*time.Second {
		return fmt.Errorf("TTL after Obtain for 10s: %v, %v", ttl, err)
	}
	if err := lock.Refresh(ctx, 20*time.Second, nil); err != nil {
		return fmt.Errorf("Refresh: %w", err)
	}
	if ttl, err := lock.TTL(ctx); err != nil || ttl <= 10*time.Second || ttl > 20*time.Second {
		return fmt.Errorf("TTL after Refresh to 20s: %v, %v", ttl, err)
	}
	if err := lock.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := expectValue(ctx, cli, e.key, "", "after Release"); err != nil {
		return err
	}
	if err := lock.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		return fmt.Errorf("second Release: %v; expected ErrLockNotHeld", err)
	}
	if err := lock.Refresh(ctx, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("Refresh after Release: %v; expected ErrNotObtained", err)
	}
	if ttl, err := lock.TTL(ctx); err != nil || ttl != 0 {
		return fmt.Errorf("TTL after Release: %v, %v; expected 0", ttl, err)
	}
	return nil
}

// bsmHeldElsewhere: a second Obtain fails without and with a retry strategy,
// and one that retries gets the lock once it is released.
func bsmHeldElsewhere(ctx context.Context, e *goEnv) error {
	cli := e.client()
	locker := redislock.New(cli)
	held, err := locker.Obtain(ctx, e.key, 10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("Obtain: %w", err)
	}
	if _, err := locker.Obtain(ctx, e.key, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("second Obtain while held: %v; expected ErrNotObtained", err)
	}
	retry := &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(10*time.Millisecond), 3)}
	if _, err := locker.Obtain(ctx, e.key, 10*time.Second, retry); !errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("second Obtain with 3 retries while held: %v; expected ErrNotObtained", err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- held.Release(ctx)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := locker.Obtain(waitCtx, e.key, 10*time.Second,
		&redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
	if err := <-released; err != nil {
		return fmt.Errorf("Release by the first holder: %w", err)
	}
	if err != nil {
		return fmt.Errorf("Obtain retrying until the holder released: %w", err)
	}
	if err := next.Release(ctx); err != nil {
		return fmt.Errorf("Release by the second holder: %w", err)
	}
	return nil
}

// bsmReleaseByNonOwner: a lock whose key is now held with another token can
// neither release nor refresh it, and has no TTL.
func bsmReleaseByNonOwner(ctx context.Context, e *goEnv) error {
	cli := e.client()
	locker := redislock.New(cli)
	stale, err := locker.Obtain(ctx, e.key, 10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("Obtain: %w", err)
	}
	if err := stale.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	owner, err := locker.Obtain(ctx, e.key, 10*time.Second, &redislock.Options{Metadata: ":owner"})
	if err != nil {
		return fmt.Errorf("Obtain by the new owner: %w", err)
	}
	if err := stale.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		return fmt.Errorf("Release by a non-owner: %v; expected ErrLockNotHeld", err)
	}
	if err := stale.Refresh(ctx, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("Refresh by a non-owner: %v; expected ErrNotObtained", err)
	}
	if ttl, err := stale.TTL(ctx); err != nil || ttl != 0 {
		return fmt.Errorf("TTL of a non-owner: %v, %v; expected 0", ttl, err)
	}
	if err := expectValue(ctx, cli, e.key, owner.Token()+owner.Metadata(), "after the refused release"); err != nil {
		return err
	}
	if err := owner.Release(ctx); err != nil {
		return fmt.Errorf("Release by the owner: %w", err)
	}
	return nil
}

// bsmReobtainSameToken: Obtain with the Token of the lock held renews it
// (the value's first len(Token) bytes match), with its new metadata and TTL;
// another Token is refused.
func bsmReobtainSameToken(ctx context.Context, e *goEnv) error {
	cli := e.client()
	locker := redislock.New(cli)
	tok := token()
	first, err := locker.Obtain(ctx, e.key, 10*time.Second, &redislock.Options{Token: tok, Metadata: ":one"})
	if err != nil {
		return fmt.Errorf("Obtain with a Token: %w", err)
	}
	again, err := locker.Obtain(ctx, e.key, 20*time.Second, &redislock.Options{Token: tok, Metadata: ":two"})
	if err != nil {
		return fmt.Errorf("Obtain again with the same Token: %w", err)
	}
	if err := expectValue(ctx, cli, e.key, tok+":two", "after re-obtaining"); err != nil {
		return err
	}
	if ttl, err := again.TTL(ctx); err != nil || ttl <= 10*time.Second || ttl > 20*time.Second {
		return fmt.Errorf("TTL after re-obtaining for 20s: %v, %v", ttl, err)
	}
	if _, err := locker.Obtain(ctx, e.key, 10*time.Second, &redislock.Options{Token: token(), Metadata: ":two"}); !errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("Obtain with another Token: %v; expected ErrNotObtained", err)
	}
	// The first lock's value (tok:one) is no longer the one held.
	if err := first.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		return fmt.Errorf("Release by the lock re-obtained over: %v; expected ErrLockNotHeld", err)
	}
	if err := again.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return expectValue(ctx, cli, e.key, "", "after Release")
}

func bsmContention(ctx context.Context, e *goEnv) error {
	lockers := make([]*redislock.Client, contendWorkers)
	for i := range lockers {
		lockers[i] = redislock.New(e.client())
	}
	return contend(ctx, e, contendWorkers, contendRounds, func(ctx context.Context, w int) (func() error, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		lock, err := lockers[w].Obtain(ctx, e.key, 10*time.Second,
			&redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)})
		if err != nil {
			return nil, err
		}
		return func() error {
			if err := lock.Release(context.WithoutCancel(ctx)); err != nil {
				return fmt.Errorf("Release by the holder %s: %w%s", lock.Token(), err, e.backends())
			}
			return nil
		}, nil
	})
}

// ---- go-redsync/redsync v4 with one pool ----

func newRedsync(e *goEnv) (*redsync.Redsync, *redis.Client) {
	cli := e.client()
	return redsync.New(redsyncgoredis.NewPool(cli)), cli
}

// expectNotValid checks that Valid says m does not hold its lock: with one
// pool, a GET that does not return m's value counts as a node taken, so
// Valid answers false with ErrTaken.
func expectNotValid(ctx context.Context, m *redsync.Mutex, what string) error {
	var taken *redsync.ErrTaken
	if ok, err := m.ValidContext(ctx); ok || !errors.As(err, &taken) {
		return fmt.Errorf("Valid of %s: %v, %v; expected false with ErrTaken", what, ok, err)
	}
	return nil
}

// redsyncLockExtendValid: Lock, Valid, Extend, and an Extend refused once
// the lock is lost. Touches none of the scripts still pending.
func redsyncLockExtendValid(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key)
	start := time.Now()
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if m.Value() == "" || m.Until().Before(start.Add(7*time.Second)) || m.Until().After(start.Add(8*time.Second)) {
		return fmt.Errorf("after Lock with the default 8s expiry: value %q, until %s after the start", m.Value(), m.Until().Sub(start))
	}
	if err := expectValue(ctx, cli, e.key, m.Value(), "after Lock"); err != nil {
		return err
	}
	if ok, err := m.ValidContext(ctx); err != nil || !ok {
		return fmt.Errorf("Valid while held: %v, %v; expected true", ok, err)
	}
	before := m.Until()
	time.Sleep(20 * time.Millisecond)
	if ok, err := m.ExtendContext(ctx); err != nil || !ok {
		return fmt.Errorf("Extend: %v, %v; expected true", ok, err)
	}
	if !m.Until().After(before) {
		return fmt.Errorf("Extend did not move Until: %s then %s", before, m.Until())
	}
	if ttl, err := cli.PTTL(ctx, e.key).Result(); err != nil || ttl <= 7*time.Second || ttl > 8*time.Second {
		return fmt.Errorf("PTTL after Extend: %v, %v", ttl, err)
	}
	// Lose the lock (an administrator's DEL): Extend and Valid say so.
	if err := cli.Del(ctx, e.key).Err(); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	var taken *redsync.ErrTaken
	if ok, err := m.ExtendContext(ctx); ok || !errors.As(err, &taken) {
		return fmt.Errorf("Extend of a lost lock: %v, %v; expected false with ErrTaken", ok, err)
	}
	return expectNotValid(ctx, m, "a lost lock")
}

// redsyncHeldElsewhere: a second mutex on the same name fails with ErrTaken,
// by TryLock and by Lock after its tries.
func redsyncHeldElsewhere(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key)
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	var taken *redsync.ErrTaken
	if err := rs.NewMutex(e.key).TryLockContext(ctx); !errors.As(err, &taken) {
		return fmt.Errorf("TryLock while held: %v; expected ErrTaken", err)
	}
	other := rs.NewMutex(e.key, redsync.WithTries(3), redsync.WithRetryDelay(10*time.Millisecond))
	if err := other.LockContext(ctx); !errors.As(err, &taken) {
		return fmt.Errorf("Lock with 3 tries while held: %v; expected ErrTaken", err)
	}
	if err := expectNotValid(ctx, other, "the mutex that failed"); err != nil {
		return err
	}
	return expectValue(ctx, cli, e.key, m.Value(), "after the failed attempts")
}

func redsyncUnlock(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key)
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if ok, err := m.UnlockContext(ctx); err != nil || !ok {
		return fmt.Errorf("Unlock: %v, %v; expected true", ok, err)
	}
	if err := expectValue(ctx, cli, e.key, "", "after Unlock"); err != nil {
		return err
	}
	if err := expectNotValid(ctx, m, "a mutex after Unlock"); err != nil {
		return err
	}
	next := rs.NewMutex(e.key)
	if err := next.TryLockContext(ctx); err != nil {
		return fmt.Errorf("TryLock after Unlock: %w", err)
	}
	if ok, err := next.UnlockContext(ctx); err != nil || !ok {
		return fmt.Errorf("Unlock by the second holder: %v, %v; expected true", ok, err)
	}
	return nil
}

// redsyncUnlockByOtherValue: a mutex made WithValue of another value cannot
// unlock the lock (its release script answers 0: ErrTaken).
func redsyncUnlockByOtherValue(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key)
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	var taken *redsync.ErrTaken
	if ok, err := rs.NewMutex(e.key, redsync.WithValue("another-value")).UnlockContext(ctx); ok || !errors.As(err, &taken) {
		return fmt.Errorf("Unlock by another value: %v, %v; expected false with ErrTaken", ok, err)
	}
	if err := expectValue(ctx, cli, e.key, m.Value(), "after the refused Unlock"); err != nil {
		return err
	}
	if ok, err := m.UnlockContext(ctx); err != nil || !ok {
		return fmt.Errorf("Unlock by the owner: %v, %v; expected true", ok, err)
	}
	return nil
}

// redsyncUnlockAfterExpiry: the release script answers -1 for an absent key,
// which redsync reports as ErrLockAlreadyExpired.
func redsyncUnlockAfterExpiry(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	// A timeout factor of 0.5 keeps the per-attempt timeout (expiry × factor)
	// fit for a loaded CI machine with this short expiry.
	m := rs.NewMutex(e.key, redsync.WithExpiry(time.Second), redsync.WithTimeoutFactor(0.5))
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if err := waitAbsent(ctx, cli, e.key); err != nil {
		return err
	}
	if ok, err := m.UnlockContext(ctx); ok || !errors.Is(err, redsync.ErrLockAlreadyExpired) {
		return fmt.Errorf("Unlock after expiry: %v, %v; expected false with ErrLockAlreadyExpired", ok, err)
	}
	return nil
}

// redsyncExtendSetNX: WithSetNXOnExtend extends while held, takes the lock
// again when it was lost and is free, and fails when another holds it.
func redsyncExtendSetNX(ctx context.Context, e *goEnv) error {
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key, redsync.WithSetNXOnExtend())
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if ok, err := m.ExtendContext(ctx); err != nil || !ok {
		return fmt.Errorf("Extend while held: %v, %v; expected true", ok, err)
	}
	if err := cli.Del(ctx, e.key).Err(); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	if ok, err := m.ExtendContext(ctx); err != nil || !ok {
		return fmt.Errorf("Extend of a lost, free lock: %v, %v; expected true (taken again)", ok, err)
	}
	if err := expectValue(ctx, cli, e.key, m.Value(), "after Extend took the lock again"); err != nil {
		return err
	}
	if ttl, err := cli.PTTL(ctx, e.key).Result(); err != nil || ttl <= 7*time.Second || ttl > 8*time.Second {
		return fmt.Errorf("PTTL after Extend took the lock again: %v, %v", ttl, err)
	}
	if err := cli.Del(ctx, e.key).Err(); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	other := rs.NewMutex(e.key)
	if err := other.LockContext(ctx); err != nil {
		return fmt.Errorf("Lock by another mutex: %w", err)
	}
	var taken *redsync.ErrTaken
	if ok, err := m.ExtendContext(ctx); ok || !errors.As(err, &taken) {
		return fmt.Errorf("Extend while another holds it: %v, %v; expected false with ErrTaken", ok, err)
	}
	if err := expectValue(ctx, cli, e.key, other.Value(), "after the refused Extend"); err != nil {
		return err
	}
	if ok, err := other.UnlockContext(ctx); err != nil || !ok {
		return fmt.Errorf("Unlock by the other mutex: %v, %v; expected true", ok, err)
	}
	return nil
}

func redsyncContention(ctx context.Context, e *goEnv) error {
	pools := make([]*redsync.Redsync, contendWorkers)
	for i := range pools {
		pools[i], _ = newRedsync(e)
	}
	return contend(ctx, e, contendWorkers, contendRounds, func(ctx context.Context, w int) (func() error, error) {
		// A mutex per holding, as users make them; retried often, without
		// giving up, rather than redsync's 32 tries 50–250 ms apart.
		m := pools[w].NewMutex(e.key, redsync.WithTries(1<<20),
			redsync.WithRetryDelayFunc(func(int) time.Duration { return retryPause() }))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func() error {
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				return fmt.Errorf("Unlock by the holder %s: %v, %v%s", m.Value(), ok, err, e.backends())
			}
			return nil
		}, nil
	})
}

// TestCompatGoRedsyncOneHour: issue 37's acceptance with default settings:
// redsync's WithExpiry(time.Hour), a job's lock as users set it, locks,
// extends and unlocks through the proxy, and the backends hold it for the
// hour. (max_ttl's earlier default, 60 s, refused it: invalid expire time.)
func TestCompatGoRedsyncOneHour(t *testing.T) {
	clientTest(t)
	c := newCluster(t, 5)
	e := &goEnv{t: t, addr: c.proxy.Addr, key: "compat:go:redsync-one-hour", cluster: c}
	ctx := t.Context()
	rs, cli := newRedsync(e)
	m := rs.NewMutex(e.key, redsync.WithExpiry(time.Hour))
	// A quorum of the backends holds m's value with about an hour left.
	anHour := func(when string) {
		t.Helper()
		held, pttls, n := c.held(t, e.key), c.pttls(t, e.key), 0
		for i, v := range held {
			if v != m.Value() {
				continue
			}
			if d := pttls[i]; d <= time.Hour-time.Minute || d > time.Hour {
				t.Fatalf("%s: backend %d has PTTL %v, want about an hour", when, i, d)
			}
			n++
		}
		if n < 3 {
			t.Fatalf("%s: %d of 5 backends hold the lock%s", when, n, e.backends())
		}
	}
	if err := m.LockContext(ctx); err != nil {
		t.Fatalf("Lock with a one-hour expiry: %v", err)
	}
	anHour("after Lock")
	before := m.Until()
	time.Sleep(20 * time.Millisecond) // so that the extended Until is later
	if ok, err := m.ExtendContext(ctx); err != nil || !ok {
		t.Fatalf("Extend: %v, %v; expected true", ok, err)
	}
	if !m.Until().After(before) {
		t.Fatalf("Extend did not move Until: %s then %s", before, m.Until())
	}
	anHour("after Extend")
	if ok, err := m.UnlockContext(ctx); err != nil || !ok {
		t.Fatalf("Unlock: %v, %v; expected true", ok, err)
	}
	if err := expectValue(ctx, cli, e.key, "", "after Unlock"); err != nil {
		t.Fatal(err)
	}
}

// redsyncNoQuorum: redsync reports the proxy's NOQUORUM as a node error, not
// as a lock taken elsewhere.
func redsyncNoQuorum(t *testing.T, addr string) {
	e := &goEnv{t: t, addr: addr, key: "compat:go:redsync-noquorum"}
	rs, _ := newRedsync(e)
	err := rs.NewMutex(e.key).TryLockContext(t.Context())
	var nodeErr *redsync.RedisError
	if !errors.As(err, &nodeErr) || !strings.Contains(err.Error(), "NOQUORUM ") {
		t.Fatalf("TryLock with 3 of 5 backends down: %v; expected a RedisError carrying NOQUORUM", err)
	}
	t.Logf("NOQUORUM as redsync reports it: %v", err)
}
