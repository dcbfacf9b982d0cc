package test

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedDefault: with no configuration the proxy runs on in-memory
// backends, says so once, and takes a lock at once.
func TestEmbeddedDefault(t *testing.T) {
	p := startProxy(t)
	if got := redisCLI(t, p.Addr, "SET", "mylock", "me", "NX", "PX", "30000"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if got := redisCLI(t, p.Addr, "SET", "mylock", "you", "NX", "PX", "30000"); got != "" {
		t.Fatalf("contended SET: %q", got)
	}
	if got, err := strconv.Atoi(redisCLI(t, p.Addr, "PTTL", "mylock")); err != nil || got <= 0 || got > 30000 {
		t.Fatalf("PTTL: %d, %v", got, err)
	}
	if n := strings.Count(p.Log(), "NO fault tolerance"); n != 1 {
		t.Fatalf("expected one warning about the embedded backends, got %d:\n%s", n, p.Log())
	}
}

// TestCrashRequest: the 27-byte request that panics redcon gets a protocol
// error; the proxy lives on and serves locks.
func TestCrashRequest(t *testing.T) {
	c := newCluster(t, 3)
	conn, err := net.Dial("tcp", c.proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("*1\r\n$9223372036854775807\r\n")); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.HasPrefix(line, "-ERR Protocol error") {
		t.Fatalf("expected a protocol error, got %q", line)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("connection not closed cleanly: %v", err)
	}
	cli := c.proxy.Client(t)
	if got := do(t, cli, "SET", "after", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("lock after the crash request: %q", got)
	}
}

// TestBadStartup: a bad configuration stops the proxy with a message naming
// the key, before it listens.
func TestBadStartup(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-backends", "http://127.0.0.1:1"}, "backends"},
		{[]string{"-max-ttl", "forever"}, "max_ttl"},
		{[]string{"-drift-factor", "2"}, "drift_factor"},
	} {
		out, err := runBinary(tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: expected a failure naming %s, got %v:\n%s", tc.args, tc.want, err, out)
		}
	}
}
