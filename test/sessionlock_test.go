package test

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

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
