//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// releaseScript is the single-node release of redis.io and bsm/redislock:
// delete the key only if it still holds our token. Run sends EVALSHA and
// falls back to EVAL once on NOSCRIPT, as applications do.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// errNotHeld is a release that found the lock gone: with the bench's TTL
// it means something is wrong, so it counts as an error.
var errNotHeld = errors.New("bench: release found the lock not held")

// locker is one worker's lock on one key. acquire makes one attempt and
// reports false, nil when the lock is held by someone else.
type locker interface {
	acquire(ctx context.Context) (bool, error)
	release(ctx context.Context) error
}

// system is one of the things measured.
type system struct {
	name      string
	newLocker func(key string) locker
	// proxy is the address of the system's lockproxy, empty for the
	// clients' own systems; backends is how many backends it uses.
	proxy    string
	backends int
}

// systems holds the clients of the three systems, shared by all workers
// as an application would share them.
type systems struct {
	list    []system
	clients []*redis.Client
}

// clientOptions are go-redis defaults except the pool, sized so that no
// worker waits for a connection, and timeouts generous enough that the
// bench measures latency rather than fails on it. MaxRetries stays at the
// default, as users leave it.
func clientOptions(addr string, workers int) *redis.Options {
	return &redis.Options{
		Addr:         addr,
		PoolSize:     workers + 8,
		DialTimeout:  10 * time.Second,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		PoolTimeout:  30 * time.Second,
	}
}

// systemNames are the systems -systems may name, in the order of their
// turns; the variants of -cost-table follow them.
var systemNames = []string{"direct", "redsync", "proxy", "proxy-fenced", "baseline"}

// newSystems makes the clients of the systems in only (all when empty),
// proxy-fenced only when fenced, the address of a proxy with -fencing, is
// given. The proxies of others (-baseline-bin's, -cost-table's) are
// measured whatever only says: they were started to be.
// A proxy that sockets names serves its clients on that Unix socket.
func newSystems(backends []string, proxy, fenced string, others []namedProxy, sockets map[string]string, workers int, ttl time.Duration, only []string) *systems {
	s := &systems{}
	client := func(addr string) *redis.Client {
		opts := clientOptions(addr, workers)
		if socket, ok := sockets[addr]; ok {
			opts.Network, opts.Addr = "unix", socket
		}
		c := redis.NewClient(opts)
		s.clients = append(s.clients, c)
		return c
	}
	direct := client(backends[0])
	pools := make([]redsyncredis.Pool, 0, len(backends))
	for _, b := range backends {
		pools = append(pools, redsyncgoredis.NewPool(client(b)))
	}
	rs := redsync.New(pools...)
	n := len(backends)
	proxied := func(name, addr string) system {
		c := client(addr)
		return system{name, func(key string) locker { return &recipe{c: c, key: key, ttl: ttl} }, addr, n}
	}
	all := []system{
		{"direct", func(key string) locker { return &recipe{c: direct, key: key, ttl: ttl} }, "", 1},
		{"redsync", func(key string) locker {
			// One try: the bench's worker loop does the retrying, the same
			// way for all three systems.
			return &redsyncLocker{m: rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))}
		}, "", n},
		proxied("proxy", proxy),
	}
	if fenced != "" {
		// The same recipe, its SET answered +OK as without fencing: what
		// fencing costs a client that does not read the token.
		all = append(all, proxied("proxy-fenced", fenced))
	}
	for _, sys := range all {
		if len(only) == 0 || slices.Contains(only, sys.name) {
			s.list = append(s.list, sys)
		}
	}
	for _, p := range others {
		s.list = append(s.list, proxied(p.system, p.addr))
	}
	return s
}

func (s *systems) byName(name string) system {
	for _, x := range s.list {
		if x.name == name {
			return x
		}
	}
	panic("bench: no system " + name)
}

func (s *systems) close() {
	for _, c := range s.clients {
		c.Close()
	}
}

// recipe is the single-node lock: SET key token NX PX ttl, then
// compare-and-delete.
type recipe struct {
	c     *redis.Client
	key   string
	token string
	ttl   time.Duration
}

func (r *recipe) acquire(ctx context.Context) (bool, error) {
	r.token = rand.Text()
	err := r.c.Do(ctx, "set", r.key, r.token, "nx", "px", r.ttl.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (r *recipe) release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, r.c, []string{r.key}, r.token).Int()
	if err == nil && n != 1 {
		err = errNotHeld
	}
	return err
}

// redsyncLocker is redsync's Mutex, one per worker and key.
type redsyncLocker struct{ m *redsync.Mutex }

func (r *redsyncLocker) acquire(ctx context.Context) (bool, error) {
	err := r.m.LockContext(ctx)
	// A lost vote is ErrTaken, ErrNodeTaken (split vote) or ErrFailed;
	// only a failed node call (RedisError) is an error.
	var re *redsync.RedisError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &re):
		return false, err
	default:
		return false, nil
	}
}

func (r *redsyncLocker) release(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errNotHeld
	}
	return err
}
