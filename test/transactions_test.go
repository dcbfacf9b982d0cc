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

// StackExchange.Redis (.NET) releases and extends a lock with an optimistic
// transaction when the server is older than Redis 8.4, as the proxy says it
// is (RedisDatabase.cs: GetLockReleaseTransaction, GetLockExtendTransaction;
// RedisTransaction.cs: TransactionMessage.GetMessages). On a server with
// EXECABORT it writes the condition, WATCH key then GET key, flushes and
// waits for the GET; when the value is the token it writes MULTI, the
// operation (DEL key, or PEXPIRE key ms; EXPIRE key s for whole seconds)
// and EXEC in one go, and the call returns true when EXEC answered an
// array; otherwise it writes UNWATCH and returns false. .NET is not on
// this machine: seClient replays those bytes on a raw connection.

// seClient is StackExchange.Redis's side of one connection.
type seClient struct {
	t  *testing.T
	rc *rawConn
}

func newSEClient(t *testing.T, addr string) *seClient {
	return &seClient{t: t, rc: dialRaw(t, addr)}
}

// lockRelease is IDatabase.LockRelease(key, value): the replies it read,
// in order, and its result ("true", "false", or the error it throws).
func (c *seClient) lockRelease(key, value string) (replies []string, result string) {
	return c.transaction(key, value, wireCmd("DEL", key))
}

// lockExtend is IDatabase.LockExtend(key, value, expiry).
func (c *seClient) lockExtend(key, value string, expiry time.Duration) (replies []string, result string) {
	op := wireCmd("PEXPIRE", key, strconv.FormatInt(expiry.Milliseconds(), 10))
	if expiry%time.Second == 0 {
		op = wireCmd("EXPIRE", key, strconv.FormatInt(int64(expiry/time.Second), 10))
	}
	return c.transaction(key, value, op)
}

func (c *seClient) transaction(key, value, op string) (replies []string, result string) {
	c.write(wireCmd("WATCH", key) + wireCmd("GET", key))
	watch, get := c.reply(), c.reply()
	replies = append(replies, watch, get)
	if get != bulk(value) {
		c.write(wireCmd("UNWATCH"))
		replies = append(replies, c.reply())
		if strings.HasPrefix(get, "-") {
			return replies, "error: " + strings.TrimSpace(get[1:])
		}
		return replies, "false"
	}
	c.write(wireCmd("MULTI") + op + wireCmd("EXEC"))
	multi, queued, exec := c.reply(), c.reply(), c.reply()
	replies = append(replies, multi, queued, exec)
	switch {
	case strings.HasPrefix(exec, "-"):
		return replies, "error: " + strings.TrimSpace(exec[1:])
	case exec == "*-1\r\n":
		return replies, "false"
	}
	return replies, "true"
}

func (c *seClient) write(b string) {
	c.t.Helper()
	if _, err := io.WriteString(c.rc, b); err != nil {
		c.t.Fatal(err)
	}
}

// reply reads one whole RESP2 reply, as its bytes.
func (c *seClient) reply() string {
	c.t.Helper()
	s, err := readReply(c.rc.rd)
	if err != nil {
		c.t.Fatalf("reading a reply: %v (got %q)", err, s)
	}
	return s
}

// readReply reads one RESP2 or RESP3 reply: a line, a bulk string, or an
// aggregate (array, set, push, map) of replies.
func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil || len(line) < 3 {
		return line, fmt.Errorf("short reply: %v", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		_, err := io.ReadFull(rd, buf)
		return line + string(buf), err
	case '*', '~', '>', '%':
		if line[0] == '%' {
			n *= 2 // a map's keys and values
		}
		out := line
		for range max(n, 0) {
			r, err := readReply(rd)
			out += r
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, nil
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// TestStackExchangeLockTransactions replays LockRelease and LockExtend
// through the proxy over 5 real backends: for the owner, a non-owner and
// an absent key, with all backends up, one down, and a majority down.
func TestStackExchangeLockTransactions(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 5)
	owner := newSEClient(t, c.proxy.Addr)
	take := func(key, token string) {
		t.Helper()
		if got := redisCLI(t, c.proxy.Addr, "SET", key, token, "NX", "PX", "30000"); got != "OK" {
			t.Fatalf("LockTake %s: %q", key, got)
		}
	}
	check := func(what string, gotReplies []string, got string, wantReplies []string, want string) {
		t.Helper()
		if got != want || strings.Join(gotReplies, "") != strings.Join(wantReplies, "") {
			t.Errorf("%s: returned %s after replies %q; want %s after %q", what, got, gotReplies, want, wantReplies)
		}
	}
	const ok, queued = "+OK\r\n", "+QUEUED\r\n"
	for _, down := range []int{0, 1} {
		for i := range down {
			c.servers[i].Kill()
		}
		key := fmt.Sprintf("se:%d", down)
		take(key, "me")
		r, got := owner.lockExtend(key, "me", 20500*time.Millisecond)
		check(fmt.Sprintf("%d down: LockExtend by the owner, ms", down), r, got, []string{ok, bulk("me"), ok, queued, "*1\r\n:1\r\n"}, "true")
		r, got = owner.lockExtend(key, "me", 20*time.Second)
		check(fmt.Sprintf("%d down: LockExtend by the owner, s", down), r, got, []string{ok, bulk("me"), ok, queued, "*1\r\n:1\r\n"}, "true")
		if ms, _ := strconv.Atoi(redisCLI(t, c.proxy.Addr, "PTTL", key)); ms <= 10000 || ms > 20000 {
			t.Errorf("%d down: PTTL after LockExtend(20 s): %d", down, ms)
		}
		r, got = owner.lockExtend(key, "you", 20*time.Second)
		check(fmt.Sprintf("%d down: LockExtend by a non-owner", down), r, got, []string{ok, bulk("me"), ok}, "false")
		r, got = owner.lockRelease(key, "you")
		check(fmt.Sprintf("%d down: LockRelease by a non-owner", down), r, got, []string{ok, bulk("me"), ok}, "false")
		if held := redisCLI(t, c.proxy.Addr, "GET", key); held != "me" {
			t.Fatalf("%d down: after a non-owner's release the lock is %q", down, held)
		}
		r, got = owner.lockRelease(key, "me")
		check(fmt.Sprintf("%d down: LockRelease by the owner", down), r, got, []string{ok, bulk("me"), ok, queued, "*1\r\n:1\r\n"}, "true")
		r, got = owner.lockRelease(key, "me")
		check(fmt.Sprintf("%d down: LockRelease of an absent key", down), r, got, []string{ok, "$-1\r\n", ok}, "false")
		r, got = owner.lockExtend(key, "me", time.Second)
		check(fmt.Sprintf("%d down: LockExtend of an absent key", down), r, got, []string{ok, "$-1\r\n", ok}, "false")
		for i, s := range c.servers[down:] {
			if n := clientKeys(t, s); n != 0 {
				t.Errorf("%d down: backend %d holds %d keys after the release", down, i+down, n)
			}
		}
	}

	// The lock expires between the GET and EXEC and another client takes
	// it: EXEC answers the nil array, as Redis does for a watched key that
	// changed, and the other holder keeps it.
	take("se:raced", "me")
	owner.write(wireCmd("WATCH", "se:raced") + wireCmd("GET", "se:raced"))
	if w, g := owner.reply(), owner.reply(); w != ok || g != bulk("me") {
		t.Fatalf("WATCH, GET: %q %q", w, g)
	}
	if got := redisCLI(t, c.proxy.Addr, "DEL", "se:raced"); got != "1" {
		t.Fatalf("DEL: %q", got)
	}
	take("se:raced", "other")
	owner.write(wireCmd("MULTI") + wireCmd("DEL", "se:raced") + wireCmd("EXEC"))
	if m, q, e := owner.reply(), owner.reply(), owner.reply(); m+q+e != ok+queued+"*-1\r\n" {
		t.Errorf("EXEC after the watched lock changed hands: %q %q %q, want the nil array", m, q, e)
	}
	if held := redisCLI(t, c.proxy.Addr, "GET", "se:raced"); held != "other" {
		t.Errorf("the other holder's lock is %q", held)
	}

	// A majority down: the GET cannot be decided, so the condition fails
	// and nothing is released; a client that went on anyway gets NOQUORUM
	// from EXEC, not a release it cannot be sure of.
	take("se:majority", "me")
	owner.write(wireCmd("WATCH", "se:majority") + wireCmd("GET", "se:majority"))
	if w, g := owner.reply(), owner.reply(); w != ok || g != bulk("me") {
		t.Fatalf("WATCH, GET: %q %q", w, g)
	}
	for _, s := range c.servers[1:3] {
		s.Kill()
	}
	owner.write(wireCmd("MULTI") + wireCmd("DEL", "se:majority") + wireCmd("EXEC"))
	if m, q, e := owner.reply(), owner.reply(), owner.reply(); m+q != ok+queued || !strings.HasPrefix(e, "-NOQUORUM ") {
		t.Errorf("EXEC with a majority down: %q %q %q, want NOQUORUM", m, q, e)
	}
	r, got := owner.lockRelease("se:majority", "me")
	if len(r) != 3 || !strings.HasPrefix(r[1], "-NOQUORUM ") || r[2] != ok || !strings.HasPrefix(got, "error: NOQUORUM") {
		t.Errorf("LockRelease with a majority down: %q %s", r, got)
	}
	if n := clientKeys(t, c.servers[3]) + clientKeys(t, c.servers[4]); n != 2 {
		t.Errorf("the two live backends hold %d keys, want the lock on both", n)
	}
}

// TestTransactionsAgainstRedis: the transaction shapes the proxy serves
// answer as a plain redis-server answers them, byte for byte, for the
// owner and for a non-owner whose watched key changed.
func TestTransactionsAgainstRedis(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	plain := redistest.Start(t)
	for _, target := range []struct {
		name string
		addr string
	}{{"proxy", c.proxy.Addr}, {"redis-server", plain.Addr()}} {
		t.Run(target.name, func(t *testing.T) {
			set := func(key, token string) {
				if got := redisCLI(t, target.addr, "SET", key, token, "NX", "PX", "30000"); got != "OK" {
					t.Fatalf("SET: %q", got)
				}
			}
			cl := newSEClient(t, target.addr)
			set("tx:a", "me")
			cl.write(wireCmd("WATCH", "tx:a") + wireCmd("GET", "tx:a") + wireCmd("MULTI") +
				wireCmd("SET", "tx:a", "me", "PX", "20000") + wireCmd("EXEC"))
			var got []string
			for range 5 {
				got = append(got, cl.reply())
			}
			if want := "+OK\r\n" + bulk("me") + "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"; strings.Join(got, "") != want {
				t.Errorf("extend with SET: %q, want %q", got, want)
			}
			cl.write(wireCmd("WATCH", "tx:a") + wireCmd("GET", "tx:a"))
			cl.reply()
			cl.reply()
			redisCLI(t, target.addr, "DEL", "tx:a")
			set("tx:a", "other")
			cl.write(wireCmd("MULTI") + wireCmd("PEXPIRE", "tx:a", "1000") + wireCmd("EXEC"))
			got = nil
			for range 3 {
				got = append(got, cl.reply())
			}
			if want := "+OK\r\n+QUEUED\r\n*-1\r\n"; strings.Join(got, "") != want {
				t.Errorf("extend after the key changed hands: %q, want %q", got, want)
			}
			if ms, _ := strconv.Atoi(redisCLI(t, target.addr, "PTTL", "tx:a")); ms < 20000 {
				t.Errorf("the other holder's TTL was changed: %d ms", ms)
			}
			redisCLI(t, target.addr, "DEL", "tx:a")
		})
	}
}
