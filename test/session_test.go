package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestChatter: the small commands clients send around their locks.
func TestChatter(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	cli := c.proxy.Client(t)
	for _, s := range []struct {
		args []any
		want string // substring of the reply
	}{
		{[]any{"INFO"}, "redis_version:"},
		{[]any{"INFO", "server"}, "# Server"},
		{[]any{"TIME"}, "["},
		{[]any{"CONFIG", "GET", "maxmemory"}, ""},
		{[]any{"COMMAND", "DOCS"}, ""},
		{[]any{"CLIENT", "ID"}, ""},
		{[]any{"CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip"}, "OK"},
		{[]any{"HELLO", 3}, "proto:3"},
		{[]any{"SELECT", 16}, "ERR:"},
	} {
		got := do(t, cli, s.args...)
		if strings.HasPrefix(got, "ERR:") != strings.HasPrefix(s.want, "ERR:") || !strings.Contains(got, strings.TrimPrefix(s.want, "ERR:")) {
			t.Errorf("%v: expected %q in the reply, got %q", s.args, s.want, got)
		}
	}
}

// TestAuth: with a password, nothing but the handshake is served before
// AUTH, and nothing reaches the backends.
func TestAuth(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-password", "s3cret")
	anon := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: 2, MaxRetries: -1})
	defer anon.Close()
	before := make([]int64, len(c.servers))
	for i, s := range c.servers {
		before[i] = commandCalls(t, s, "set")
	}
	if got := do(t, anon, "SET", "k", "me", "NX", "PX", 10000); !strings.HasPrefix(got, "ERR:NOAUTH") {
		t.Fatalf("unauthenticated SET: expected NOAUTH, got %q", got)
	}
	for i, s := range c.servers {
		if commandCalls(t, s, "set") != before[i] {
			t.Errorf("backend %d ran SET for an unauthenticated client", i)
		}
	}
	wrong := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Password: "guess", MaxRetries: -1})
	defer wrong.Close()
	if err := wrong.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: expected WRONGPASS, got %v", err)
	}
	// go-redis authenticates inside HELLO 3.
	authed := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Password: "s3cret", MaxRetries: -1})
	defer authed.Close()
	if got := do(t, authed, "SET", "k", "me", "NX", "PX", 10000); got != "OK" {
		t.Fatalf("authenticated SET: %q", got)
	}
}

// TestQuarantineOnColdStart: fresh backends count only once up for max_ttl,
// and the error says why.
func TestQuarantineOnColdStart(t *testing.T) {
	proxyTest(t)
	_, list := backends(t, 3)
	p := startProxy(t, "-backends", list, "-max-ttl", "3s", "-backend-timeout", "500ms")
	cli := p.Client(t)
	// They answered: "0 of 3 answered" would send an operator to the network.
	quarantined := regexp.MustCompile(`^ERR:NOQUORUM 0 of 3 backends count \(3 answered, 3 quarantined as unmarked \(new or emptied; lockproxy init marks new ones\) for up to [1-3] s more\); 2 needed$`)
	if got := do(t, cli, "SET", "k", "me", "NX", "PX", 1000); !quarantined.MatchString(got) {
		t.Fatalf("on fresh backends: got %q, want a match of %s", got, quarantined)
	}
	start := time.Now()
	redistest.Eventually(t, func() string {
		if got := do(t, cli, "SET", "k", "me", "NX", "PX", 1000); got != "OK" {
			return fmt.Sprintf("still %q after %s", got, time.Since(start))
		}
		return ""
	})
	if !strings.Contains(p.Log(), "counts_at") {
		t.Errorf("the log does not say when the backends will count:\n%s", p.Log())
	}
}
