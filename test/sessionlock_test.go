package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// Session-bound locks (proxy/session.go): a lock taken without a TTL lives
// on the backends with a short lease that the proxy renews while the
// connection that took it is open, and is released when it closes.

// sessionLease is the lease of these tests: short, so that several
// renewals happen in a test, long enough for a loaded machine's pauses.
const sessionLease = 900 * time.Millisecond

// do sends a command and returns the next frame read.
func (c *rawConn) do(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := io.WriteString(c, resp(args...)); err != nil {
		t.Fatal(err)
	}
	return c.frame(t, 10*time.Second)
}

// frame reads one RESP2/RESP3 frame, whole, as its text with CRLFs.
func (c *rawConn) frame(t *testing.T, within time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	var b strings.Builder
	if err := readFrame(c.rd, &b); err != nil {
		t.Fatalf("reading a frame: %v (after %q)", err, b.String())
	}
	return b.String()
}

func readFrame(rd *bufio.Reader, b *strings.Builder) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	b.WriteString(line)
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case '$', '=', '!':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		b.Write(buf)
	case '*', '>', '~':
		n, _ := strconv.Atoi(body)
		for range max(n, 0) {
			if err := readFrame(rd, b); err != nil {
				return err
			}
		}
	case '%':
		n, _ := strconv.Atoi(body)
		for range 2 * n {
			if err := readFrame(rd, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// pttls are key's PTTL on each backend: -2 absent, -3 unanswered.
func (c *cluster) pttls(t *testing.T, key string) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(c.servers))
	for i, s := range c.servers {
		d, err := s.Client(t).PTTL(t.Context(), key).Result()
		switch {
		case err != nil:
			out[i] = -3
		case d < 0:
			out[i] = d / time.Nanosecond
		default:
			out[i] = d
		}
	}
	return out
}

// heldOn counts the backends where value holds key.
func (c *cluster) heldOn(t *testing.T, key, value string) int {
	n := 0
	for _, v := range c.held(t, key) {
		if v == value {
			n++
		}
	}
	return n
}

// TestSessionLockLivesWithConnection: SET k token NX (no TTL) holds the
// lock with the short lease on every backend for as long as its
// connection is open, several leases over, and closing the connection
// frees it at once.
func TestSessionLockLivesWithConnection(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	holder := dialRaw(t, c.proxy.Addr)
	if got := holder.do(t, "SET", "s", "mine", "NX"); got != "+OK\r\n" {
		t.Fatalf("SET s mine NX: %q", got)
	}
	for i, d := range c.pttls(t, "s") {
		if d <= 0 || d > sessionLease {
			t.Fatalf("backend %d: PTTL %v, want the lease (%v) at most", i, d, sessionLease)
		}
	}
	other := c.proxy.Client(t)
	// Three leases: without renewals the key would be gone.
	until := time.Now().Add(3 * sessionLease)
	redistest.Eventually(t, func() string {
		if n := c.heldOn(t, "s", "mine"); n < 2 {
			t.Fatalf("%v into the hold, the lock is on %d backends", time.Until(until), n)
		}
		if time.Now().Before(until) {
			return "holding"
		}
		return ""
	})
	if got := do(t, other, "SET", "s", "theirs", "NX", "PX", 10000); got != "nil" {
		t.Fatalf("another client's SET NX while the session lock is held: %q", got)
	}
	if got := holder.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("the holder's PING: %q", got)
	}
	holder.Close()
	closed := time.Now()
	redistest.Eventually(t, func() string {
		if got := do(t, other, "SET", "s", "theirs", "NX", "PX", 10000); got != "OK" {
			return "the lock is still held after its connection closed: " + got
		}
		return ""
	})
	if took := time.Since(closed); took >= sessionLease {
		t.Fatalf("the lock was freed %v after its connection closed, want well within the lease (%v)", took, sessionLease)
	}
}

// TestSessionLockLostIsTold: when renewals cannot reach a quorum, the lock
// is lost when its validity runs out, and its holder is told: a RESP3
// connection by a push message at once, and every connection by
// -LOCKLOST on its next command, which is not run.
// It runs alone (no proxyTest): beside other tests, the RESP2 connection's
// next command once came before the proxy had found its lock lost.
func TestSessionLockLostIsTold(t *testing.T) {
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	resp3 := dialRaw(t, c.proxy.Addr)
	if got := resp3.do(t, "HELLO", "3"); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3: %q", got)
	}
	resp2 := dialRaw(t, c.proxy.Addr)
	for _, conn := range []*rawConn{resp3, resp2} {
		key := fmt.Sprintf("lost%p", conn)
		if got := conn.do(t, "SET", key, "mine", "NX"); got != "+OK\r\n" {
			t.Fatalf("SET %s mine NX: %q", key, got)
		}
	}
	c.servers[0].Pause()
	c.servers[1].Pause()
	defer c.servers[0].Resume()
	defer c.servers[1].Resume()
	paused := time.Now()
	push := resp3.frame(t, 5*sessionLease)
	want := fmt.Sprintf(">3\r\n$8\r\nlocklost\r\n$%d\r\nlost%p\r\n$9\r\nno_quorum\r\n", len(fmt.Sprintf("lost%p", resp3)), resp3)
	if push != want {
		t.Fatalf("push after the quorum was lost: %q, want %q", push, want)
	}
	if took := time.Since(paused); took > 2*sessionLease {
		t.Errorf("the loss was told %v after the quorum went, want within the lease (%v) and a tick", took, sessionLease)
	}
	for _, conn := range []*rawConn{resp3, resp2} {
		got := conn.do(t, "PING")
		if !strings.HasPrefix(got, fmt.Sprintf("-LOCKLOST lost%p: ", conn)) || !strings.Contains(got, "(no_quorum)") || !strings.Contains(got, "this command was not run") {
			t.Fatalf("the next command after the loss: %q", got)
		}
		if got := conn.do(t, "PING"); got != "+PONG\r\n" {
			t.Fatalf("the command after the one told: %q", got)
		}
	}
}

// TestSessionLockSetNXThenExpire: SETNX holds a session-bound lock until
// the legacy recipe's PEXPIRE gives it a TTL; from then on it is an
// ordinary lock, which expires while its connection is still open.
func TestSessionLockSetNXThenExpire(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	holder := dialRaw(t, c.proxy.Addr)
	if got := holder.do(t, "SETNX", "nx", "mine"); got != ":1\r\n" {
		t.Fatalf("SETNX: %q", got)
	}
	for i, d := range c.pttls(t, "nx") {
		if d <= 0 || d > sessionLease {
			t.Fatalf("backend %d after SETNX: PTTL %v, want the lease (%v) at most", i, d, sessionLease)
		}
	}
	if got := holder.do(t, "PEXPIRE", "nx", strconv.Itoa(int(4*sessionLease/time.Millisecond))); got != ":1\r\n" {
		t.Fatalf("PEXPIRE: %q", got)
	}
	set := time.Now()
	redistest.Eventually(t, func() string {
		if n := c.heldOn(t, "nx", "mine"); n > 0 {
			return fmt.Sprintf("still on %d backends", n)
		}
		return ""
	})
	if took := time.Since(set); took < 3*sessionLease {
		t.Fatalf("the lock went %v after PEXPIRE of %v", took, 4*sessionLease)
	}
	if got := holder.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("a lock that expired by its own TTL is not a loss: %q", got)
	}
}

// TestSessionLockReleasedByHolder: a session lock its holder releases (the
// compare-and-delete script every library sends) is no longer renewed, and
// is not reported lost.
func TestSessionLockReleasedByHolder(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	holder := dialRaw(t, c.proxy.Addr)
	if got := holder.do(t, "LOCK.ACQUIRE", "rel", "mine", "SESSION"); got != "+OK\r\n" {
		t.Fatalf("LOCK.ACQUIRE ... SESSION: %q", got)
	}
	if got := holder.do(t, "EVAL", compareAndDelete, "1", "rel", "mine"); got != ":1\r\n" {
		t.Fatalf("release: %q", got)
	}
	other := c.proxy.Client(t)
	if got := do(t, other, "SET", "rel", "theirs", "NX", "PX", 60000); got != "OK" {
		t.Fatalf("SET NX after the release: %q", got)
	}
	// Two leases: a renewal would find another's lock and report a loss.
	until := time.Now().Add(2 * sessionLease)
	redistest.Eventually(t, func() string {
		if time.Now().Before(until) {
			return "waiting"
		}
		return ""
	})
	if got := holder.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("after its own release, the holder got %q", got)
	}
	if n := c.heldOn(t, "rel", "theirs"); n != 3 {
		t.Fatalf("the next holder's lock is on %d backends", n)
	}
}

// TestSessionLockMaxHold: session_max_hold ends a lock however alive its
// connection, and its holder is told on its next command; a lock under
// session_prefixes is session-bound whatever TTL it was asked with.
func TestSessionLockMaxHold(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String(), "-session-max-hold", (2 * sessionLease).String(),
		"-session-prefixes", "jobs:")
	capped := dialRaw(t, c.proxy.Addr)
	if got := capped.do(t, "SET", "jobs:capped", "mine", "NX", "PX", "600000"); got != "+OK\r\n" {
		t.Fatalf("SET jobs:capped: %q", got)
	}
	if d := c.pttls(t, "jobs:capped")[0]; d <= 0 || d > sessionLease {
		t.Fatalf("a lock under session_prefixes has PTTL %v, want the lease (%v) at most", d, sessionLease)
	}
	redistest.Eventually(t, func() string {
		if c.heldOn(t, "jobs:capped", "mine") > 0 {
			return "the capped lock is still held"
		}
		return ""
	})
	if got := capped.do(t, "PING"); !strings.HasPrefix(got, "-LOCKLOST jobs:capped: ") || !strings.Contains(got, "(max_hold)") {
		t.Fatalf("the capped holder's next command: %q, want LOCKLOST (max_hold)", got)
	}
}

// TestSessionLockIdle: session_idle_timeout ends the locks of a connection
// that sends nothing, and its holder is told on its next command; a
// connection that keeps talking keeps its lock.
func TestSessionLockIdle(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String(), "-session-idle-timeout", (2 * sessionLease).String())
	idle := dialRaw(t, c.proxy.Addr)
	talking := dialRaw(t, c.proxy.Addr)
	for _, s := range []struct {
		conn *rawConn
		key  string
	}{{idle, "idle"}, {talking, "talking"}} {
		if got := s.conn.do(t, "SET", s.key, "mine", "NX"); got != "+OK\r\n" {
			t.Fatalf("SET %s NX: %q", s.key, got)
		}
	}
	redistest.Eventually(t, func() string {
		if got := talking.do(t, "PING"); got != "+PONG\r\n" {
			t.Fatalf("the talking connection: %q", got)
		}
		if c.heldOn(t, "idle", "mine") > 0 {
			return "the idle connection's lock is still held"
		}
		return ""
	})
	if got := idle.do(t, "PING"); !strings.HasPrefix(got, "-LOCKLOST idle: ") || !strings.Contains(got, "(idle)") {
		t.Fatalf("the idle holder's next command: %q, want LOCKLOST (idle)", got)
	}
	if n := c.heldOn(t, "talking", "mine"); n != 3 {
		t.Fatalf("the talking connection's lock is on %d backends", n)
	}
}

// TestSessionLockPipelinedAndInTransaction: session locks taken in a
// pipeline (where other lock commands run ahead of their turn) and inside
// MULTI/EXEC are bound to the connection all the same: closing it frees
// every one of them.
func TestSessionLockPipelinedAndInTransaction(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", (10 * time.Second).String())
	holder := dialRaw(t, c.proxy.Addr)
	batch := resp("SET", "p1", "mine", "NX") + resp("SETNX", "p2", "mine") + resp("SET", "p3", "mine", "NX") +
		resp("MULTI") + resp("SET", "p4", "mine", "NX") + resp("EXEC")
	if _, err := io.WriteString(holder, batch); err != nil {
		t.Fatal(err)
	}
	var replies []string
	for range 6 {
		replies = append(replies, holder.frame(t, 10*time.Second))
	}
	if want := []string{"+OK\r\n", ":1\r\n", "+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"}; strings.Join(replies, "|") != strings.Join(want, "|") {
		t.Fatalf("replies %q, want %q", replies, want)
	}
	keys := []string{"p1", "p2", "p3", "p4"}
	for _, k := range keys {
		if d := c.pttls(t, k)[0]; d <= 0 || d > 10*time.Second {
			t.Fatalf("%s: PTTL %v, want the lease at most", k, d)
		}
	}
	holder.Close()
	redistest.Eventually(t, func() string {
		for _, k := range keys {
			if n := c.heldOn(t, k, "mine"); n > 0 {
				return fmt.Sprintf("%s is still held on %d backends after its connection closed", k, n)
			}
		}
		return ""
	})
}

// sessionStep is one command of a session-lock worker, on the test's
// clock: sent and received.
type sessionStep struct {
	worker, gen int
	long        bool   // a grant held past the lease
	kind        string // "grant"; "ok": answered as usual while holding; "release" (:1); "told": -LOCKLOST; "lost": a broken connection
	sent, recv  time.Duration
}

// checkSessionHistory finds the grants made while another holder had not
// been told it lost the lock: a grant asked after holder i's grant was
// answered, and answered before i sent a command that was still answered
// as usual (or its release, answered :1) — i relied on the lock after
// another was granted it. It judges only what is certain on the clients'
// clock; the proxy acted somewhere between each send and receive.
func checkSessionHistory(steps []sessionStep) []string {
	type holding struct {
		worker, gen     int
		granted, relied sessionStep // relied: the last command sent while still holding
	}
	byHolding := map[[2]int]*holding{}
	var order [][2]int
	for _, s := range steps {
		id := [2]int{s.worker, s.gen}
		h := byHolding[id]
		switch {
		case s.kind == "grant":
			h = &holding{worker: s.worker, gen: s.gen, granted: s, relied: s}
			byHolding[id] = h
			order = append(order, id)
		case h != nil && (s.kind == "ok" || s.kind == "release") && s.sent > h.relied.sent:
			h.relied = s
		}
	}
	var bad []string
	for _, a := range order {
		i := byHolding[a]
		for _, b := range order {
			j := byHolding[b]
			if i == j {
				continue
			}
			if j.granted.sent > i.granted.recv && j.granted.recv < i.relied.sent {
				bad = append(bad, fmt.Sprintf("worker %d was granted the lock (asked %v, answered %v) while worker %d, granted at %v, still relied on it (a command sent at %v was answered as usual)",
					j.worker, j.granted.sent, j.granted.recv, i.worker, i.granted.recv, i.relied.sent))
			}
		}
	}
	return bad
}

// TestCheckSessionHistory: the checker finds a holder answered as usual
// after another was granted, and passes a hand-over after the release.
func TestCheckSessionHistory(t *testing.T) {
	proxyTest(t)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	clean := []sessionStep{
		{0, 0, false, "grant", ms(0), ms(2)}, {0, 0, false, "ok", ms(10), ms(11)}, {0, 0, false, "release", ms(20), ms(21)},
		{1, 0, false, "grant", ms(22), ms(24)}, {1, 0, false, "ok", ms(30), ms(31)},
		// Told: after the loss its commands are not "ok".
		{1, 0, false, "told", ms(40), ms(41)}, {0, 1, false, "grant", ms(45), ms(46)},
	}
	if bad := checkSessionHistory(clean); len(bad) != 0 {
		t.Fatalf("a clean history: %v", bad)
	}
	untold := append(clean, sessionStep{1, 0, false, "ok", ms(50), ms(51)}) // answered as usual after worker 0 was granted again
	if bad := checkSessionHistory(untold); len(bad) != 1 || !strings.Contains(bad[0], "worker 0 was granted") {
		t.Fatalf("a holder answered as usual after another's grant: %v", bad)
	}
}

// TestSessionLockNemesis: workers on two proxies contend for one key with
// session locks, holding each for a while and pinging meanwhile, while a
// majority of the backends is paused past the lease and then one proxy is
// killed (SIGKILL). The history shows no grant while a holder had not been
// told; the pause made a holder lose its lock, told by -LOCKLOST; and the
// killed proxy's lock was granted again through the other.
func TestSessionLockNemesis(t *testing.T) {
	proxyTest(t)
	c, b := twoProxiesWith(t, 3, "-session-lease", sessionLease.String())
	start := time.Now()
	now := func() time.Duration { return time.Since(start) }
	var (
		mu    sync.Mutex
		steps []sessionStep
	)
	record := func(s sessionStep) {
		mu.Lock()
		steps = append(steps, s)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var (
		wg        sync.WaitGroup
		longHolds atomic.Bool
	)
	// stepsSince waits until the history has n steps of kind sent at or
	// after from: the workload's length is a count, not a time.
	stepsSince := func(kind string, from time.Duration, n int) {
		t.Helper()
		redistest.Eventually(t, func() string {
			mu.Lock()
			defer mu.Unlock()
			got := 0
			for _, s := range steps {
				if s.kind == kind && s.sent >= from {
					got++
				}
			}
			if got < n {
				return fmt.Sprintf("%d %q steps since %v, waiting for %d", got, kind, from, n)
			}
			return ""
		})
	}
	for w := range 4 {
		addr := c.proxy.Addr
		if w%2 == 1 {
			addr = b.Addr
		}
		wg.Go(func() { sessionWorker(w, addr, now, record, &longHolds, stop) })
	}
	stepsSince("grant", 0, 5)
	// The pause must find a holder that holds on past the lease, so that
	// it loses the lock rather than releasing it.
	longHolds.Store(true)
	redistest.Eventually(t, func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range slices.Backward(steps) {
			if s.kind == "grant" && s.long {
				return ""
			}
		}
		return "no long hold yet"
	})
	longHolds.Store(false)
	// Paused past the lease, until a holder is told it lost the lock.
	pausedAt := now()
	c.servers[0].Pause()
	c.servers[1].Pause()
	stepsSince("told", pausedAt, 1)
	c.servers[0].Resume()
	c.servers[1].Resume()
	stepsSince("grant", now(), 2)
	killedAt := now()
	c.proxy.Kill()
	stepsSince("grant", killedAt, 1)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	grants, told, afterKill := 0, 0, 0
	for _, s := range steps {
		switch {
		case s.kind == "grant" && s.sent > killedAt:
			afterKill++
			grants++
		case s.kind == "grant":
			grants++
		case s.kind == "told":
			told++
		}
	}
	t.Logf("%d grants (%d after the proxy kill), %d losses told", grants, afterKill, told)
	if bad := checkSessionHistory(steps); len(bad) > 0 {
		t.Fatalf("%d violations, the first: %s", len(bad), bad[0])
	}
	if grants < 5 || told < 1 || afterKill < 1 {
		t.Fatalf("the run tested too little: %d grants, %d losses told, %d grants after the kill", grants, told, afterKill)
	}
}

// twoProxiesWith is twoProxies with more flags for both proxies.
func twoProxiesWith(t *testing.T, n int, args ...string) (*cluster, *proxyProcess) {
	t.Helper()
	c := newCluster(t, n, args...)
	urls := make([]string, n)
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	b := startProxy(t, append([]string{"-backends", strings.Join(urls, ","), "-restart-quarantine=false", "-backend-timeout", "500ms"}, args...)...)
	return c, b
}

// sessionWorker takes the key "nemesis" as a session lock through addr,
// again and again: holds it about 100 ms (with long set, for three
// leases), pinging every 15 ms, then releases it, and records every step,
// until stop.
func sessionWorker(w int, addr string, now func() time.Duration, record func(sessionStep), long *atomic.Bool, stop chan struct{}) {
	var (
		conn net.Conn
		rd   *bufio.Reader
	)
	send := func(args ...string) (string, error) {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, resp(args...)); err != nil {
			return "", err
		}
		var b strings.Builder
		err := readFrame(rd, &b)
		return b.String(), err
	}
	for gen := 0; ; gen++ {
		select {
		case <-stop:
			if conn != nil {
				conn.Close()
			}
			return
		default:
		}
		if conn == nil {
			var err error
			if conn, err = net.Dial("tcp", addr); err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			rd = bufio.NewReader(conn)
		}
		token := fmt.Sprintf("w%d-%d", w, gen)
		sent := now()
		reply, err := send("SET", "nemesis", token, "NX")
		step := sessionStep{worker: w, gen: gen, sent: sent, recv: now()}
		switch {
		case err != nil:
			conn.Close()
			conn = nil
			continue
		case reply != "+OK\r\n":
			time.Sleep(5 * time.Millisecond) // held, NOQUORUM, or a loss told
			continue
		}
		step.kind, step.long = "grant", long.Load()
		record(step)
		pings := 7
		if step.long {
			pings = int(3 * sessionLease / (15 * time.Millisecond))
		}
		holding := true
		for range pings {
			time.Sleep(15 * time.Millisecond)
			sent := now()
			reply, err := send("PING")
			step := sessionStep{worker: w, gen: gen, kind: "ok", sent: sent, recv: now()}
			switch {
			case err != nil:
				step.kind = "lost"
				holding = false
			case strings.HasPrefix(reply, "-LOCKLOST"):
				step.kind = "told"
				holding = false
			case reply != "+PONG\r\n":
				step.kind = "other"
			}
			record(step)
			if err != nil {
				conn.Close()
				conn = nil
			}
			if !holding {
				break
			}
		}
		if !holding {
			continue
		}
		sent = now()
		reply, err = send("EVAL", compareAndDelete, "1", "nemesis", token)
		step = sessionStep{worker: w, gen: gen, kind: "release", sent: sent, recv: now()}
		switch {
		case err != nil:
			step.kind = "lost"
		case strings.HasPrefix(reply, "-LOCKLOST"):
			step.kind = "told"
		case reply != ":1\r\n":
			step.kind = "other"
		}
		record(step)
		if err != nil {
			conn.Close()
			conn = nil
		}
	}
}

// TestSessionLockKeepsFencingToken: with fencing, a session lock's
// acquisition answers its token (CLIENT FENCING ON, LOCK.ACQUIRE), and renewals keep it:
// FENCE reads the same token leases later.
func TestSessionLockKeepsFencingToken(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-fencing", "-session-lease", sessionLease.String())
	holder := dialRaw(t, c.proxy.Addr)
	if got := holder.do(t, "CLIENT", "FENCING", "ON"); got != "+OK\r\n" {
		t.Fatalf("CLIENT FENCING ON: %q", got)
	}
	got := holder.do(t, "LOCK.ACQUIRE", "fenced", "mine", "SESSION")
	if !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK.ACQUIRE fenced mine SESSION with fencing on: %q, want the token", got)
	}
	until := time.Now().Add(3 * sessionLease)
	redistest.Eventually(t, func() string {
		if time.Now().Before(until) {
			return "holding"
		}
		return ""
	})
	if fence := holder.do(t, "FENCE", "fenced", "mine"); fence != got {
		t.Fatalf("FENCE three leases later: %q, want the token of the acquisition, %q", fence, got)
	}
}

// TestSessionLockGoRedisRESP3: go-redis v9 speaks RESP3 by default, so a
// lost session lock's push message reaches it unasked; it must skip the
// push and read -LOCKLOST as the next command's error, and the connection
// must serve on.
func TestSessionLockGoRedisRESP3(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	rdb := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: 3, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	ctx := t.Context()
	conn := rdb.Conn() // a session lock wants a connection of its own
	defer conn.Close()
	if err := conn.SetNX(ctx, "gr", "mine", 0).Err(); err != nil {
		t.Fatalf("SETNX through go-redis: %v", err)
	}
	c.servers[0].Pause()
	c.servers[1].Pause()
	defer c.servers[0].Resume()
	defer c.servers[1].Resume()
	var err error
	redistest.Eventually(t, func() string {
		if err = conn.Ping(ctx).Err(); err == nil {
			return "PING still answers as usual"
		}
		return ""
	})
	if !strings.HasPrefix(err.Error(), "LOCKLOST gr: ") {
		t.Fatalf("the first error after the loss: %v, want LOCKLOST", err)
	}
	if err := conn.Ping(ctx).Err(); err != nil {
		t.Fatalf("the connection after the loss was told: %v", err)
	}
}

// TestSessionLockUser: [[users]] with session = true makes every SET NX of
// that user session-bound, whatever its TTL; another user's locks keep
// theirs.
func TestSessionLockUser(t *testing.T) {
	proxyTest(t)
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	conf := `
[[users]]
name = "worker"
password_sha256 = "` + sha256Hex("pw") + `"
session = true

[[users]]
name = "web"
password_sha256 = "` + sha256Hex("pw") + `"
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3, "-config", path, "-session-lease", sessionLease.String())
	for user, session := range map[string]bool{"worker": true, "web": false} {
		conn := dialRaw(t, c.proxy.Addr)
		if got := conn.do(t, "AUTH", user, "pw"); got != "+OK\r\n" {
			t.Fatalf("AUTH %s: %q", user, got)
		}
		if got := conn.do(t, "SET", user, "mine", "NX", "PX", "60000"); got != "+OK\r\n" {
			t.Fatalf("SET NX PX 60000 as %s: %q", user, got)
		}
		d := c.pttls(t, user)[0]
		if got := d > 0 && d <= sessionLease; got != session {
			t.Errorf("%s's lock has PTTL %v on a backend; session-bound: %v, want %v", user, d, got, session)
		}
	}
}

// TestSessionLockAfterWait: LOCK.ACQUIRE ... SESSION WAIT takes the lock
// once its holder releases it, two leases later, and keeps it: the time
// it waited does not count against its first lease.
func TestSessionLockAfterWait(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-session-lease", sessionLease.String())
	holder := dialRaw(t, c.proxy.Addr)
	if got := holder.do(t, "SET", "w", "first", "NX"); got != "+OK\r\n" {
		t.Fatalf("the first holder's SET NX: %q", got)
	}
	waiter := dialRaw(t, c.proxy.Addr)
	if _, err := io.WriteString(waiter, resp("LOCK.ACQUIRE", "w", "second", "SESSION", "WAIT", "10000")); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(2 * sessionLease)
	redistest.Eventually(t, func() string {
		if time.Now().Before(until) {
			return "the first holder holds on"
		}
		return ""
	})
	if got := holder.do(t, "EVAL", compareAndDelete, "1", "w", "first"); got != ":1\r\n" {
		t.Fatalf("the first holder's release: %q", got)
	}
	if got := waiter.frame(t, 10*time.Second); got != "+OK\r\n" {
		t.Fatalf("LOCK.ACQUIRE ... SESSION WAIT: %q", got)
	}
	if got := waiter.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("the waiter right after its grant: %q", got)
	}
	until = time.Now().Add(2 * sessionLease)
	redistest.Eventually(t, func() string {
		if time.Now().Before(until) {
			return "holding"
		}
		return ""
	})
	if got := waiter.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("the waiter two leases after its grant: %q", got)
	}
	if n := c.heldOn(t, "w", "second"); n != 3 {
		t.Fatalf("the waiter's lock is on %d backends", n)
	}
}
