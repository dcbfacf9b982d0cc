package test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// The bad-input suite (BRIEF §6): hostile requests on raw TCP connections to
// the real binary. Each gets its error reply; where the proxy claims Redis's
// wording, the same bytes go to a plain redis-server and the replies must be
// byte for byte the same. Afterwards the proxy still serves a lock cycle.

// quitRequest ends every exchange: its +OK shows that the stream before it
// was framed as the server saw fit, and its close ends the read.
const quitRequest = "*1\r\n$4\r\nQUIT\r\n"

// resp encodes args as one RESP multibulk request.
func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// exchange sends req then QUIT on a fresh connection to addr and returns
// everything the server wrote before closing, without QUIT's +OK; quit
// reports whether that +OK came (false: the server closed on its own, as
// after a protocol error).
func exchange(t *testing.T, addr, req string) (reply string, quit bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	// Write in the background: a server that closes early leaves part of
	// the request unread, and the write fails while the reply is readable.
	go io.WriteString(conn, req+quitRequest)
	got, err := io.ReadAll(conn)
	if err != nil && !(errors.Is(err, syscall.ECONNRESET) && len(got) > 0) {
		t.Fatalf("reading the reply to %q: %v (after %q)", clip(req), err, got)
	}
	reply, quit = strings.CutSuffix(string(got), "+OK\r\n")
	return reply, quit
}

// clip shortens a request for messages.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// badRequest is one hostile request. want is the proxy's whole reply when
// prefix is false, else its first bytes; closes says the proxy hangs up
// after it (a protocol error). redis says the proxy claims Redis's wording:
// a plain redis-server must send the very same bytes.
type badRequest struct {
	name   string
	req    string
	want   string
	prefix bool
	closes bool
	redis  bool
}

const (
	errMultibulk = "-ERR Protocol error: invalid multibulk length\r\n"
	errBulk      = "-ERR Protocol error: invalid bulk length\r\n"
	errNotInt    = "-ERR value is not an integer or out of range\r\n"
	errSyntaxR   = "-ERR syntax error\r\n"
	errSetExpire = "-ERR invalid expire time in 'set' command\r\n"
	errLockShape = "-ERR lockproxy only takes locks: "
	errTxShape   = "-ERR lockproxy runs a transaction only as a lock operation: WATCH key, GET key, MULTI, then one DEL key, PEXPIRE key ms, EXPIRE key s or SET key <the value read> PX|EX ttl, EXEC; nothing was done (got "
)

var badRequests = []badRequest{
	// Framing.
	{name: "type byte +", req: "+PING\r\n", want: "-ERR unknown command '+PING', with args beginning with: \r\n", redis: true},
	{name: "type byte : then inline", req: ":1\r\nPING\r\n", want: "-ERR unknown command ':1', with args beginning with: \r\n+PONG\r\n", redis: true},
	{name: "bulk without array", req: "$4\r\nPING\r\n", want: "-ERR unknown command '$4', with args beginning with: \r\n+PONG\r\n", redis: true},
	{name: "non-numeric count", req: "*x\r\n$4\r\nPING\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "count with plus sign", req: "*+1\r\n$4\r\nPING\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "count with space", req: "* 1\r\n$4\r\nPING\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "non-numeric length", req: "*1\r\n$x\r\nPING\r\n", want: errBulk, closes: true, redis: true},
	{name: "length with minus zero", req: "*1\r\n$-0\r\n\r\n", want: errBulk, closes: true},
	{name: "count without CR", req: "*1\n$4\r\nPING\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "length without CR", req: "*1\r\n$4\nPING\r\n", want: errBulk, closes: true, redis: true},
	// Redis skips the two bytes after a payload unread; the guard insists on CRLF.
	{name: "payload without CRLF", req: "*1\r\n$4\r\nPINGPING\r\n", want: errBulk, closes: true},
	{name: "payload longer than its length", req: "*1\r\n$2\r\nPING\r\n", want: errBulk, closes: true},
	{name: "count -5", req: "*-5\r\n", want: errMultibulk, closes: true},
	{name: "count 0", req: "*0\r\n", want: errMultibulk, closes: true},
	{name: "length -2", req: "*1\r\n$-2\r\n", want: errBulk, closes: true, redis: true},
	{name: "null bulk in a request", req: "*1\r\n$-1\r\n", want: errBulk, closes: true, redis: true},
	{name: "fewer bulks than the count", req: "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n", want: "-ERR Protocol error: expected '$', got '*'\r\n", closes: true, redis: true},
	{name: "more bulks than the count", req: "*1\r\n$4\r\nPING\r\n$4\r\nPING\r\n",
		want: "+PONG\r\n-ERR unknown command '$4', with args beginning with: \r\n+PONG\r\n", redis: true},
	{name: "simple string for a bulk", req: "*1\r\n+PING\r\n", want: "-ERR Protocol error: expected '$', got '+'\r\n", closes: true, redis: true},
	{name: "count 2^63-1", req: "*9223372036854775807\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "count overflowing int64", req: "*99999999999999999999999\r\n", want: errMultibulk, closes: true, redis: true},
	{name: "count beyond max_request_bytes", req: "*1000000\r\n", want: "-ERR Protocol error: request exceeds max_request_bytes (1048576)\r\n", closes: true},
	{name: "length 99999999999", req: "*1\r\n$99999999999\r\n", want: errBulk, closes: true, redis: true},
	{name: "length 2^63-1", req: "*1\r\n$9223372036854775807\r\n", want: errBulk, closes: true, redis: true},
	{name: "length beyond max_request_bytes", req: "*1\r\n$2000000\r\n", want: errBulk, closes: true},
	{name: "payload too big for max_request_bytes", req: "*1\r\n$1048570\r\n", want: "-ERR Protocol error: request exceeds max_request_bytes (1048576)\r\n", closes: true},
	{name: "inline line beyond 64 KiB", req: strings.Repeat("a", 256<<10), want: "-ERR Protocol error: too big inline request\r\n", closes: true, redis: true},
	{name: "good commands before a bad one are answered", req: resp("PING") + resp("ECHO", "hi") + "*1\r\n$x\r\n",
		want: "+PONG\r\n$2\r\nhi\r\n" + errBulk, closes: true, redis: true},

	// Unknown commands: the name and arguments are quoted, cut at 128 bytes,
	// newlines made spaces, as Redis does.
	{name: "unknown command", req: resp("LOCKALL", "k"), want: "-ERR unknown command 'LOCKALL', with args beginning with: 'k' \r\n", redis: true},
	{name: "not forwarded", req: resp("SWAPDB", "0", "1"), want: "-ERR unknown command 'SWAPDB', with args beginning with: '0' '1' \r\n"},
	{name: "unknown binary command", req: resp("\xfe\xff", "a\r\nb"), want: "-ERR unknown command '\xfe\xff', with args beginning with: 'a  b' \r\n", redis: true},
	// Redis's %s stops at the NUL; the proxy quotes the bytes as they are.
	{name: "unknown command with NUL", req: resp("\x00x"), want: "-ERR unknown command '\x00x', with args beginning with: \r\n"},
	{name: "unknown long command", req: resp(strings.Repeat("c", 300), strings.Repeat("a", 100), strings.Repeat("b", 100), "c"),
		want: "-ERR unknown command '" + strings.Repeat("c", 128) + "', with args beginning with: '" + strings.Repeat("a", 100) + "' '" + strings.Repeat("b", 25) + "' \r\n", redis: true},
	{name: "unknown subcommand", req: resp("CLIENT", "NOSUCH", "x"), want: "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n", redis: true},
	{name: "CLIENT KILL", req: resp("CLIENT", "KILL", "x"), want: "-ERR unknown subcommand 'KILL'. Try CLIENT HELP.\r\n"},
	{name: "unknown script subcommand", req: resp("script", "nosuch", "yes"), want: "-ERR unknown subcommand 'nosuch'. Try SCRIPT HELP.\r\n", redis: true},
	{name: "unknown command subcommand", req: resp("COMMAND", "GETKEYSANDFLAGS", "x"), want: "-ERR unknown subcommand 'GETKEYSANDFLAGS'. Try COMMAND HELP.\r\n"},

	// TTLs.
	{name: "PX not a number", req: resp("SET", "k", "v", "NX", "PX", "abc"), want: errNotInt, redis: true},
	{name: "PX fraction", req: resp("SET", "k", "v", "NX", "PX", "1.5"), want: errNotInt, redis: true},
	{name: "PX plus sign", req: resp("SET", "k", "v", "NX", "PX", "+100"), want: errNotInt, redis: true},
	{name: "PX leading zero", req: resp("SET", "k", "v", "NX", "PX", "0100"), want: errNotInt, redis: true},
	{name: "PX with space", req: resp("SET", "k", "v", "NX", "PX", " 100"), want: errNotInt, redis: true},
	{name: "PX empty", req: resp("SET", "k", "v", "NX", "PX", ""), want: errNotInt, redis: true},
	{name: "PX overflowing int64", req: resp("SET", "k", "v", "NX", "PX", "9223372036854775808"), want: errNotInt, redis: true},
	{name: "PX zero", req: resp("SET", "k", "v", "NX", "PX", "0"), want: errSetExpire, redis: true},
	{name: "PX negative", req: resp("SET", "k", "v", "NX", "PX", "-1"), want: errSetExpire, redis: true},
	{name: "PX most negative", req: resp("SET", "k", "v", "NX", "PX", "-9223372036854775808"), want: errSetExpire, redis: true},
	{name: "EX zero", req: resp("SET", "k", "v", "NX", "EX", "0"), want: errSetExpire, redis: true},
	{name: "EX overflowing milliseconds", req: resp("SET", "k", "v", "NX", "EX", "9223372036854776"), want: errSetExpire, redis: true},
	{name: "EX 2^63-1", req: resp("SET", "k", "v", "NX", "EX", "9223372036854775807"), want: errSetExpire, redis: true},
	// Redis takes these; the proxy bounds them by max_ttl and names both numbers.
	{name: "PX 2^63-1", req: resp("SET", "k", "v", "NX", "PX", "9223372036854775807"), want: "-ERR invalid expire time: ", prefix: true},
	{name: "PX above max_ttl", req: resp("SET", "k", "v", "NX", "PX", "86400001"), want: "-ERR invalid expire time: 86400001 ms exceeds max_ttl 86400000 ms\r\n"},
	{name: "EX above max_ttl", req: resp("SET", "k", "v", "EX", "86401", "NX"), want: "-ERR invalid expire time: 86401000 ms exceeds max_ttl 86400000 ms\r\n"},
	{name: "PEXPIRE not a number", req: resp("PEXPIRE", "k", "soon"), want: errNotInt, redis: true},
	{name: "EXPIRE overflowing milliseconds", req: resp("EXPIRE", "k", "9223372036854775807"), want: "-ERR invalid expire time in 'expire' command\r\n", redis: true},
	{name: "PEXPIRE zero deletes, as Redis", req: resp("PEXPIRE", "k", "0"), want: ":0\r\n", redis: true},
	{name: "PEXPIRE unknown option", req: resp("PEXPIRE", "k", "100", "SOON"), want: "-ERR Unsupported option SOON\r\n", redis: true},
	{name: "PEXPIRE NX", req: resp("PEXPIRE", "k", "100", "NX"), want: "-ERR lockproxy does not support PEXPIRE options", prefix: true},

	// SET syntax and shapes.
	{name: "SET NX and XX", req: resp("SET", "k", "v", "NX", "XX", "PX", "100"), want: errSyntaxR, redis: true},
	{name: "SET PX and EX", req: resp("SET", "k", "v", "NX", "PX", "100", "EX", "1"), want: errSyntaxR, redis: true},
	{name: "SET PX without value", req: resp("SET", "k", "v", "NX", "PX"), want: errSyntaxR, redis: true},
	{name: "SET unknown option", req: resp("SET", "k", "v", "NX", "PX", "100", "SOON"), want: errSyntaxR, redis: true},
	{name: "SET without NX", req: resp("SET", "k", "v", "PX", "100"), want: errLockShape, prefix: true},
	{name: "SET XX", req: resp("SET", "k", "v", "XX", "PX", "100"), want: errLockShape, prefix: true},
	{name: "SET NX KEEPTTL", req: resp("SET", "k", "v", "NX", "KEEPTTL"), want: errLockShape, prefix: true},
	{name: "SET NX GET", req: resp("SET", "k", "v", "NX", "PX", "100", "GET"), want: errLockShape, prefix: true},
	{name: "SET NX PXAT past", req: resp("SET", "k", "v", "NX", "PXAT", "100"), want: "-ERR invalid expire time in 'set' command\r\n"},
	{name: "SET IFEQ another token", req: resp("SET", "k", "v", "IFEQ", "w", "PX", "100"), want: errLockShape, prefix: true},
	{name: "DELEX IFNE", req: resp("DELEX", "k", "IFNE", "v"), want: "-ERR lockproxy only takes DELEX key IFEQ token (got IFNE)\r\n"},
	{name: "DELEX unknown condition", req: resp("DELEX", "k", "SOON", "v"), want: errSyntaxR},

	// Scripts.
	{name: "EVAL numkeys not a number", req: resp("EVAL", "return 1", "one"), want: errNotInt, redis: true},
	{name: "EVAL numkeys negative", req: resp("EVAL", "return 1", "-1"), want: "-ERR Number of keys can't be negative\r\n", redis: true},
	{name: "EVAL numkeys beyond args", req: resp("EVAL", "return 1", "3", "a", "b"), want: "-ERR Number of keys can't be greater than number of args\r\n", redis: true},
	{name: "EVAL numkeys 2^63", req: resp("EVAL", "return 1", "9223372036854775808"), want: errNotInt, redis: true},
	{name: "EVAL unknown script", req: resp("EVAL", "return redis.call('flushall')", "0"),
		want: "-ERR lockproxy does not run this script (sha1 " + sha("return redis.call('flushall')") + ")", prefix: true},
	{name: "EVAL binary script", req: resp("EVAL", "\x00\xff\x1b[", "0"), want: "-ERR lockproxy does not run this script", prefix: true},
	{name: "EVAL release with too few args", req: resp("EVAL", compareAndDelete, "1", "k"), want: "-ERR lockproxy runs this script as ", prefix: true},
	{name: "EVALSHA unknown", req: resp("EVALSHA", strings.Repeat("0", 40), "0"), want: "-NOSCRIPT No matching script. Please use EVAL.\r\n", redis: true},
	{name: "EVALSHA not a sha", req: resp("EVALSHA", "\x00", "0"), want: "-NOSCRIPT No matching script. Please use EVAL.\r\n", redis: true},
	{name: "EVALSHA numkeys not a number", req: resp("EVALSHA", strings.Repeat("0", 40), "x"), want: errNotInt, redis: true},
	{name: "SCRIPT LOAD unknown script", req: resp("SCRIPT", "LOAD", "return 1"), want: "-ERR lockproxy does not run this script", prefix: true},
	{name: "SCRIPT FLUSH bad mode", req: resp("SCRIPT", "FLUSH", "LATER"), want: "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n", redis: true},

	// Transactions: Redis's replies, byte for byte, then the proxy's own
	// refusal of a transaction that is not a lock operation.
	{name: "EXEC without MULTI", req: resp("EXEC"), want: "-ERR EXEC without MULTI\r\n", redis: true},
	{name: "DISCARD without MULTI", req: resp("DISCARD"), want: "-ERR DISCARD without MULTI\r\n", redis: true},
	{name: "MULTI nested", req: resp("MULTI") + resp("MULTI") + resp("EXEC"),
		want: "+OK\r\n-ERR MULTI calls can not be nested\r\n*0\r\n", redis: true},
	{name: "WATCH inside MULTI", req: resp("MULTI") + resp("WATCH", "k") + resp("DISCARD"),
		want: "+OK\r\n-ERR WATCH inside MULTI is not allowed\r\n+OK\r\n", redis: true},
	{name: "queued commands", req: resp("MULTI") + resp("PING") + resp("GET", "k") + resp("DISCARD"),
		want: "+OK\r\n+QUEUED\r\n+QUEUED\r\n+OK\r\n", redis: true},
	{name: "unknown command while queueing", req: resp("MULTI") + resp("NOSUCH", "k") + resp("PING") + resp("EXEC"),
		want: "+OK\r\n-ERR unknown command 'NOSUCH', with args beginning with: 'k' \r\n+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n", redis: true},
	{name: "arity error while queueing", req: resp("MULTI") + resp("GET") + resp("EXEC"),
		want: "+OK\r\n-ERR wrong number of arguments for 'get' command\r\n-EXECABORT Transaction discarded because of previous errors.\r\n", redis: true},
	{name: "EXEC after EXECABORT", req: resp("MULTI") + resp("GET") + resp("EXEC") + resp("EXEC"),
		want: "+OK\r\n-ERR wrong number of arguments for 'get' command\r\n-EXECABORT Transaction discarded because of previous errors.\r\n-ERR EXEC without MULTI\r\n", redis: true},
	{name: "empty transaction", req: resp("WATCH", "k") + resp("MULTI") + resp("EXEC"), want: "+OK\r\n+OK\r\n*0\r\n", redis: true},
	{name: "WATCH and UNWATCH", req: resp("WATCH", "k", "j") + resp("UNWATCH"), want: "+OK\r\n+OK\r\n", redis: true},
	{name: "WATCH without a key", req: resp("WATCH"), want: "-ERR wrong number of arguments for 'watch' command\r\n", redis: true},
	{name: "one lock command, no WATCH", req: resp("MULTI") + resp("EXISTS", "k") + resp("EXEC"), want: "+OK\r\n+QUEUED\r\n*1\r\n:0\r\n", redis: true},
	{name: "transaction of two commands", req: resp("WATCH", "k") + resp("GET", "k") + resp("MULTI") + resp("DEL", "k") + resp("DEL", "j") + resp("EXEC"),
		want: "+OK\r\n$-1\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n" + errTxShape + "2 commands queued)\r\n"},
	{name: "transaction beyond 64 KiB queued", req: resp("MULTI") + resp("ECHO", strings.Repeat("x", 40<<10)) + resp("ECHO", strings.Repeat("x", 40<<10)) + resp("EXEC"),
		want: "+OK\r\n+QUEUED\r\n-ERR lockproxy queues at most 16 commands of 64 KiB in all in a transaction\r\n-EXECABORT Transaction discarded because of previous errors.\r\n"},
	{name: "transaction without GET", req: resp("WATCH", "k") + resp("MULTI") + resp("DEL", "k") + resp("EXEC"),
		want: "+OK\r\n+OK\r\n+QUEUED\r\n" + errTxShape + "no GET of the watched key after WATCH)\r\n"},
	{name: "transaction on an absent lock", req: resp("WATCH", "k") + resp("GET", "k") + resp("MULTI") + resp("DEL", "k") + resp("EXEC"),
		want: "+OK\r\n$-1\r\n+OK\r\n+QUEUED\r\n" + errTxShape + "the GET under WATCH found no lock)\r\n"},

	// Connection commands.
	{name: "SELECT not a number", req: resp("SELECT", "one"), want: errNotInt, redis: true},
	{name: "SELECT beyond int32", req: resp("SELECT", "4294967296"), want: "-ERR value is ", prefix: true},
	{name: "SELECT out of range", req: resp("SELECT", "99999"), want: "-ERR DB index is out of range\r\n", redis: true},
	{name: "SELECT negative", req: resp("SELECT", "-1"), want: "-ERR DB index is out of range\r\n", redis: true},
	{name: "HELLO not a number", req: resp("HELLO", "three"), want: "-ERR Protocol version is not an integer or out of range\r\n", redis: true},
	{name: "HELLO 4", req: resp("HELLO", "4"), want: "-NOPROTO unsupported protocol version\r\n", redis: true},
	{name: "HELLO 1", req: resp("HELLO", "1"), want: "-NOPROTO unsupported protocol version\r\n", redis: true},
	{name: "HELLO bad option", req: resp("HELLO", "3", "SOON"), want: "-ERR Syntax error in HELLO option 'SOON'\r\n", redis: true},
	{name: "HELLO AUTH without password", req: resp("HELLO", "3", "AUTH", "default"), want: "-ERR Syntax error in HELLO option 'AUTH'\r\n", redis: true},
	{name: "HELLO SETNAME with space", req: resp("HELLO", "2", "SETNAME", "a b"), want: "-ERR Client names cannot contain spaces, newlines or special characters.\r\n", redis: true},
	{name: "AUTH without a password configured", req: resp("AUTH", "secret"),
		want: "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n", redis: true},
	{name: "AUTH too many arguments", req: resp("AUTH", "a", "b", "c"), want: errSyntaxR, redis: true},
	{name: "CLIENT SETNAME with newline", req: resp("CLIENT", "SETNAME", "a\nb"), want: "-ERR Client names cannot contain spaces, newlines or special characters.\r\n", redis: true},
	{name: "PING with two arguments", req: resp("PING", "a", "b"), want: "-ERR wrong number of arguments for 'ping' command\r\n", redis: true},
	{name: "AUTH with too many arguments", req: resp("AUTH", "a", "b", "c", "d"), want: errSyntaxR, redis: true},
}

// TestBadInput sends every bad request of the table to the proxy (and,
// where it claims Redis's wording, to a plain redis-server), then checks
// that the proxy still serves a lock cycle.
func TestBadInput(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	plain := redistest.Start(t)
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			got, quit := exchange(t, c.proxy.Addr, tc.req)
			checkReply(t, tc.req, got, tc.want, tc.prefix)
			if quit == tc.closes {
				t.Errorf("%q: connection closed by the proxy = %v, want %v", clip(tc.req), !quit, tc.closes)
			}
			if tc.redis {
				if want, _ := exchange(t, plain.Addr(), tc.req); got != want {
					t.Errorf("%q: the proxy replied\n%q\nredis-server replied\n%q", clip(tc.req), got, want)
				}
			}
		})
	}
	// Nothing was locked along the way.
	for i, s := range c.servers {
		if n := clientKeys(t, s); n != 0 {
			t.Errorf("backend %d holds %d keys after the bad requests", i, n)
		}
	}
	checkServes(t, c)
}

func checkReply(t *testing.T, req, got, want string, prefix bool) {
	t.Helper()
	if prefix && !strings.HasPrefix(got, want) || !prefix && got != want {
		t.Errorf("%q: got\n%q\nwant %s\n%q", clip(req), clip(got), map[bool]string{true: "a reply starting with", false: ""}[prefix], clip(want))
	}
}

// checkServes runs a lock cycle on a fresh connection (SET NX PX, then the
// compare-and-delete script) and checks the process is alive.
func checkServes(t *testing.T, c *cluster) {
	t.Helper()
	select {
	case <-c.proxy.done:
		t.Fatalf("the proxy exited:\n%s", c.proxy.Log())
	default:
	}
	cli := c.proxy.Client(t)
	key, tok := "after-bad-input", fmt.Sprintf("t%d", time.Now().UnixNano())
	if got := do(t, cli, "SET", key, tok, "NX", "PX", 10000); got != "OK" {
		t.Fatalf("SET NX PX after the bad input: %s", got)
	}
	// A quorum holds it at once; the last backend's write may come later.
	if held := c.held(t, key); strings.Count(strings.Join(held, ","), tok) < len(c.servers)/2+1 {
		t.Errorf("after SET NX PX the backends hold %q, want %q on a quorum", held, tok)
	}
	redistest.Eventually(t, func() string {
		if held := c.held(t, key); strings.Count(strings.Join(held, ","), tok) != len(c.servers) {
			return fmt.Sprintf("after SET NX PX the backends hold %q, want %q on each", held, tok)
		}
		return ""
	})
	if got := do(t, cli, "EVAL", compareAndDelete, 1, key, tok); got != "1" {
		t.Fatalf("compare-and-delete after the bad input: %s", got)
	}
	redistest.Eventually(t, func() string {
		if held := c.held(t, key); strings.Join(held, "") != "" {
			return fmt.Sprintf("after the release the backends hold %q", held)
		}
		return ""
	})
}

// tableEntry is one row of proxy/commands.go's dispatch table.
type tableEntry struct {
	name  string // "set", or "client|setname" for a subcommand
	arity int
	auth  bool // served before AUTH
}

var tableRow = regexp.MustCompile(`&command\{name: "([a-z_|]+)",[^\n]*?arity: (-?\d+)(, noAuth: true)?`)

// dispatchTable reads the commands the proxy serves from its source, so
// that a command added there is covered here without editing this file.
func dispatchTable(t *testing.T) []tableEntry {
	t.Helper()
	src, err := os.ReadFile("../proxy/commands.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []tableEntry
	for _, m := range tableRow.FindAllStringSubmatch(string(src), -1) {
		n, _ := strconv.Atoi(m[2])
		out = append(out, tableEntry{name: m[1], arity: n, auth: m[3] != ""})
	}
	if len(out) < 30 {
		t.Fatalf("read only %d commands from proxy/commands.go: did its layout change?", len(out))
	}
	return out
}

// request returns the command's words with filler arguments up to n in all.
func (e tableEntry) request(n int) []string {
	words := strings.Split(strings.ToUpper(e.name), "|")
	for len(words) < n {
		words = append(words, "x")
	}
	return words[:n]
}

// TestBadInputArity sends every command of the dispatch table with one
// argument too few and, where the arity is fixed, one too many: the reply
// is Redis's own arity error, byte for byte what redis-server says for the
// commands it knows.
func TestBadInputArity(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	plain := redistest.Start(t)
	tested := 0
	for _, e := range dispatchTable(t) {
		words := len(strings.Split(e.name, "|"))
		var sizes []int
		if need := max(e.arity, -e.arity); need-1 >= words {
			sizes = append(sizes, need-1)
		}
		if e.arity > 0 {
			sizes = append(sizes, e.arity+1)
		}
		for _, n := range sizes {
			req := resp(e.request(n)...)
			t.Run(fmt.Sprintf("%s/%d", e.name, n), func(t *testing.T) {
				tested++
				want := fmt.Sprintf("-ERR wrong number of arguments for '%s' command\r\n", e.name)
				if e.name == "exec" { // a refused EXEC discards the transaction, and says so
					want = "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
				}
				got, _ := exchange(t, c.proxy.Addr, req)
				checkReply(t, req, got, want, false)
				theirs, _ := exchange(t, plain.Addr(), req)
				if strings.HasPrefix(theirs, "-ERR unknown ") {
					return // newer than this redis-server
				}
				if got != theirs {
					t.Errorf("%q: the proxy replied %q, redis-server %q", req, got, theirs)
				}
			})
		}
	}
	if tested < 30 {
		t.Errorf("only %d arity cases", tested)
	}
	checkServes(t, c)
}

// TestBadInputUnauthenticated: with a password, every command but those
// Redis serves before AUTH gets NOAUTH, as from a redis-server with
// requirepass, and nothing reaches the backends.
func TestBadInputUnauthenticated(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3, "-password", "secret")
	plain := redistest.Start(t)
	// Set after the start: redistest's readiness probe does not AUTH.
	if err := plain.Client(t).ConfigSet(t.Context(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	const noAuth = "-NOAUTH Authentication required.\r\n"
	for _, e := range dispatchTable(t) {
		if e.auth || e.name == "ping" || e.name == "command" || e.name == "client" || e.name == "script" || e.name == "config" || e.name == "cluster" {
			continue // served before AUTH, or a container of subcommands
		}
		req := resp(e.request(max(e.arity, -e.arity))...)
		t.Run(e.name, func(t *testing.T) {
			want := noAuth
			if e.name == "exec" {
				want = "-EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n"
			}
			got, quit := exchange(t, c.proxy.Addr, req)
			checkReply(t, req, got, want, false)
			if !quit {
				t.Errorf("%q: the proxy closed the connection", req)
			}
			if theirs, _ := exchange(t, plain.Addr(), req); !strings.HasPrefix(theirs, "-ERR unknown ") && got != theirs {
				t.Errorf("%q: the proxy replied %q, redis-server %q", req, got, theirs)
			}
		})
	}
	for _, tc := range []badRequest{
		{name: "wrong password", req: resp("AUTH", "guess"), want: "-WRONGPASS invalid username-password pair or user is disabled.\r\n", redis: true},
		{name: "wrong user", req: resp("AUTH", "root", "secret"), want: "-WRONGPASS invalid username-password pair or user is disabled.\r\n", redis: true},
		{name: "HELLO without AUTH", req: resp("HELLO", "3"), want: "-NOAUTH HELLO must be called with the client already authenticated", prefix: true, redis: true},
		{name: "HELLO with a wrong password", req: resp("HELLO", "3", "AUTH", "default", "guess"), want: "-WRONGPASS ", prefix: true, redis: true},
		{name: "lock after a failed AUTH", req: resp("AUTH", "guess") + resp("SET", "k", "v", "NX", "PX", "1000"),
			want: "-WRONGPASS invalid username-password pair or user is disabled.\r\n" + noAuth, redis: true},
		{name: "pipelined lock before AUTH", req: resp("SET", "k", "v", "NX", "PX", "1000") + resp("AUTH", "secret") + resp("DEL", "k"),
			want: noAuth + "+OK\r\n:0\r\n", redis: true},
		// What a client may send before AUTH is bounded as Redis bounds it:
		// at most 10 arguments of at most 16 KiB each, or a protocol error.
		{name: "11 arguments before AUTH", req: "*11\r\n", want: "-ERR Protocol error: unauthenticated multibulk length\r\n", redis: true},
		{name: "10 arguments before AUTH", req: resp("AUTH", "1", "2", "3", "4", "5", "6", "7", "8", "9"), want: errSyntaxR, redis: true},
		{name: "a 16 KiB argument before AUTH", req: resp("AUTH", strings.Repeat("p", 16384)),
			want: "-WRONGPASS invalid username-password pair or user is disabled.\r\n", redis: true},
		{name: "a longer argument before AUTH", req: resp("AUTH", strings.Repeat("p", 16385)),
			want: "-ERR Protocol error: unauthenticated bulk length\r\n", redis: true},
		{name: "a 1 MB PING before AUTH", req: resp("PING", strings.Repeat("p", 1_000_000)),
			want: "-ERR Protocol error: unauthenticated bulk length\r\n", redis: true},
		{name: "a large argument after a failed AUTH", req: resp("AUTH", "guess") + resp("ECHO", strings.Repeat("e", 100000)),
			want: "-WRONGPASS invalid username-password pair or user is disabled.\r\n-ERR Protocol error: unauthenticated bulk length\r\n", redis: true},
		// AUTH lifts the bounds for the very next command of the same write.
		{name: "a large argument right after AUTH", req: resp("AUTH", "secret") + resp("ECHO", strings.Repeat("e", 100000)),
			want: "+OK\r\n$100000\r\n" + strings.Repeat("e", 100000) + "\r\n", redis: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := exchange(t, c.proxy.Addr, tc.req)
			checkReply(t, tc.req, got, tc.want, tc.prefix)
			if theirs, _ := exchange(t, plain.Addr(), tc.req); got != theirs {
				t.Errorf("%q: the proxy replied %q, redis-server %q", clip(tc.req), clip(got), clip(theirs))
			}
		})
	}
	for i, s := range c.servers {
		if n := clientKeys(t, s); n != 0 {
			t.Errorf("backend %d holds %d keys after unauthenticated commands", i, n)
		}
	}
	// Authenticated, the lock cycle works.
	got, _ := exchange(t, c.proxy.Addr, resp("AUTH", "secret")+resp("SET", "k", "v", "NX", "PX", "10000")+
		resp("EVAL", compareAndDelete, "1", "k", "v"))
	if got != "+OK\r\n+OK\r\n:1\r\n" {
		t.Errorf("AUTH then a lock cycle: %q", got)
	}
}

// TestBadInputBinaryKeys: keys and tokens are binary-safe end to end (NUL,
// 0xff, CRLF, spaces, the empty key), through SET NX PX, GET, PTTL and the
// compare-and-delete script.
func TestBadInputBinaryKeys(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	for _, tc := range []struct{ name, key, token string }{
		{"nul and 0xff", "lock:\x00\xff", "tok\x00\xfe"},
		{"crlf and spaces", "a\r\nb c", "*1\r\n$4\r\nPING\r\n"},
		{"empty key", "", "t"},
		{"empty token", "lock:empty-token", ""},
		{"invalid utf-8", "\xc3\x28\xa0\xa1", "\xf0\x28\x8c\xbc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := exchange(t, c.proxy.Addr, resp("SET", tc.key, tc.token, "NX", "PX", "10000")+resp("GET", tc.key)+
				resp("SET", tc.key, "other", "NX", "PX", "10000"))
			if want := fmt.Sprintf("+OK\r\n$%d\r\n%s\r\n$-1\r\n", len(tc.token), tc.token); got != want {
				t.Fatalf("SET, GET, SET again: got %q, want %q", got, want)
			}
			redistest.Eventually(t, func() string {
				for i, v := range c.held(t, tc.key) {
					if v != tc.token {
						return fmt.Sprintf("backend %d holds %q, want %q", i, v, tc.token)
					}
				}
				return ""
			})
			got, _ = exchange(t, c.proxy.Addr, resp("EVAL", compareAndDelete, "1", tc.key, "other")+
				resp("EVAL", compareAndDelete, "1", tc.key, tc.token)+resp("EXISTS", tc.key))
			if want := ":0\r\n:1\r\n:0\r\n"; got != want {
				t.Fatalf("release by another token, by the holder, EXISTS: got %q, want %q", got, want)
			}
			redistest.Eventually(t, func() string {
				if held := c.held(t, tc.key); strings.Join(held, "") != "" {
					return fmt.Sprintf("after the release the backends hold %q", held)
				}
				return ""
			})
		})
	}
	checkServes(t, c)
}

// procStatus reads a field of /proc/PID/status in KiB.
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestBadInputMemoryBounded: clients that stream far more than
// max_request_bytes (an endless inline line, a payload past its length,
// arguments without end) are cut off with a protocol error after at most
// max_request_bytes each, so the proxy's peak memory grows by a bounded
// amount, not by what they sent.
func TestBadInputMemoryBounded(t *testing.T) {
	proxyTest(t)
	const limit = 256 << 10 // max_request_bytes
	const perClient = 64 << 20
	c := newCluster(t, 3, "-max-request-bytes", strconv.Itoa(limit))
	pid := c.proxy.cmd.Process.Pid
	checkServes(t, c)
	before := procStatus(t, pid, "VmHWM")

	manyArgs := "*100000\r\n" + strings.Repeat("$100\r\n"+strings.Repeat("a", 100)+"\r\n", 10)
	floods := []struct{ name, head, body, want string }{
		{"endless inline line", "", strings.Repeat("a", 1<<16), "-ERR Protocol error: too big inline request\r\n"},
		{"payload past its length", fmt.Sprintf("*1\r\n$%d\r\n", limit-20), strings.Repeat("x", 1<<16), errBulk},
		{"arguments without end", "", manyArgs, fmt.Sprintf("-ERR Protocol error: request exceeds max_request_bytes (%d)\r\n", limit)},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	for i := range 12 {
		f := floods[i%len(floods)]
		wg.Go(func() {
			conn, err := net.Dial("tcp", c.proxy.Addr)
			if err != nil {
				mu.Lock()
				problems = append(problems, err.Error())
				mu.Unlock()
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(60 * time.Second))
			go func() {
				io.WriteString(conn, f.head)
				for sent := 0; sent < perClient; sent += len(f.body) {
					if _, err := io.WriteString(conn, f.body); err != nil {
						return // cut off, as it should be
					}
				}
			}()
			got, err := io.ReadAll(conn)
			if string(got) != f.want || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: got %q (%v), want %q", f.name, got, err, f.want))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	after := procStatus(t, pid, "VmHWM")
	// 12 clients tried to send 768 MiB; at most 12 × 256 KiB may be held,
	// and the race detector's shadow memory multiplies that.
	t.Logf("peak RSS %d KiB before the floods, %d KiB after", before, after)
	if grown := after - before; grown > 128<<10 {
		t.Errorf("peak RSS grew by %d KiB while clients flooded it", grown)
	}
	checkServes(t, c)
}

// TestBadInputSlowloris: clients that send a command a byte at a time and
// never finish it hold only their connection; other clients are served
// meanwhile with their usual latency, and memory stays bounded.
func TestBadInputSlowloris(t *testing.T) {
	proxyTest(t)
	c := newCluster(t, 3)
	pid := c.proxy.cmd.Process.Pid
	checkServes(t, c)
	before := procStatus(t, pid, "VmRSS")

	const loris = 50
	partial := resp("SET", "slow", "me", "NX", "PX", "10000")
	partial = partial[:len(partial)-3] // never finished
	conns := make([]net.Conn, loris)
	for i := range conns {
		conn, err := net.Dial("tcp", c.proxy.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	// Each sends all but the end of a SET, a byte every 20 ms.
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			for i := 0; i < len(partial); i++ {
				time.Sleep(20 * time.Millisecond)
				if _, err := conn.Write([]byte{partial[i]}); err != nil {
					t.Errorf("a slow client was cut off: %v", err)
					return
				}
			}
		})
	}
	slowDone := make(chan struct{})
	go func() { wg.Wait(); close(slowDone) }()
	// Served meanwhile: lock cycles, each quick.
	cli := c.proxy.Client(t)
	cycles := 0
	for busy := true; busy || cycles < 10; cycles++ {
		select {
		case <-slowDone:
			busy = false
		default:
		}
		key := fmt.Sprintf("busy:%d", cycles)
		start := time.Now()
		if got := do(t, cli, "SET", key, "me", "NX", "PX", 10000); got != "OK" {
			t.Fatalf("SET while slow clients are connected: %s", got)
		}
		if got := do(t, cli, "EVAL", compareAndDelete, 1, key, "me"); got != "1" {
			t.Fatalf("release while slow clients are connected: %s", got)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a lock cycle took %s while slow clients were connected", d)
		}
	}
	t.Logf("%d lock cycles while %d clients trickled their commands", cycles, loris)
	// The unfinished commands never ran.
	if held := c.held(t, "slow"); strings.Join(held, "") != "" {
		t.Errorf("an unfinished SET reached the backends: %q", held)
	}
	// Each slow connection is still open and waiting (no reply).
	for i, conn := range conns[:5] {
		conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var b [1]byte
		if n, err := conn.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("slow connection %d: read %d bytes, %v; want no reply yet", i, n, err)
		}
	}
	// Memory: more slow clients, each declaring a payload near
	// max_request_bytes and sending a little of it, cost their connection
	// and what they sent, not what they declared.
	runtimeRSS := procStatus(t, pid, "VmRSS")
	const more = 200
	head := "*3\r\n$3\r\nGET\r\n$1000000\r\n" + strings.Repeat("x", 1000)
	for range more {
		conn, err := net.Dial("tcp", c.proxy.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
	}
	// Every one of them has been read once it answers a probe behind them.
	checkServes(t, c)
	after := procStatus(t, pid, "VmRSS")
	t.Logf("RSS %d KiB before the slow clients, %d KiB after %d lock cycles beside them, %d KiB with %d more",
		before, runtimeRSS, cycles, after, more)
	if grown := after - runtimeRSS; grown > more*256 {
		t.Errorf("RSS grew by %d KiB for %d slow connections that declared 1 MB each", grown, more)
	}
	// Finishing a slow command makes it run as any other.
	if _, err := conns[0].Write([]byte(resp("SET", "slow", "me", "NX", "PX", "10000")[len(partial):])); err != nil {
		t.Fatal(err)
	}
	conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [5]byte
	if _, err := io.ReadFull(conns[0], buf[:]); err != nil || string(buf[:]) != "+OK\r\n" {
		t.Errorf("the finished slow command: %q, %v", buf, err)
	}
	checkServes(t, c)
}

// TestBadInputSlowlorisIdleTimeout: with -idle-timeout, clients that
// trickle a command and never finish it are closed by the proxy: at the
// latest the idle timeout after their last byte, not before the idle
// timeout has passed since they connected. (The proxy renews its read
// deadline once per batch of commands, so a command trickled over more than
// the timeout is cut off even while bytes arrive.) The unfinished commands
// never run, and the proxy serves others throughout.
// It runs alone (no proxyTest): it times each cut-off to within a few
// milliseconds of the idle timeout, which a loaded machine skews.
func TestBadInputSlowlorisIdleTimeout(t *testing.T) {
	const idle, pace = time.Second, 100 * time.Millisecond
	c := newCluster(t, 3, "-idle-timeout", idle.String())
	partial := resp("SET", "slow", "me", "NX", "PX", "10000")
	partial = partial[:len(partial)-3] // never finished
	type slow struct {
		conn           net.Conn
		opened, lastOK time.Time
		written        int
		closed         time.Time
	}
	loris := make([]*slow, 20)
	for i := range loris {
		conn, err := net.Dial("tcp", c.proxy.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		loris[i] = &slow{conn: conn, opened: time.Now()}
	}
	var wg sync.WaitGroup
	for _, l := range loris {
		wg.Go(func() {
			for i := range len(partial) {
				time.Sleep(pace) // well inside the idle timeout
				if _, err := l.conn.Write([]byte{partial[i]}); err != nil {
					return
				}
				l.lastOK, l.written = time.Now(), i+1
			}
		})
	}
	cli := c.proxy.Client(t)
	for i := 0; i < 20; i++ {
		if got := do(t, cli, "SET", fmt.Sprintf("busy:%d", i), "me", "NX", "PX", 10000); got != "OK" {
			t.Fatalf("SET beside the slow clients: %s", got)
		}
	}
	wg.Wait()
	redistest.Eventually(t, func() string {
		open := 0
		for _, l := range loris {
			if !l.closed.IsZero() {
				continue
			}
			l.conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			var b [64]byte
			n, err := l.conn.Read(b[:])
			switch {
			case n > 0:
				t.Fatalf("an unfinished command got a reply: %q", b[:n])
			case errors.Is(err, os.ErrDeadlineExceeded):
				open++
			default:
				l.closed = time.Now()
			}
		}
		if open > 0 {
			return fmt.Sprintf("%d of %d slow connections still open (idle timeout %s)", open, len(loris), idle)
		}
		return ""
	})
	for i, l := range loris {
		if d := l.closed.Sub(l.lastOK); d > idle+2*time.Second {
			t.Errorf("slow connection %d was closed %s after its last byte, idle timeout %s", i, d, idle)
		}
		// A byte every pace: fewer than idle/pace-1 accepted means it was
		// cut off before the idle timeout passed.
		if min := int(idle/pace) - 2; l.written < min {
			t.Errorf("slow connection %d was cut off after %d bytes, %s, before the idle timeout %s", i, l.written, l.lastOK.Sub(l.opened), idle)
		}
	}
	if held := c.held(t, "slow"); strings.Join(held, "") != "" {
		t.Errorf("an unfinished SET reached the backends: %q", held)
	}
	checkServes(t, c)
}
