package proxy

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// invalidationOf is the RESP3 push that tells of key's change.
func invalidationOf(key string) string { return string(invalidation(key)) }

// expectReply sends args on c and fails t unless the reply is want.
func expectReply(t *testing.T, r *realRig, c *respConn, want string, args ...string) {
	t.Helper()
	if got := r.must(t, c, args...); got != want {
		t.Errorf("%q: %q, want %q", args, got, want)
	}
}

// expectNext reads c's next reply or push, which must be want.
func expectNext(t *testing.T, c *respConn, want string) {
	t.Helper()
	got, err := readReply(c.rd)
	if err != nil || got != want {
		t.Errorf("next message: %q, %v; want %q", got, err, want)
	}
}

// TestTracking: through a proxy over real redis-servers, CLIENT TRACKING
// tells a RESP3 connection of the change of a key it read, once, by a push
// message; OPTIN tracks only the reads after CLIENT CACHING YES, OPTOUT
// all but those after CLIENT CACHING NO; a tenant's BCAST hears of its own
// keys only, named without its prefix.
func TestTracking(t *testing.T) {
	r := startRealRigWith(t, false, Config{Users: []User{
		{Name: "app1", PasswordSHA256: sha256Hex("one"), KeyPrefix: "app1:"},
		{Name: "app2", PasswordSHA256: sha256Hex("two"), KeyPrefix: "app2:"},
	}})
	conn := func(user, password string) *respConn {
		c := dialRESP(t, r.addr)
		if got := r.must(t, c, "HELLO", "3", "AUTH", user, password); !strings.HasPrefix(got, "%") {
			t.Fatalf("HELLO 3 AUTH %s: %q", user, got)
		}
		return c
	}
	do := func(c *respConn, want string, args ...string) { t.Helper(); expectReply(t, r, c, want, args...) }
	read := func(c *respConn, want string) { t.Helper(); expectNext(t, c, want) }
	tracker, writer := conn("app1", "one"), conn("app1", "one")

	// Default mode: every read is tracked, and told of once.
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON")
	do(tracker, "_\r\n", "GET", "job")
	do(writer, "+OK\r\n", "SET", "job", "mine", "NX", "PX", "30000")
	read(tracker, invalidationOf("job"))
	do(writer, ":1\r\n", "DEL", "job")
	do(tracker, "+PONG\r\n", "PING") // no second push: the key was not read again

	// OPTIN: tracked after CLIENT CACHING YES only, MULTI included.
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON", "OPTIN")
	do(tracker, "_\r\n", "GET", "a")
	do(writer, "+OK\r\n", "SET", "a", "x", "NX", "PX", "30000")
	do(tracker, "+PONG\r\n", "PING")
	do(tracker, "+OK\r\n", "CLIENT", "CACHING", "YES")
	do(tracker, "+OK\r\n", "MULTI")
	do(tracker, "+QUEUED\r\n", "PTTL", "a")
	do(tracker, "+QUEUED\r\n", "GET", "a")
	if got := r.must(t, tracker, "EXEC"); !strings.HasPrefix(got, "*2\r\n:") || !strings.HasSuffix(got, "$1\r\nx\r\n") {
		t.Errorf("EXEC of PTTL and GET: %q", got)
	}
	do(writer, ":1\r\n", "DEL", "a")
	read(tracker, invalidationOf("a"))
	do(tracker, "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n", "CLIENT", "CACHING", "NO")

	// OPTOUT: tracked but after CLIENT CACHING NO.
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON", "OPTOUT")
	do(tracker, "+OK\r\n", "CLIENT", "CACHING", "NO")
	do(tracker, "_\r\n", "GET", "b")
	do(writer, "+OK\r\n", "SET", "b", "x", "NX", "PX", "30000")
	do(tracker, "+PONG\r\n", "PING")

	// A lock script reads its key: the holder hears of its own release
	// (before the script's reply, where Redis sends it after).
	do(tracker, "+OK\r\n", "SET", "c", "mine", "NX", "PX", "30000")
	release := `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	do(tracker, invalidationOf("c"), "EVAL", release, "1", "c", "mine")
	read(tracker, ":1\r\n")

	// NOLOOP: the connection's own changes are not told to it, others' are.
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON", "NOLOOP")
	do(tracker, "+OK\r\n", "SET", "d", "mine", "NX", "PX", "30000")
	do(tracker, ":1\r\n", "EVAL", release, "1", "d", "mine")
	do(tracker, "+PONG\r\n", "PING")
	do(tracker, "_\r\n", "GET", "d")
	do(writer, "+OK\r\n", "SET", "d", "theirs", "NX", "PX", "30000")
	read(tracker, invalidationOf("d"))

	// BCAST: a tenant hears of its own keys under the prefix, named as it
	// names them, and never of another tenant's.
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "OFF")
	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "lock:")
	other := conn("app2", "two")
	do(other, "+OK\r\n", "SET", "lock:1", "theirs", "NX", "PX", "30000")
	do(writer, "+OK\r\n", "SET", "job:1", "mine", "NX", "PX", "30000")
	do(tracker, "+PONG\r\n", "PING")
	do(writer, "+OK\r\n", "SET", "lock:1", "mine", "NX", "PX", "30000")
	read(tracker, invalidationOf("lock:1"))
	if got := r.must(t, tracker, "CLIENT", "TRACKINGINFO"); !strings.Contains(got, "$5\r\nbcast\r\n") || !strings.Contains(got, "$5\r\nlock:\r\n") {
		t.Errorf("CLIENT TRACKINGINFO: %q", got)
	}
	do(tracker, ":0\r\n", "CLIENT", "GETREDIR")

	// What is not served says so.
	do(tracker, "-ERR PREFIX option requires BCAST mode to be enabled\r\n", "CLIENT", "TRACKING", "ON", "PREFIX", "x")
	resp2 := dialRESP(t, r.addr)
	do(resp2, "+OK\r\n", "AUTH", "app1", "one")
	do(resp2, "-ERR lockproxy serves CLIENT TRACKING in RESP2 with REDIRECT only (to a connection subscribed to __redis__:invalidate), or in RESP3 (HELLO 3), where invalidations are push messages\r\n",
		"CLIENT", "TRACKING", "ON")
	do(resp2, "-ERR The client ID you want redirect to does not exist\r\n", "CLIENT", "TRACKING", "ON", "REDIRECT", "987654")
}

// TestTrackingRedirect: in RESP2 a tracking connection's invalidations go
// to the connection it names, subscribed to __redis__:invalidate, as
// pub/sub messages (as pushes to a RESP3 one); once that connection has
// gone, a RESP3 tracker hears so.
func TestTrackingRedirect(t *testing.T) {
	r := startRealRigWith(t, false, Config{})
	do := func(c *respConn, want string, args ...string) { t.Helper(); expectReply(t, r, c, want, args...) }
	read := func(c *respConn, want string) { t.Helper(); expectNext(t, c, want) }
	idOf := func(c *respConn) string {
		got := r.must(t, c, "CLIENT", "ID")
		return strings.TrimSuffix(strings.TrimPrefix(got, ":"), "\r\n")
	}
	target, tracker, writer := dialRESP(t, r.addr), dialRESP(t, r.addr), dialRESP(t, r.addr)
	id := idOf(target)
	do(target, "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n", "SUBSCRIBE", "__redis__:invalidate")

	do(tracker, "+OK\r\n", "CLIENT", "TRACKING", "ON", "REDIRECT", id)
	do(tracker, ":"+id+"\r\n", "CLIENT", "GETREDIR")
	do(tracker, "$-1\r\n", "GET", "job")
	do(writer, "+OK\r\n", "SET", "job", "mine", "NX", "PX", "30000")
	read(target, "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$3\r\njob\r\n")
	// Unsubscribed, the target is told nothing; subscribed again, it is.
	// (Acquisitions: a release would be told twice, by the proxy at once
	// and by the backends' notice after, which may meet a read between.)
	do(tracker, "$-1\r\n", "GET", "quiet")
	do(target, "*3\r\n$11\r\nunsubscribe\r\n$20\r\n__redis__:invalidate\r\n:0\r\n", "UNSUBSCRIBE")
	do(writer, "+OK\r\n", "SET", "quiet", "x", "NX", "PX", "30000")
	do(target, "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n", "SUBSCRIBE", "__redis__:invalidate")
	do(tracker, "$-1\r\n", "GET", "later")
	do(writer, "+OK\r\n", "SET", "later", "x", "NX", "PX", "30000")
	read(target, "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$5\r\nlater\r\n")

	// A RESP3 tracker whose target has gone hears so at the next change.
	gone := dialRESP(t, r.addr)
	goneID := idOf(gone)
	resp3 := dialRESP(t, r.addr)
	if got := r.must(t, resp3, "HELLO", "3"); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3: %q", got)
	}
	do(resp3, "+OK\r\n", "CLIENT", "TRACKING", "ON", "REDIRECT", goneID)
	do(resp3, "$4\r\nmine\r\n", "GET", "job")
	gone.conn.Close()
	redistest.Eventually(t, func() string {
		if info := r.must(t, resp3, "CLIENT", "TRACKINGINFO"); !strings.Contains(info, "broken_redirect") {
			return "CLIENT TRACKINGINFO does not see the target gone: " + info
		}
		return ""
	})
	do(writer, ":1\r\n", "DEL", "job")
	read(resp3, ">2\r\n$21\r\ntracking-redir-broken\r\n:"+goneID+"\r\n")
}
