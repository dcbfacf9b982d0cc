package test

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	compareAndDelete = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	// The same script as another library writes it: other case, quotes, spacing.
	compareAndDeleteVariant = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n\treturn redis.call('DEL', KEYS[1])\nelse\n\treturn 0\nend\n"
	compareAndPexpire       = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`
)

func sha(script string) string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}

// do sends one command and returns its reply or error text, so that a table
// can state both.
func do(t *testing.T, c *redis.Client, args ...any) string {
	t.Helper()
	v, err := c.Do(t.Context(), args...).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "nil"
	case err != nil:
		return "ERR:" + err.Error()
	}
	return fmt.Sprint(v)
}

// TestCommands runs every row of the command table through go-redis v9
// against 3 and 5 real backends.
func TestCommands(t *testing.T) {
	proxyTest(t)
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			c := newCluster(t, n)
			cli := c.proxy.Client(t)
			steps := []struct {
				args []any
				want string // exact reply, ERR:prefix for an error starting so, range:lo-hi for an integer
			}{
				// Acquire, options in any order and case; contention is nil.
				{[]any{"SET", "lock:a", "t1", "NX", "PX", 30000}, "OK"},
				{[]any{"SET", "lock:a", "t2", "NX", "PX", 30000}, "nil"},
				{[]any{"set", "lock:b", "t1", "px", 30000, "nx"}, "OK"},
				{[]any{"SET", "lock:c", "t1", "EX", 30, "NX"}, "OK"},
				{[]any{"SET", "lock:c", "t2", "nx", "ex", 30}, "nil"},
				// Reads.
				{[]any{"GET", "lock:a"}, "t1"},
				{[]any{"GET", "lock:none"}, "nil"},
				{[]any{"EXISTS", "lock:a", "lock:none", "lock:b"}, "2"},
				{[]any{"TTL", "lock:a"}, "range:29-30"},
				{[]any{"PTTL", "lock:none"}, "-2"},
				// Compare-and-pexpire and compare-and-delete by EVAL.
				{[]any{"EVAL", compareAndPexpire, 1, "lock:a", "t2", 50000}, "0"},
				{[]any{"EVAL", compareAndPexpire, 1, "lock:a", "t1", 50000}, "1"},
				{[]any{"TTL", "lock:a"}, "range:49-50"},
				{[]any{"EVAL", compareAndDelete, 1, "lock:a", "t2"}, "0"},
				{[]any{"EVAL", compareAndDelete, 1, "lock:a", "t1"}, "1"},
				{[]any{"GET", "lock:a"}, "nil"},
				// By SCRIPT LOAD + EVALSHA; an unknown SHA1 is NOSCRIPT.
				{[]any{"EVALSHA", sha(compareAndDeleteVariant), 1, "lock:b", "t1"}, "ERR:NOSCRIPT No matching script. Please use EVAL."},
				{[]any{"SCRIPT", "LOAD", compareAndDeleteVariant}, sha(compareAndDeleteVariant)},
				{[]any{"SCRIPT", "EXISTS", sha(compareAndDeleteVariant), sha("nothing")}, "[1 0]"},
				{[]any{"EVALSHA", sha(compareAndDeleteVariant), 1, "lock:b", "t1"}, "1"},
				{[]any{"SCRIPT", "LOAD", compareAndPexpire}, sha(compareAndPexpire)},
				{[]any{"EVALSHA", sha(compareAndPexpire), 1, "lock:c", "t1", 40000}, "1"},
				{[]any{"SCRIPT", "FLUSH"}, "OK"},
				{[]any{"EVALSHA", sha(compareAndPexpire), 1, "lock:c", "t1", 40000}, "ERR:NOSCRIPT No matching script. Please use EVAL."},
				{[]any{"EVAL", "return redis.call('flushall')", 0}, "ERR:ERR lockproxy does not run this script (sha1 " + sha("return redis.call('flushall')")},
				// Unconditional DEL and PEXPIRE/EXPIRE.
				{[]any{"PEXPIRE", "lock:c", 45000}, "1"},
				{[]any{"TTL", "lock:c"}, "range:44-45"},
				{[]any{"EXPIRE", "lock:none", 10}, "0"},
				{[]any{"DEL", "lock:c", "lock:none"}, "1"},
				{[]any{"EXISTS", "lock:c"}, "0"},
				// The legacy recipe: SETNX, then EXPIRE.
				{[]any{"SETNX", "lock:d", "t1"}, "1"},
				{[]any{"SETNX", "lock:d", "t2"}, "0"},
				{[]any{"EXPIRE", "lock:d", 20}, "1"},
				{[]any{"TTL", "lock:d"}, "range:19-20"},
				// Compare-and-extend and compare-and-delete sent as commands.
				{[]any{"SET", "lock:d", "t1", "IFEQ", "t1", "PX", 25000}, "OK"},
				{[]any{"SET", "lock:d", "t2", "IFEQ", "t2", "PX", 25000}, "nil"},
				{[]any{"DELEX", "lock:d", "IFEQ", "t2"}, "0"},
				{[]any{"DELEX", "lock:d", "IFEQ", "t1"}, "1"},
				{[]any{"SET", "lock:e", "t1", "NX", "PX", 10000}, "OK"},
				{[]any{"DELIFEQ", "lock:e", "t1"}, "1"},
				// Not lock operations, bad TTLs, bad arity: errors in Redis's words.
				{[]any{"SET", "lock:f", "t1"}, "ERR:ERR lockproxy"},
				{[]any{"SET", "lock:f", "t1", "XX", "PX", 1000}, "ERR:ERR lockproxy"},
				{[]any{"SET", "lock:f", "t1", "NX", "PX", 1000, "GET"}, "ERR:ERR lockproxy"},
				{[]any{"SET", "lock:f", "t1", "NX", "PX", 0}, "ERR:ERR invalid expire time in 'set' command"},
				{[]any{"SET", "lock:f", "t1", "NX", "PX", -5}, "ERR:ERR invalid expire time in 'set' command"},
				{[]any{"SET", "lock:f", "t1", "NX", "PX", "soon"}, "ERR:ERR"},
				{[]any{"SET", "lock:f", "t1", "NX", "PX", 86400001}, "ERR:ERR invalid expire time"}, // above the default max_ttl, 24 h
				{[]any{"SET", "lock:f"}, "ERR:ERR wrong number of arguments for 'set' command"},
				{[]any{"GET"}, "ERR:ERR wrong number of arguments for 'get' command"},
				{[]any{"FLUSHALL"}, "ERR:ERR FLUSHALL is off: set allow_flush = true"},
				{[]any{"SWAPDB", 0, 1}, "ERR:ERR unknown command 'SWAPDB'"},
				{[]any{"EXISTS", "lock:f"}, "0"},
				// Connection chatter that clients send.
				{[]any{"PING"}, "PONG"},
				{[]any{"ECHO", "hi"}, "hi"},
				{[]any{"SELECT", 0}, "OK"},
				{[]any{"CLIENT", "SETNAME", "e2e"}, "OK"},
				{[]any{"CLIENT", "GETNAME"}, "e2e"},
				{[]any{"CLIENT", "SETINFO", "LIB-NAME", "x"}, "OK"},
			}
			for _, s := range steps {
				got := do(t, cli, s.args...)
				var lo, hi, n int
				if _, err := fmt.Sscanf(s.want, "range:%d-%d", &lo, &hi); err == nil {
					if _, err := fmt.Sscan(got, &n); err != nil || n < lo || n > hi {
						t.Errorf("%v: expected %d to %d, got %q", s.args, lo, hi, got)
					}
				} else if strings.HasPrefix(s.want, "ERR:") {
					if !strings.HasPrefix(got, s.want) {
						t.Errorf("%v: expected an error starting %q, got %q", s.args, s.want, got)
					}
				} else if got != s.want {
					t.Errorf("%v: expected %q, got %q", s.args, s.want, got)
				}
			}
			// Nothing but lock operations reached the backends.
			for i, s := range c.servers {
				stats := s.Client(t).Info(t.Context(), "commandstats").Val()
				for _, forbidden := range []string{"cmdstat_flushall", "cmdstat_keys"} {
					if strings.Contains(stats, forbidden) {
						t.Errorf("backend %d ran %s", i, forbidden)
					}
				}
			}
		})
	}
}

// TestRedisCLI follows the README's quick start with redis-cli itself.
func TestRedisCLI(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 5)
	addr := c.proxy.Addr
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "mylock", "me", "NX", "PX", "30000"}, "OK"},
		{[]string{"SET", "mylock", "you", "PX", "30000", "NX"}, ""},
		{[]string{"GET", "mylock"}, "me"},
		{[]string{"EVAL", compareAndDelete, "1", "mylock", "you"}, "0"},
		{[]string{"EVAL", compareAndDelete, "1", "mylock", "me"}, "1"},
		{[]string{"SET", "mylock", "me"}, "ERR lockproxy"},
		{[]string{"PING"}, "PONG"},
	} {
		got := redisCLI(t, addr, step.args...)
		// Without a terminal, redis-cli prints raw replies: nil is an empty line.
		if step.want == "" && got != "" || !strings.HasPrefix(got, step.want) {
			t.Errorf("redis-cli %v: expected %q, got %q", step.args, step.want, got)
		}
	}
	if got := redisCLI(t, addr, "INFO", "server"); !strings.Contains(got, "redis_version:") {
		t.Errorf("INFO server lacks redis_version: %q", got)
	}
}

// TestRESP3 checks that a RESP3 connection (go-redis's default) and a RESP2
// one both get the null each expects for contention.
func TestRESP3AndRESP2(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	for _, proto := range []int{2, 3} {
		cli := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, Protocol: proto, MaxRetries: -1})
		defer cli.Close()
		key := fmt.Sprintf("resp%d", proto)
		if err := cli.SetNX(t.Context(), key, "a", 10*time.Second).Err(); err != nil {
			t.Fatalf("RESP%d SetNX: %v", proto, err)
		}
		ok, err := cli.SetNX(t.Context(), key, "b", 10*time.Second).Result()
		if err != nil || ok {
			t.Errorf("RESP%d contended SetNX: expected false, got %v, %v", proto, ok, err)
		}
		if _, err := cli.Get(t.Context(), "absent").Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("RESP%d GET absent: expected redis.Nil, got %v", proto, err)
		}
		hello, err := cli.Do(t.Context(), "HELLO", proto).Result()
		if err != nil {
			t.Fatalf("RESP%d HELLO: %v", proto, err)
		}
		// A map in RESP3, a flat list of pairs in RESP2.
		if text := fmt.Sprint(hello); !strings.Contains(text, fmt.Sprintf("proto:%d", proto)) && !strings.Contains(text, fmt.Sprintf("proto %d", proto)) {
			t.Errorf("RESP%d HELLO reply: %v", proto, hello)
		}
	}
}

// TestPipelinedLocks: a go-redis pipeline of lock commands, on distinct keys
// and on one key, gets every reply right and in order.
func TestPipelinedLocks(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	cli := c.proxy.Client(t)
	ctx := t.Context()
	const n = 50
	var sets []*redis.BoolCmd
	var gets []*redis.StringCmd
	var contended []*redis.BoolCmd
	if _, err := cli.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			sets = append(sets, p.SetNX(ctx, fmt.Sprintf("pipe:%d", i), fmt.Sprintf("tok%d", i), 10*time.Second))
		}
		for i := range n {
			gets = append(gets, p.Get(ctx, fmt.Sprintf("pipe:%d", i)))
		}
		// One key, taken in turn: only the first may win.
		for i := range 5 {
			contended = append(contended, p.SetNX(ctx, "pipe:one", fmt.Sprintf("tok%d", i), 10*time.Second))
		}
		return nil
	}); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	for i := range n {
		if ok, err := sets[i].Result(); !ok || err != nil {
			t.Fatalf("SET pipe:%d: %v, %v", i, ok, err)
		}
		if v, err := gets[i].Result(); v != fmt.Sprintf("tok%d", i) || err != nil {
			t.Fatalf("GET pipe:%d: %q, %v", i, v, err)
		}
	}
	for i, cmd := range contended {
		if ok, err := cmd.Result(); ok != (i == 0) || err != nil {
			t.Fatalf("SET NX pipe:one #%d: %v, %v; only the first may win", i, ok, err)
		}
	}
	if got := c.held(t, "pipe:one"); strings.Count(strings.Join(got, ","), "tok0") < 2 {
		t.Fatalf("backends hold %v for pipe:one, want tok0 on a quorum", got)
	}
}

// TestQuitEndsThePipeline: commands written after QUIT in the same write are
// never run, as on redis-server, even lock commands the proxy would run
// ahead of their turn: a client must not hold a lock it never heard of.
func TestQuitEndsThePipeline(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	for _, tc := range []struct {
		name, req, want string
		ran, dropped    []string // keys that must be held, and not be held
	}{
		{"QUIT then SET", wireCmd("QUIT") + wireCmd("SET", "after", "t", "NX", "PX", "30000"),
			"+OK\r\n", nil, []string{"after"}},
		{"inline QUIT then SET", "QUIT\r\nSET after t NX PX 30000\r\n",
			"+OK\r\n", nil, []string{"after"}},
		{"pipelined SETs around QUIT", wireCmd("SET", "before1", "t", "NX", "PX", "30000") + wireCmd("SET", "before2", "t", "NX", "PX", "30000") +
			wireCmd("QUIT") + wireCmd("SET", "after1", "t", "NX", "PX", "30000") + wireCmd("SET", "after2", "t", "NX", "PX", "30000"),
			"+OK\r\n+OK\r\n+OK\r\n", []string{"before1", "before2"}, []string{"after1", "after2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, key := range append(tc.ran, tc.dropped...) {
				for _, s := range c.servers {
					s.Client(t).Del(t.Context(), key)
				}
			}
			conn := dialRaw(t, c.proxy.Addr)
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(conn.rd)
			if string(got) != tc.want || err != nil {
				t.Fatalf("replies: got %q (%v), want %q and the connection closed", got, err, tc.want)
			}
			// The proxy counts a connection closed only once it served the
			// last command it was going to serve: after that, whatever ran
			// has reached a quorum.
			waitClients(t, c.proxy.Addr, 0)
			for _, key := range tc.dropped {
				if held := c.held(t, key); strings.Join(held, "") != "" {
					t.Errorf("%s, sent after QUIT, ran: the backends hold %q", key, held)
				}
			}
			for _, key := range tc.ran {
				if held := c.held(t, key); strings.Count(strings.Join(held, ","), "t") < 2 {
					t.Errorf("%s, sent before QUIT, is held by %q, want a quorum", key, held)
				}
			}
		})
	}
}

// TestDatabasesThroughClients: the database of a client's URL (go-redis's
// DB, redis-py's redis://host:port/n), which they SELECT at connect, holds
// locks apart from database 0's of the same name.
func TestDatabasesThroughClients(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	ctx := t.Context()
	zero := c.proxy.Client(t)
	three := redis.NewClient(&redis.Options{Addr: c.proxy.Addr, DB: 3, MaxRetries: -1})
	t.Cleanup(func() { three.Close() })
	for _, cli := range []*redis.Client{zero, three} {
		if ok, err := cli.SetNX(ctx, "job", "mine", 30*time.Second).Result(); err != nil || !ok {
			t.Fatalf("go-redis SetNX in database %d: %v, %v; want true", cli.Options().DB, ok, err)
		}
	}
	if ok, err := three.SetNX(ctx, "job", "again", 30*time.Second).Result(); err != nil || ok {
		t.Errorf("go-redis SetNX of a lock held in database 3: %v, %v; want false", ok, err)
	}
	host, port, _ := strings.Cut(c.proxy.Addr, ":")
	py := exec.Command(debianPython, "-c", `import redis, sys
url = "redis://%s:%s/" % (sys.argv[1], sys.argv[2])
five, zero = redis.Redis.from_url(url + "5"), redis.Redis.from_url(url + "0")
print(five.lock("job", timeout=30).acquire(blocking=False), zero.lock("job", timeout=30).acquire(blocking=False),
      five.lock("pyjob", timeout=30).acquire(blocking=False), zero.lock("pyjob", timeout=30).acquire(blocking=False))`, host, port)
	if out, err := py.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "True False True True" {
		t.Errorf("redis-py locks in databases 5 and 0: %q, %v; want True False True True", out, err)
	}
}
