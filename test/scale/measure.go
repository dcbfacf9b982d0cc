//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

type backendHeld struct {
	Group            int     `json:"group"`
	Index            int     `json:"index"`
	Addr             string  `json:"addr"`
	Keys             int64   `json:"keys"`
	UsedMemoryBefore int64   `json:"used_memory_before"`
	UsedMemoryAfter  int64   `json:"used_memory_after"`
	BytesPerLock     float64 `json:"bytes_per_lock"`
}

type heldResult struct {
	Groups          int     `json:"groups"`
	Locks           int     `json:"locks"`
	Seconds         float64 `json:"seconds"`
	LocksPerSecond  float64 `json:"locks_per_second"`
	ProxyRSSBefore  int64   `json:"proxy_rss_before"`
	ProxyRSSAfter   int64   `json:"proxy_rss_after"`
	ProxyRSSPerLock float64 `json:"proxy_rss_per_lock"`
	// The proxies' live Go heap after a forced GC; null if not exported.
	ProxyHeapBefore  *float64      `json:"proxy_live_heap_before"`
	ProxyHeapAfter   *float64      `json:"proxy_live_heap_after"`
	ProxyHeapPerLock *float64      `json:"proxy_live_heap_per_lock"`
	Backends         []backendHeld `json:"backends"`
}

// holdPipeline is the SETs per round trip: big enough that the proxies,
// not the round trips, set the pace.
const holdPipeline = 500

// measureHeld takes o.locks distinct locks with a long TTL and keeps them,
// so that any memory they cost shows in the proxies or the backends.
func measureHeld(ctx context.Context, f *fleet, o *options) (*heldResult, error) {
	r := &heldResult{Groups: len(f.groups), Locks: o.locks}
	before := make(map[string]int64)
	for _, addr := range f.backendAddrs() {
		m, err := usedMemory(ctx, addr)
		if err != nil {
			return nil, err
		}
		before[addr] = m
	}
	r.ProxyHeapBefore = liveHeap(ctx, f)
	r.ProxyRSSBefore = sumRSS(f.proxyPIDs)

	// Batches of keys, dealt round robin to the proxies; a few connections
	// per proxy keep both of its cores' worth of goroutines fed.
	const connsPerProxy = 4
	type batch struct{ from, to int }
	queues := make([]chan batch, len(f.proxyAddrs))
	for i := range queues {
		queues[i] = make(chan batch, o.locks/holdPipeline+1)
	}
	for b, from := 0, 0; from < o.locks; b, from = b+1, from+holdPipeline {
		queues[b%len(queues)] <- batch{from, min(from+holdPipeline, o.locks)}
	}
	var failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(n int64, err error) {
		failed.Add(n)
		errOnce.Do(func() { firstErr = err })
	}
	clientsBefore := gauge(ctx, f, "lockproxy_connected_clients")
	start := time.Now()
	var wg sync.WaitGroup
	var clients []*redis.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for i, addr := range f.proxyAddrs {
		close(queues[i])
		cl := redis.NewClient(&redis.Options{Addr: addr, PoolSize: connsPerProxy, MaxRetries: -1,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
		clients = append(clients, cl)
		for range connsPerProxy {
			wg.Go(func() {
				for b := range queues[i] {
					pipe := cl.Pipeline()
					cmds := make([]*redis.Cmd, 0, b.to-b.from)
					for k := b.from; k < b.to; k++ {
						cmds = append(cmds, pipe.Do(ctx, "set", "lk:"+strconv.Itoa(k), "tok"+strconv.Itoa(k), "nx", "px", 600000))
					}
					if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
						fail(int64(len(cmds)), fmt.Errorf("pipeline through %s: %w", addr, err))
						continue
					}
					for _, c := range cmds {
						if v, err := c.Text(); err != nil || v != "OK" {
							fail(1, fmt.Errorf("%v through %s: %q, %v", c.Args(), addr, v, err))
						}
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		return nil, fmt.Errorf("%d of %d SETs did not return OK; first: %w", n, o.locks, firstErr)
	}
	r.Seconds = elapsed.Seconds()
	r.LocksPerSecond = float64(o.locks) / elapsed.Seconds()
	// The connections' buffers grew to hold whole pipelines; they are the
	// clients' cost, not the locks', so they go before the figures are read.
	for _, cl := range clients {
		cl.Close()
	}
	clients = nil
	if err := waitClients(ctx, f, clientsBefore); err != nil {
		return nil, err
	}
	r.ProxyRSSAfter = sumRSS(f.proxyPIDs)
	r.ProxyRSSPerLock = float64(r.ProxyRSSAfter-r.ProxyRSSBefore) / float64(o.locks)
	r.ProxyHeapAfter = liveHeap(ctx, f)
	r.ProxyHeapPerLock = perUnit(r.ProxyHeapBefore, r.ProxyHeapAfter, o.locks)
	for g, addrs := range f.groups {
		for b, addr := range addrs {
			m, err := usedMemory(ctx, addr)
			if err != nil {
				return nil, err
			}
			keys, err := lockKeyCount(ctx, addr)
			if err != nil {
				return nil, err
			}
			bh := backendHeld{Group: g, Index: b, Addr: addr, Keys: keys, UsedMemoryBefore: before[addr], UsedMemoryAfter: m}
			if keys > 0 {
				bh.BytesPerLock = float64(m-before[addr]) / float64(keys)
			}
			r.Backends = append(r.Backends, bh)
		}
	}
	return r, nil
}

func usedMemory(ctx context.Context, addr string) (int64, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	info, err := cl.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory of %s: %w", addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory of %s has no used_memory", addr)
}

// lockKeyCount is how many keys addr holds, lockproxy's own left out.
func lockKeyCount(ctx context.Context, addr string) (int64, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	n, err := cl.Eval(ctx, lockKeys, nil).Int64()
	if err != nil {
		return 0, fmt.Errorf("counting the lock keys of %s: %w", addr, err)
	}
	return n, nil
}

type connResult struct {
	Conns             int      `json:"conns"`
	Seconds           float64  `json:"seconds_to_open"`
	ProxyRSSBefore    int64    `json:"proxy_rss_before"`
	ProxyRSSHeld      int64    `json:"proxy_rss_held"`
	ProxyRSSPerConn   float64  `json:"proxy_rss_per_conn"`
	ProxyHeapBefore   *float64 `json:"proxy_live_heap_before"`
	ProxyHeapHeld     *float64 `json:"proxy_live_heap_held"`
	ProxyHeapPerConn  *float64 `json:"proxy_live_heap_per_conn"`
	GoroutinesBefore  *float64 `json:"goroutines_before"`
	GoroutinesHeld    *float64 `json:"goroutines_held"`
	GoroutinesPerConn *float64 `json:"goroutines_per_conn"`
	ServingAfterClose bool     `json:"serving_after_close"`
}

// ping is PING as a client library sends it: an array of bulk strings.
const ping = "*1\r\n$4\r\nPING\r\n"

// measureConns opens o.conns idle connections by hand (a go-redis client
// each would cost the load generator more than the proxies) and keeps them
// open while the proxies are measured.
func measureConns(ctx context.Context, f *fleet, o *options) (*connResult, error) {
	r := &connResult{Conns: o.conns}
	r.GoroutinesBefore = gauge(ctx, f, "go_goroutines")
	r.ProxyHeapBefore = liveHeap(ctx, f)
	r.ProxyRSSBefore = sumRSS(f.proxyPIDs)
	conns := make([]net.Conn, o.conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// A bounded number of dialers: 10,000 SYNs at once would overflow the
	// proxies' accept backlog and time the figures, not the proxies.
	const dialers = 64
	next := make(chan int, o.conns)
	for i := range o.conns {
		next <- i
	}
	close(next)
	errs := make([]error, dialers)
	start := time.Now()
	var wg sync.WaitGroup
	for d := range dialers {
		wg.Go(func() {
			dialer := net.Dialer{Timeout: 10 * time.Second}
			for i := range next {
				addr := f.proxyAddrs[i%len(f.proxyAddrs)]
				c, err := dialer.DialContext(ctx, "tcp", addr)
				if err != nil {
					errs[d] = fmt.Errorf("connection %d to %s: %w", i, addr, err)
					return
				}
				conns[i] = c
				if err := pingPong(c); err != nil {
					errs[d] = fmt.Errorf("connection %d to %s: %w", i, addr, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.Seconds = time.Since(start).Seconds()
	r.ProxyRSSHeld = sumRSS(f.proxyPIDs)
	r.ProxyRSSPerConn = float64(r.ProxyRSSHeld-r.ProxyRSSBefore) / float64(o.conns)
	r.GoroutinesHeld = gauge(ctx, f, "go_goroutines")
	r.GoroutinesPerConn = perUnit(r.GoroutinesBefore, r.GoroutinesHeld, o.conns)
	r.ProxyHeapHeld = liveHeap(ctx, f)
	r.ProxyHeapPerConn = perUnit(r.ProxyHeapBefore, r.ProxyHeapHeld, o.conns)
	// Every connection must still be alive, not only have been once.
	for i, c := range conns {
		if err := pingPong(c); err != nil {
			return nil, fmt.Errorf("connection %d, held open: %w", i, err)
		}
	}
	for i, c := range conns {
		c.Close()
		conns[i] = nil
	}
	for _, addr := range f.proxyAddrs {
		if err := waitLocks(ctx, addr, len(f.groups)); err != nil {
			return nil, fmt.Errorf("after closing the connections: %w", err)
		}
	}
	r.ServingAfterClose = true
	return r, nil
}

func pingPong(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, ping); err != nil {
		return err
	}
	line, err := bufio.NewReaderSize(c, 64).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// waitClients polls until the proxies count no more client connections
// than want: a closed connection is only gone once the proxy noticed.
func waitClients(ctx context.Context, f *fleet, want *float64) error {
	if want == nil {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := gauge(ctx, f, "lockproxy_connected_clients")
		if now != nil && *now <= *want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("proxies still count %v client connections, %v before", now, *want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func perUnit(before, after *float64, n int) *float64 {
	if before == nil || after == nil || n == 0 {
		return nil
	}
	v := (*after - *before) / float64(n)
	return &v
}

func gauge(ctx context.Context, f *fleet, name string) *float64 {
	v, ok := metric(ctx, f.metricsAddrs, name)
	if !ok {
		return nil
	}
	return &v
}

type roundResult struct {
	Seconds         float64 `json:"seconds"`
	Cycles          int64   `json:"cycles"`
	Contended       int64   `json:"contended"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
	CyclesPerSecond float64 `json:"cycles_per_second"`
	ProxyUS         float64 `json:"proxy_us_per_cycle"`
	BackendUS       float64 `json:"backend_us_per_cycle"`
	ClientUS        float64 `json:"client_us_per_cycle"`
	MachineBusyPct  float64 `json:"machine_busy_pct"`
}

type throughputResult struct {
	Groups   int           `json:"groups"`
	Backends int           `json:"backends"`
	Proxies  int           `json:"proxies"`
	Workers  int           `json:"workers"`
	Rounds   []roundResult `json:"rounds"`
	Median   roundResult   `json:"median"`
}

// keySpace is large enough that two workers rarely draw the same key, so
// that the rounds measure lock cycles, not contention.
const keySpace = 1 << 24

// measureThroughput runs closed-loop acquire/release cycles through a
// fresh fleet of k groups.
func measureThroughput(ctx context.Context, n *network, o *options, k int) (*throughputResult, error) {
	f, err := startFleet(ctx, n, o, k)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	perProxy := (o.workers + len(f.proxyAddrs) - 1) / len(f.proxyAddrs)
	clients := make([]*redis.Client, len(f.proxyAddrs))
	for i, addr := range f.proxyAddrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: perProxy + 2, MaxRetries: -1,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, PoolTimeout: 30 * time.Second})
		defer clients[i].Close()
	}
	t := &throughputResult{Groups: k, Backends: k * backendsPerGrp, Proxies: len(f.proxyAddrs), Workers: o.workers}
	for r := range o.rounds {
		rr, err := round(ctx, f, o, clients, uint64(r))
		if err != nil {
			return nil, err
		}
		t.Rounds = append(t.Rounds, rr)
	}
	sorted := slices.Clone(t.Rounds)
	slices.SortFunc(sorted, func(a, b roundResult) int {
		if a.CyclesPerSecond < b.CyclesPerSecond {
			return -1
		}
		if a.CyclesPerSecond > b.CyclesPerSecond {
			return 1
		}
		return 0
	})
	t.Median = sorted[len(sorted)/2]
	return t, nil
}

type cpuSample struct {
	proxies, backends, client time.Duration
	busy, total               int64
}

func sampleCPU(f *fleet) cpuSample {
	s := cpuSample{proxies: sumCPU(f.proxyPIDs), backends: sumCPU(f.redisPIDs), client: selfCPU()}
	s.busy, s.total = machineCPU()
	return s
}

// round lets the workers run for o.duration; each finishes the cycle it is
// in, so that no cycle is cut off and counted as an error.
func round(ctx context.Context, f *fleet, o *options, clients []*redis.Client, seed uint64) (roundResult, error) {
	var stop atomic.Bool
	var cycles, contended, failed atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	before := sampleCPU(f)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range o.workers {
		cl := clients[w%len(clients)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; !stop.Load(); seq++ {
				key := "tp:" + strconv.Itoa(rng.IntN(keySpace))
				tok := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(seq)
				err := cl.Do(ctx, "set", key, tok, "nx", "px", 10000).Err()
				if errors.Is(err, redis.Nil) {
					contended.Add(1)
					continue
				}
				if err != nil {
					fail(fmt.Errorf("SET %s: %w", key, err))
					continue
				}
				n, err := releaseScript.Run(ctx, cl, []string{key}, tok).Int()
				if err != nil {
					fail(fmt.Errorf("release %s: %w", key, err))
					continue
				}
				if n != 1 {
					fail(fmt.Errorf("release %s found the lock gone", key))
					continue
				}
				cycles.Add(1)
			}
		})
	}
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	after := sampleCPU(f)
	if ctx.Err() != nil {
		return roundResult{}, ctx.Err()
	}
	r := roundResult{Seconds: elapsed.Seconds(), Cycles: cycles.Load(), Contended: contended.Load(), Errors: failed.Load()}
	if s, ok := firstErr.Load().(string); ok {
		r.FirstError = s
	}
	r.CyclesPerSecond = float64(r.Cycles) / elapsed.Seconds()
	if r.Cycles > 0 {
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.Cycles) }
		r.ProxyUS = us(after.proxies - before.proxies)
		r.BackendUS = us(after.backends - before.backends)
		r.ClientUS = us(after.client - before.client)
	}
	if dt := after.total - before.total; dt > 0 {
		r.MachineBusyPct = 100 * float64(after.busy-before.busy) / float64(dt)
	}
	return r, nil
}
