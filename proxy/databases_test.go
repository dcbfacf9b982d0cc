package proxy

import (
	"strings"
	"testing"
)

// TestDatabases: through a proxy over real redis-servers, SELECT n keeps
// database n's locks apart from database 0's, for plain, fenced and
// session locks, waits and listings; KEYS and DBSIZE list a database's
// held keys; FLUSHDB empties one database and FLUSHALL all, once allowed.
func TestDatabases(t *testing.T) {
	r := startRealRigWith(t, true, Config{AllowFlush: true})
	db0, db3 := r.proxy, dialRESP(t, r.addr)
	do := func(c *respConn, want string, args ...string) {
		t.Helper()
		if got := r.must(t, c, args...); got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
	do(db3, "+OK\r\n", "SELECT", "3")

	// The same name is two locks.
	do(db3, "+OK\r\n", "SET", "job", "three", "NX", "PX", "30000")
	do(db0, "$-1\r\n", "GET", "job")
	do(db0, "+OK\r\n", "SET", "job", "zero", "NX", "PX", "30000")
	do(db3, "$5\r\nthree\r\n", "GET", "job")
	do(db0, "$4\r\nzero\r\n", "GET", "job")
	// On the backends, database 3's key carries its marker, in backend
	// database 0.
	if got := r.must(t, r.backends[0], "GET", "\x00db3\x00job"); !strings.Contains(got, "three") {
		t.Errorf("backend's copy of database 3's lock: %q", got)
	}
	// Fencing tokens, and a session lock's TTL, in database 3.
	if got := r.must(t, db3, "FENCE", "job", "three"); !strings.HasPrefix(got, ":") {
		t.Errorf("FENCE in database 3: %q", got)
	}
	do(db3, "+OK\r\n", "SET", "session", "mine", "NX")
	do(db3, ":-1\r\n", "TTL", "session")
	do(db0, ":-2\r\n", "TTL", "session")

	// Listings.
	do(db0, "*1\r\n$3\r\njob\r\n", "KEYS", "*")
	do(db0, ":1\r\n", "DBSIZE")
	if got := r.must(t, db3, "KEYS", "*"); got != "*2\r\n$3\r\njob\r\n$7\r\nsession\r\n" && got != "*2\r\n$7\r\nsession\r\n$3\r\njob\r\n" {
		t.Errorf("KEYS * in database 3: %q", got)
	}
	do(db3, "*1\r\n$3\r\njob\r\n", "KEYS", "j*")
	do(db3, ":2\r\n", "DBSIZE")

	// A waiter in database 3 is woken by the release there.
	waiter := dialRESP(t, r.addr)
	do(waiter, "+OK\r\n", "SELECT", "3")
	woken := make(chan string, 1)
	go func() {
		got, _ := waiter.do("LOCK.ACQUIRE", "job", "next", "PX", "30000", "WAIT", "20000")
		woken <- got
	}()
	do(db3, ":1\r\n", "DELIFEQ", "job", "three")
	if got := <-woken; got != "+OK\r\n" {
		t.Errorf("the waiter in database 3: %q", got)
	}
	do(db0, "$4\r\nzero\r\n", "GET", "job")

	// FLUSHDB empties database 3 alone; FLUSHALL every database.
	do(db3, "+OK\r\n", "FLUSHDB")
	do(db3, "*0\r\n", "KEYS", "*")
	do(db0, "$4\r\nzero\r\n", "GET", "job")
	do(db3, "+OK\r\n", "SET", "again", "x", "NX", "PX", "30000")
	do(db0, "+OK\r\n", "FLUSHALL", "SYNC")
	do(db0, "*0\r\n", "KEYS", "*")
	do(db3, "*0\r\n", "KEYS", "*")
	for i, b := range r.backends {
		// lockproxy's own keys (the waiter's mark) are not the databases'.
		if got := r.must(t, b, "KEYS", "[^{]*job*"); got != "*0\r\n" {
			t.Errorf("backend %d after FLUSHALL: %q", i, got)
		}
	}
}

// TestFlushNeedsAllowFlush: without allow_flush, FLUSHDB and FLUSHALL are
// refused with a message naming the key, and delete nothing.
func TestFlushNeedsAllowFlush(t *testing.T) {
	r := startRealRig(t, false)
	if got := r.must(t, r.proxy, "SET", "kept", "me", "NX", "PX", "30000"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	for _, cmd := range []string{"FLUSHDB", "FLUSHALL"} {
		want := "-ERR " + cmd + " is off: set allow_flush = true to let it delete every lock of the caller's key space\r\n"
		if got := r.must(t, r.proxy, cmd); got != want {
			t.Errorf("%s: %q, want %q", cmd, got, want)
		}
	}
	if got := r.must(t, r.proxy, "FLUSHDB", "NOW"); got != "-ERR syntax error\r\n" {
		t.Errorf("FLUSHDB NOW: %q", got)
	}
	if got := r.must(t, r.proxy, "GET", "kept"); got != "$2\r\nme\r\n" {
		t.Errorf("GET after refused flushes: %q", got)
	}
}

// TestDatabasesOfTenants: a tenant's database n is under its prefix too,
// apart from its database 0 and from the other tenant's database n.
func TestDatabasesOfTenants(t *testing.T) {
	r := startRealRigWith(t, false, Config{Users: []User{
		{Name: "app1", PasswordSHA256: sha256Hex("one"), KeyPrefix: "app1:"},
		{Name: "app2", PasswordSHA256: sha256Hex("two"), KeyPrefix: "app2:"},
	}})
	tenant := func(name, password string) *respConn {
		c := dialRESP(t, r.addr)
		for _, args := range [][]string{{"AUTH", name, password}, {"SELECT", "5"}} {
			if got := r.must(t, c, args...); got != "+OK\r\n" {
				t.Fatalf("%q: %q", args, got)
			}
		}
		return c
	}
	one, two := tenant("app1", "one"), tenant("app2", "two")
	for _, c := range []*respConn{one, two} {
		if got := r.must(t, c, "SET", "job", "mine", "NX", "PX", "30000"); got != "+OK\r\n" {
			t.Errorf("SET in a tenant's database 5: %q", got)
		}
	}
	for _, key := range []string{"app1:\x00db5\x00job", "app2:\x00db5\x00job"} {
		if got := r.must(t, r.backends[0], "GET", key); got != "$4\r\nmine\r\n" {
			t.Errorf("backend's %q: %q", key, got)
		}
	}
	if got := r.must(t, one, "KEYS", "*"); got != "*1\r\n$3\r\njob\r\n" {
		t.Errorf("KEYS * of app1's database 5: %q", got)
	}
}
