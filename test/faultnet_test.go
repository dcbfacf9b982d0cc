package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// faultNet puts one in-process toxiproxy proxy in front of each backend, so a
// nemesis can degrade the network between lockproxy and the backends without
// touching the redis-server processes.
//
// lockproxy dials a gate, not the toxiproxy proxy: the gate holds its port
// from the start of the test to the end, and forwards each connection to the
// proxy. A fault that must cut connections or move the backend (Drop,
// Redirect) never gives the port up, so nothing else on the machine can take
// it in between and answer in the backend's place; toxiproxy itself rebinds
// when its upstream changes, which is why it is never the address lockproxy
// knows.
//
// Every method may be called from any goroutine while clients run. Errors go
// to t.Errorf, never t.Fatalf, because a nemesis goroutine cannot stop the
// test. Once the test has ended the methods do nothing, so a nemesis that
// outlives it by a moment does not panic the test binary.
type faultNet struct {
	t       *testing.T
	gates   []*gate
	proxies []*toxiproxy.Proxy
	srv     *toxiproxy.ApiServer

	// mu serialises every change: toxiproxy locks each call, but Latency's
	// replace (remove, then add) must not interleave with another change to
	// the same backend.
	mu     sync.Mutex
	closed bool
}

// Toxic names, one per direction, so Latency can replace its own by name
// without touching a blackhole and Blackhole can tell it is already in place.
const (
	toxicLatencyUp     = "latency_upstream"
	toxicLatencyDown   = "latency_downstream"
	toxicBlackholeUp   = "blackhole_upstream"
	toxicBlackholeDown = "blackhole_downstream"
)

// newFaultNet starts one gate and proxy per upstream "host:port" and stops
// them all when the test ends.
func newFaultNet(t *testing.T, upstreams []string) *faultNet {
	t.Helper()
	// A Nop logger: toxiproxy logs every accepted and closed connection at
	// info level, which would bury the test's output. No metrics collectors
	// are set, so the container only satisfies the API.
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	f := &faultNet{t: t, srv: srv}
	t.Cleanup(f.close)
	for i, up := range upstreams {
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("backend%d", i), "127.0.0.1:0", up)
		// Start rewrites Listen to the bound address.
		if err := srv.Collection.Add(p, true); err != nil {
			t.Fatalf("faultNet: proxy for %s: %v", up, err)
		}
		g, err := newGate(p.Listen)
		if err != nil {
			t.Fatalf("faultNet: gate for %s: %v", up, err)
		}
		f.proxies = append(f.proxies, p)
		f.gates = append(f.gates, g)
	}
	return f
}

// Redirect makes backend i's address lead to upstream from now on, as a
// DNS name or a virtual IP does after a failover: the connections open now
// are cut, new ones reach upstream.
func (f *faultNet) Redirect(i int, upstream string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	p := f.proxies[i]
	// A new port for the proxy: its old one was given up, and may be taken.
	if err := p.Update(&toxiproxy.Proxy{Name: p.Name, Listen: "127.0.0.1:0", Upstream: upstream, Enabled: true}); err != nil {
		f.t.Errorf("faultNet: redirecting backend %d to %s: %v", i, upstream, err)
		return
	}
	f.gates[i].redirect(p.Listen)
}

func (f *faultNet) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, g := range f.gates {
		g.close()
	}
	_ = f.srv.Collection.Clear()
}

// Addr returns the address of backend i as lockproxy dials it,
// "127.0.0.1:port".
func (f *faultNet) Addr(i int) string { return f.gates[i].addr() }

// URLs returns the backends as a value for lockproxy's -backends flag.
func (f *faultNet) URLs() string {
	urls := make([]string, len(f.gates))
	for i, g := range f.gates {
		urls[i] = "redis://" + g.addr()
	}
	return strings.Join(urls, ",")
}

// Latency delays every chunk of data between lockproxy and backend i by
// latency ± jitter in EACH direction, requests and replies alike, as a slow
// link would; a request/reply round trip therefore gains about 2×latency,
// and at least 2×(latency−jitter). Latency replaces any latency set before;
// Latency(i, 0, 0) removes it. Toxiproxy counts whole milliseconds, so both
// are rounded up to keep the lower bound true. Each direction is delayed in
// order, so jitter never reorders the byte stream, and existing connections
// are slowed as well as new ones.
func (f *faultNet) Latency(i int, latency, jitter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.remove(i, toxicLatencyUp, toxicLatencyDown)
	if latency <= 0 && jitter <= 0 {
		return
	}
	attrs := fmt.Sprintf(`{"latency": %d, "jitter": %d}`, ceilMillis(latency), ceilMillis(jitter))
	f.add(i, toxicLatencyUp, "latency", "upstream", attrs)
	f.add(i, toxicLatencyDown, "latency", "downstream", attrs)
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Blackhole partitions backend i without closing anything: data in both
// directions is silently discarded, so commands on existing connections hang
// until the client's own timeout, and new connections are accepted (the
// proxy, not the backend, completes the handshake) but hang the same way.
// That is the network partition that a dead peer's RST never announces. Clear
// ends it, and closes the connections that lived through it, whose streams
// have lost data and could never be trusted again.
func (f *faultNet) Blackhole(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	// timeout 0: drop data forever rather than close after a delay.
	if f.proxies[i].Toxics.GetToxic(toxicBlackholeUp) == nil {
		f.add(i, toxicBlackholeUp, "timeout", "upstream", `{"timeout": 0}`)
	}
	if f.proxies[i].Toxics.GetToxic(toxicBlackholeDown) == nil {
		f.add(i, toxicBlackholeDown, "timeout", "downstream", `{"timeout": 0}`)
	}
}

// Clear removes every toxic of backend i (latency, blackhole). It does not
// undo Drop, which is the gate's: Restore does.
func (f *faultNet) Clear(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.proxies[i].Toxics.ResetToxics(quietCtx())
}

// ClearAll calls Clear for every backend.
func (f *faultNet) ClearAll() {
	for i := range f.proxies {
		f.Clear(i)
	}
}

// Drop cuts backend i off: every current connection to it is closed at
// once, in both directions, so lockproxy reads EOF (or a reset, when unread
// data was pending) even on an idle connection, and every new connection is
// reset as soon as it opens. That is what a crashed backend process looks
// like, and it fails fast, unlike Blackhole's hang. The alternative, a
// reset_peer toxic, only fires when data flows, so an idle connection would
// look healthy for as long as it is unused. Toxics stay in place and apply
// again after Restore. Dropping a dropped backend does nothing.
func (f *faultNet) Drop(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.gates[i].drop()
	}
}

// Restore lets backend i accept connections again, on the same address.
// Restoring a backend that is not dropped does nothing.
func (f *faultNet) Restore(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.gates[i].restore()
	}
}

// add adds a toxic with toxicity 1 (every connection). Callers hold f.mu.
func (f *faultNet) add(i int, name, typ, stream, attrs string) {
	// toxiproxy builds toxics only from JSON: the typed constructor behind it
	// is unexported.
	js := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`,
		name, typ, stream, attrs)
	if _, err := f.proxies[i].Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		f.t.Errorf("faultNet: adding %s to backend %d: %v", name, i, err)
	}
}

// remove removes the named toxics that exist. Callers hold f.mu.
func (f *faultNet) remove(i int, names ...string) {
	for _, name := range names {
		err := f.proxies[i].Toxics.RemoveToxic(quietCtx(), name)
		if err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			f.t.Errorf("faultNet: removing %s from backend %d: %v", name, i, err)
		}
	}
}

// quietCtx carries a logger that discards, so that toxiproxy's removal
// tracing cannot reach zerolog.DefaultContextLogger should anyone set it.
func quietCtx() context.Context {
	return zerolog.New(io.Discard).WithContext(context.Background())
}

// faultNetClient is a go-redis client that, like lockproxy's node clients,
// neither retries commands nor dials twice, so a fault shows up as an error
// on the very call it hits.
func faultNetClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		MaxRetries:      -1,
		DialerRetries:   1,
		DialTimeout:     2 * time.Second,
		ReadTimeout:     2 * time.Second,
		WriteTimeout:    2 * time.Second,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func pingErr(c *redis.Client) string {
	if err := c.Ping(context.Background()).Err(); err != nil {
		return "PING: " + err.Error()
	}
	return ""
}

func TestFaultNetLatencyAndClear(t *testing.T) {
	proxyTest(t)
	srv := redistest.Start(t)
	fn := newFaultNet(t, []string{srv.Addr()})
	if want := "redis://" + fn.Addr(0); fn.URLs() != want {
		t.Fatalf("URLs() = %q, want %q", fn.URLs(), want)
	}
	c := faultNetClient(t, fn.Addr(0))
	ctx := context.Background()
	if err := c.Set(ctx, "k", "through the proxy", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := srv.Client(t).Get(ctx, "k").Val(); got != "through the proxy" {
		t.Fatalf("backend holds %q: the proxy does not reach it", got)
	}

	const latency = 50 * time.Millisecond
	fn.Latency(0, latency, 0)
	// Both directions are delayed, so a round trip costs twice the latency;
	// only the lower bound is safe to assert on a loaded machine.
	for range 3 {
		start := time.Now()
		if msg := pingErr(c); msg != "" {
			t.Fatal(msg)
		}
		if took := time.Since(start); took < 2*latency {
			t.Fatalf("PING took %v with %v latency each way", took, latency)
		}
	}
	// A new connection is slowed as well, not only the one that existed.
	start := time.Now()
	if msg := pingErr(faultNetClient(t, fn.Addr(0))); msg != "" {
		t.Fatal(msg)
	}
	if took := time.Since(start); took < 2*latency {
		t.Fatalf("PING on a new connection took %v with %v latency each way", took, latency)
	}

	// A second call replaces the latency rather than stacking on it; with no
	// upper bound to assert, count the toxics instead.
	fn.Latency(0, 20*time.Millisecond, 10*time.Millisecond)
	if n := len(fn.proxies[0].Toxics.GetToxicArray()); n != 2 {
		t.Fatalf("%d toxics after replacing the latency, want 2", n)
	}

	fn.Clear(0)
	if n := len(fn.proxies[0].Toxics.GetToxicArray()); n != 0 {
		t.Fatalf("%d toxics after Clear, want 0", n)
	}
	if msg := pingErr(c); msg != "" {
		t.Fatal(msg)
	}
	fn.ClearAll() // nothing left to clear: must not report an error
}

func TestFaultNetDropRestore(t *testing.T) {
	proxyTest(t)
	srv := redistest.Start(t)
	fn := newFaultNet(t, []string{srv.Addr()})
	addr := fn.Addr(0)
	ctx := context.Background()

	c := faultNetClient(t, addr)
	conn := c.Conn() // pinned, so the PING after Drop uses this very connection
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// An idle raw connection shows whether Drop cuts connections by itself
	// or only when they are next used.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(raw)
	if line, err := br.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("raw PING: %q, %v", line, err)
	}

	fn.Drop(0)
	fn.Drop(0) // idempotent

	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle connection after Drop: read gave %v, want EOF or reset", err)
	}
	if err := conn.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on an existing connection succeeded after Drop")
	}
	if err := faultNetClient(t, addr).Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a new connection succeeded after Drop")
	}
	// A new connection is reset as it opens (a dial may see it refused
	// outright, or succeed a moment before the reset).
	if after, err := net.Dial("tcp", addr); err == nil {
		_ = after.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := after.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("new connection after Drop: read gave %v, want a reset", err)
		}
		after.Close()
	}

	fn.Restore(0)
	fn.Restore(0) // idempotent
	if fn.Addr(0) != addr {
		t.Fatalf("address moved from %s to %s", addr, fn.Addr(0))
	}
	// The pool may still hold the cut connection; it is discarded on use, so
	// poll rather than expect the first PING to succeed.
	redistest.Eventually(t, func() string { return pingErr(c) })
	if msg := pingErr(faultNetClient(t, addr)); msg != "" {
		t.Fatalf("new connection after Restore: %s", msg)
	}
}

func TestFaultNetBlackhole(t *testing.T) {
	proxyTest(t)
	srv := redistest.Start(t)
	fn := newFaultNet(t, []string{srv.Addr()})
	ctx := context.Background()
	c := faultNetClient(t, fn.Addr(0))
	if msg := pingErr(c); msg != "" {
		t.Fatal(msg)
	}

	fn.Blackhole(0)
	fn.Blackhole(0) // idempotent
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	hung := redis.NewClient(&redis.Options{
		Addr: fn.Addr(0), Protocol: 2, MaxRetries: -1, DialerRetries: 1,
		ReadTimeout: 300 * time.Millisecond, DisableIdentity: true,
	})
	defer hung.Close()
	if err := hung.Ping(short).Err(); err == nil {
		t.Fatal("PING succeeded through a blackhole")
	}
	if err := c.Ping(short).Err(); err == nil {
		t.Fatal("PING on an existing connection succeeded through a blackhole")
	}

	fn.Clear(0)
	redistest.Eventually(t, func() string { return pingErr(c) })
}

// TestFaultNetUnderLoad flips every fault while clients hammer the proxies,
// for the race detector and for deadlocks between toxiproxy's locks and
// connections that come and go.
func TestFaultNetUnderLoad(t *testing.T) {
	proxyTest(t)
	servers := redistest.StartN(t, 2)
	fn := newFaultNet(t, []string{servers[0].Addr(), servers[1].Addr()})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 4 {
		c := redis.NewClient(&redis.Options{
			Addr: fn.Addr(i % 2), Protocol: 2, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
			WriteTimeout: 200 * time.Millisecond, DisableIdentity: true,
		})
		defer c.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				if c.Incr(ctx, "n").Err() == nil {
					ok.Add(1)
				}
			}
		})
	}
	// The nemesis runs off the test goroutine, as the safety harness's does.
	var nemesis sync.WaitGroup
	nemesis.Go(func() {
		for round := range 15 {
			i := round % 2
			for _, fault := range []func(){
				func() { fn.Latency(i, 5*time.Millisecond, 3*time.Millisecond) },
				func() { fn.Latency(i, 2*time.Millisecond, 1*time.Millisecond) },
				func() { fn.Drop(i) },
				func() { fn.Blackhole(1 - i) },
				func() { fn.Restore(i) },
				func() { fn.Clear(i) },
				fn.ClearAll,
			} {
				fault()
				// Pacing, not synchronisation: let clients meet each state.
				time.Sleep(3 * time.Millisecond)
			}
		}
	})
	nemesis.Wait()
	before := ok.Load()
	redistest.Eventually(t, func() string {
		if ok.Load() == before {
			return "no command succeeded once the faults were cleared"
		}
		return ""
	})
	stop()
	wg.Wait()
	for i := range 2 {
		c := faultNetClient(t, fn.Addr(i))
		redistest.Eventually(t, func() string { return pingErr(c) })
	}
}
