package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// rawConn is a plain TCP connection to the proxy for reading replies as
// bytes.
type rawConn struct {
	net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

// roundTrip writes req and reads one line of reply.
func (c *rawConn) roundTrip(t *testing.T, req string) string {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	line, err := c.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("reply to a %d-byte request: %v (got %q)", len(req), err, line)
	}
	return line
}

// closed reports whether the proxy closed the connection (EOF or reset).
func (c *rawConn) closed() bool {
	_, err := c.rd.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(fmt.Sprint(err), "reset")
}

// TestLimitMaxClients: beyond max_clients a new connection gets Redis's
// error and is closed, and nothing else changes; once one leaves, a new
// one is served.
func TestLimitMaxClients(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-max-clients", "2")
	a, b := dialRaw(t, c.proxy.Addr), dialRaw(t, c.proxy.Addr)
	for _, conn := range []*rawConn{a, b} {
		if got := conn.roundTrip(t, wireCmd("PING")); got != "+PONG\r\n" {
			t.Fatalf("PING within the limit: %q", got)
		}
	}
	third := dialRaw(t, c.proxy.Addr)
	got, err := io.ReadAll(third)
	if string(got) != "-ERR max number of clients reached\r\n" || err != nil {
		t.Fatalf("a client beyond max_clients: %q (%v)", got, err)
	}
	if out := redisCLI(t, c.proxy.Addr, "PING"); !strings.Contains(out, "max number of clients reached") {
		t.Fatalf("redis-cli beyond max_clients: %q", out)
	}
	if got := a.roundTrip(t, wireCmd("SET", "k", "v", "NX", "PX", "10000")); got != "+OK\r\n" {
		t.Fatalf("a client within the limit after a refusal: %q", got)
	}
	b.Close()
	redistest.Eventually(t, func() string {
		if out, err := runCLI(c.proxy.Addr, "GET", "k"); err != nil || out != "v" {
			return fmt.Sprintf("after a client left, a new one got %q (%v)", out, err)
		}
		return ""
	})
}

// TestLimitIdleTimeout: a connection idle for idle_timeout is closed;
// one that keeps talking is not.
func TestLimitIdleTimeout(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-idle-timeout", "500ms")
	busy, idle := dialRaw(t, c.proxy.Addr), dialRaw(t, c.proxy.Addr)
	idle.roundTrip(t, wireCmd("PING"))
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		if got := busy.roundTrip(t, wireCmd("PING")); got != "+PONG\r\n" {
			t.Fatalf("a busy connection: %q", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !idle.closed() {
		t.Fatal("an idle connection outlived idle_timeout")
	}
	if got := busy.roundTrip(t, wireCmd("PING")); got != "+PONG\r\n" {
		t.Fatalf("the busy connection after the idle one was closed: %q", got)
	}
}

// TestLimitKeyAndTokenBytes: keys and tokens at max_key_bytes and
// max_token_bytes are served; one byte more gets an error naming the
// limit, and nothing reaches the backends.
func TestLimitKeyAndTokenBytes(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-max-key-bytes", "16", "-max-token-bytes", "8")
	r := c.proxy.Client(t)
	key, token := strings.Repeat("k", 16), strings.Repeat("t", 8)
	for _, tc := range []struct {
		cmd  []any
		want string
	}{
		{[]any{"SET", key + "x", token, "NX", "PX", 10000}, "ERR:ERR key of 17 bytes exceeds max_key_bytes (16)"},
		{[]any{"SET", key, token + "x", "NX", "PX", 10000}, "ERR:ERR token of 9 bytes exceeds max_token_bytes (8)"},
		{[]any{"DEL", "a", key + "x"}, "ERR:ERR key of 17 bytes exceeds max_key_bytes (16)"},
		{[]any{"EVAL", compareAndDelete, 1, key, token + "x"}, "ERR:ERR token of 9 bytes exceeds max_token_bytes (8)"},
	} {
		if got := do(t, r, tc.cmd...); got != tc.want {
			t.Errorf("%v: want %s, got %s", tc.cmd, tc.want, got)
		}
	}
	if got := c.dbSizes(t); !reflect.DeepEqual(got, []int64{0, 0, 0}) {
		t.Fatalf("backends hold keys after refused commands: %v", got)
	}
	if got := do(t, r, "SET", key, token, "NX", "PX", 10000); got != "OK" {
		t.Fatalf("at both limits: %s", got)
	}
	if got := c.held(t, key); !reflect.DeepEqual(got, []string{token, token, token}) {
		t.Fatalf("backends: %q", got)
	}
}

// TestLimitMaxRequestBytes: a command of exactly max_request_bytes on the
// wire is served; one byte more gets the protocol error and the
// connection is closed, and the proxy serves others as before.
func TestLimitMaxRequestBytes(t *testing.T) {
	proxyTest(t)
	const limit = 2048
	c := newCluster(t, 3, "-max-request-bytes", fmt.Sprint(limit), "-max-token-bytes", fmt.Sprint(limit))
	// setOfSize returns a SET of n bytes on the wire, and its token.
	setOfSize := func(n int) (req, token string) {
		base := len(wireCmd("SET", "edge", "", "NX", "PX", "10000"))
		// The token's length prefix grows by a digit past 9 and 99 bytes.
		for size := n - base - 3; size <= n-base; size++ {
			token = strings.Repeat("t", size)
			if req = wireCmd("SET", "edge", token, "NX", "PX", "10000"); len(req) == n {
				return req, token
			}
		}
		t.Fatalf("no SET of %d bytes", n)
		return "", ""
	}
	over := dialRaw(t, c.proxy.Addr)
	big, _ := setOfSize(limit + 1)
	if got := over.roundTrip(t, big); got != fmt.Sprintf("-ERR Protocol error: request exceeds max_request_bytes (%d)\r\n", limit) {
		t.Fatalf("a request one byte over the limit: %q", got)
	}
	if !over.closed() {
		t.Fatal("the connection stayed open after an oversized request")
	}
	if got := c.dbSizes(t); !reflect.DeepEqual(got, []int64{0, 0, 0}) {
		t.Fatalf("an oversized request reached the backends: %v", got)
	}
	at := dialRaw(t, c.proxy.Addr)
	exact, token := setOfSize(limit)
	if got := at.roundTrip(t, exact); got != "+OK\r\n" {
		t.Fatalf("a request of exactly max_request_bytes: %q", got)
	}
	if got := at.roundTrip(t, wireCmd("PING")); got != "+PONG\r\n" {
		t.Fatalf("the connection after a request at the limit: %q", got)
	}
	if got := c.held(t, "edge"); !reflect.DeepEqual(got, []string{token, token, token}) {
		t.Fatalf("backends after the request at the limit: %d-byte values", len(got[0]))
	}
}

// runCLI runs redis-cli against addr without failing the test.
func runCLI(addr string, args ...string) (string, error) {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// wireCmd encodes args as a RESP array of bulk strings.
func wireCmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// heapUse returns the proxy's live heap plus its goroutine stacks, in
// bytes, right after a garbage collection (pprof's heap profile with gc=1
// collects first and reports runtime.MemStats).
func heapUse(t *testing.T, metrics string) int {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	heap := regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`).FindSubmatch(body)
	stack := regexp.MustCompile(`(?m)^# Stack = (\d+) / \d+$`).FindSubmatch(body)
	if heap == nil || stack == nil {
		t.Fatalf("no HeapAlloc or Stack in the heap profile:\n%.500s", body)
	}
	h, _ := strconv.Atoi(string(heap[1]))
	s, _ := strconv.Atoi(string(stack[1]))
	return h + s
}

// TestLimitIdleConnectionMemory is issue 10's acceptance for memory: 1,000
// connections that each sent one 1 MB command (PING with a 1 MB payload,
// its 1 MB reply read) and went idle cost the proxy less than 16 KiB each
// after a garbage collection, heap and goroutine stacks together. The
// commands are sent a few at a time: only what the idle connections keep
// is measured.
func TestLimitIdleConnectionMemory(t *testing.T) {
	proxyTest(t)
	const conns, payload, workers = 1000, 1_000_000, 4
	c := newCluster(t, 3, "-metrics", "127.0.0.1:0", "-pprof")
	metrics := c.proxy.waitLog(t, metricsLine)[1]
	checkServes(t, c)
	others := clients(t, c.proxy.Addr) // checkServes's client
	before := heapUse(t, metrics)

	req := wireCmd("PING", strings.Repeat("x", payload))
	head := fmt.Sprintf("$%d\r\n", payload)
	open := make([]*rawConn, conns)
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	for range workers {
		wg.Go(func() {
			reply := make([]byte, len(head)+payload+2)
			for i := range next {
				conn, err := net.Dial("tcp", c.proxy.Addr)
				if err == nil {
					conn.SetDeadline(time.Now().Add(60 * time.Second))
					if _, err = io.WriteString(conn, req); err == nil {
						_, err = io.ReadFull(conn, reply)
					}
				}
				if err == nil && string(reply[:len(head)]) != head {
					err = fmt.Errorf("reply starts %q", reply[:len(head)])
				}
				if err != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("connection %d: %v", i, err))
					mu.Unlock()
				}
				if conn != nil {
					open[i] = &rawConn{Conn: conn, rd: bufio.NewReader(conn)}
				}
			}
		})
	}
	start := time.Now()
	for i := range conns {
		next <- i
	}
	close(next)
	wg.Wait()
	sent := time.Since(start)
	for _, conn := range open {
		if conn != nil {
			defer conn.Close()
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d of %d connections failed, the first: %s", len(problems), conns, problems[0])
	}
	waitClients(t, c.proxy.Addr, others+conns)
	after := heapUse(t, metrics)
	per := (after - before) / conns
	t.Logf("%d connections sent %d MB in %s; heap and stacks %d KiB before, %d KiB after: %d bytes per idle connection",
		conns, conns*payload/1_000_000, sent.Round(time.Millisecond), before>>10, after>>10, per)
	if per >= 16<<10 {
		t.Errorf("each idle connection that once sent a 1 MB command costs %d bytes, want less than 16 KiB", per)
	}
	// They are idle, not dead.
	for _, i := range []int{0, conns / 2, conns - 1} {
		open[i].SetDeadline(time.Now().Add(20 * time.Second))
		if got := open[i].roundTrip(t, wireCmd("PING")); got != "+PONG\r\n" {
			t.Fatalf("connection %d after going idle: %q", i, got)
		}
	}
}

// TestLimitNonReadingClients: clients that pipeline commands and never read
// a reply are closed once the proxy could write them nothing for
// client_write_timeout, or for idle_timeout when that is shorter (no
// interaction either way, as Redis's timeout counts it), and each frees its
// max_clients slot; a client that reads its replies is served throughout.
func TestLimitNonReadingClients(t *testing.T) {
	proxyTest(t)
	const limit, stuck = time.Second, 20
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"client_write_timeout", []string{"-client-write-timeout", limit.String()}},
		{"idle_timeout", []string{"-idle-timeout", limit.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, append([]string{"-max-clients", fmt.Sprint(stuck + 2)}, tc.args...)...)
			// A pipeline of ECHOs whose replies outgrow every socket buffer.
			echo := wireCmd("ECHO", strings.Repeat("e", 64<<10))
			type client struct {
				lastSent, closed time.Time // the last write that went through; the first that failed
				done             chan struct{}
			}
			all := make([]*client, stuck)
			for i := range all {
				conn, err := net.Dial("tcp", c.proxy.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				cl := &client{done: make(chan struct{})}
				all[i] = cl
				go func() {
					defer close(cl.done)
					for range 1000 { // 64 MiB at most
						if _, err := io.WriteString(conn, echo); err != nil {
							cl.closed = time.Now() // by the proxy
							return
						}
						cl.lastSent = time.Now()
					}
				}()
			}
			// A client that reads its replies is served while they are stuck,
			// until every one of them has been closed.
			busy := c.proxy.Client(t)
			deadline := time.Now().Add(limit + 15*time.Second)
			for i := 0; i < len(all); {
				if got := do(t, busy, "PING"); got != "PONG" {
					t.Fatalf("PING beside the stuck clients: %s", got)
				}
				select {
				case <-all[i].done:
					i++
					continue
				case <-time.After(limit / 10):
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d clients that read nothing are still open after %s", len(all)-i, len(all), limit+15*time.Second)
				}
			}
			waitClients(t, c.proxy.Addr, 1) // only busy's connection is left
			var worst time.Duration
			for i, cl := range all {
				// Its writes stalled once the proxy stopped reading, which
				// it did once its replies filled the socket buffers.
				if cl.closed.IsZero() {
					t.Fatalf("client %d: sent 64 MiB without being closed", i)
				}
				d := cl.closed.Sub(cl.lastSent)
				if d > limit+3*time.Second {
					t.Errorf("client %d: closed %s after its last write went through, limit %s", i, d, limit)
				}
				worst = max(worst, d)
			}
			t.Logf("%d clients that read nothing were closed at most %s after their writes stalled (limit %s)", len(all), worst.Round(time.Millisecond), limit)
			if got := do(t, busy, "PING"); got != "PONG" {
				t.Fatalf("PING after the stuck clients were closed: %s", got)
			}
		})
	}
}
