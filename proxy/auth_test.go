package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

const (
	noAuthReply    = "-NOAUTH Authentication required.\r\n"
	wrongPassReply = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
)

func sha256Hex(pass string) string {
	sum := sha256.Sum256([]byte(pass))
	return hex.EncodeToString(sum[:])
}

func bcryptHash(t *testing.T, pass string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func TestAuthNamedUsers(t *testing.T) {
	ts := startServer(t, Config{Users: []User{
		{Name: "app1", PasswordSHA256: sha256Hex("one"), KeyPrefix: "app1:"},
		{Name: "app2", PasswordBcrypt: bcryptHash(t, "two"), KeyPrefix: "app2:"},
		{Name: "admin", PasswordSHA256: strings.ToUpper(sha256Hex("root"))},
	}})
	w := connect(t, ts.addr)
	runSteps(t, w, []step{
		{[]string{"SET", "k", "t", "NX", "PX", "1000"}, noAuthReply},
		{[]string{"PING"}, "+PONG\r\n"},
		// With users and no password, the default user is off.
		{[]string{"AUTH", "one"}, wrongPassReply},
		{[]string{"AUTH", "default", "one"}, wrongPassReply},
		{[]string{"AUTH", "app1", "two"}, wrongPassReply},
		{[]string{"AUTH", "app2", "one"}, wrongPassReply},
		{[]string{"AUTH", "nobody", "one"}, wrongPassReply},
		{[]string{"GET", "k"}, noAuthReply},
		{[]string{"AUTH", "app1", "one"}, "+OK\r\n"},
		{[]string{"SET", "k", "t", "NX", "PX", "1000"}, "+OK\r\n"},
		{[]string{"EVAL", releaseScript, "1", "k", "t"}, ":1\r\n"},
		{[]string{"DEL", "a", "b"}, ":0\r\n"},
	})
	if r := w.do("HELLO", "3", "AUTH", "app2", "two"); !strings.HasPrefix(r, "%7\r\n") {
		t.Fatalf("HELLO 3 AUTH app2: %q", r)
	}
	runSteps(t, w, []step{
		{[]string{"SETNX", "k", "t"}, ":1\r\n"},
		{[]string{"PEXPIRE", "k", "500"}, ":0\r\n"}, // the fake answers false
		{[]string{"AUTH", "admin", "root"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$0\r\n\r\n"},
	})
	exp := []string{
		"acquire app1:k t 1s", "release app1:k t", "delete app1:a", "delete app1:b",
		"acquire app2:k t 10s", "expire app2:k 500ms",
		"get k",
	}
	if got := ts.fake.seen(); !reflect.DeepEqual(exp, got) {
		t.Fatalf("Locker calls:\nwant %q\ngot  %q", exp, got)
	}
}

// TestAuthPrefixPipelined checks that commands started ahead of their turn
// (pipeline.go) see the user's prefix too.
func TestAuthPrefixPipelined(t *testing.T) {
	ts := startServer(t, Config{Users: []User{{Name: "u", PasswordSHA256: sha256Hex("p"), KeyPrefix: "t1/"}}})
	w := connect(t, ts.addr)
	runSteps(t, w, []step{{[]string{"AUTH", "u", "p"}, "+OK\r\n"}})
	w.sendRaw(encode("SET", "a", "x", "NX", "PX", "100") + encode("SET", "b", "x", "NX", "PX", "100") + encode("GET", "c"))
	for range 3 {
		w.read()
	}
	got := ts.fake.seen()
	for _, c := range got {
		if !strings.Contains(c, " t1/") {
			t.Fatalf("a pipelined command lost the prefix: %q", got)
		}
	}
}

func TestAuthDefaultUserHashed(t *testing.T) {
	ts := startServer(t, Config{Users: []User{{Name: "default", PasswordSHA256: sha256Hex("pw")}}})
	w := connect(t, ts.addr)
	runSteps(t, w, []step{
		{[]string{"GET", "k"}, noAuthReply},
		{[]string{"AUTH", "nope"}, wrongPassReply},
		{[]string{"AUTH", "pw"}, "+OK\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k"}, noAuthReply},
		{[]string{"AUTH", "default", "pw"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$0\r\n\r\n"},
	})
}

func TestAuthUserErrors(t *testing.T) {
	good := sha256Hex("x")
	for _, tc := range []struct {
		name   string
		cfg    Config
		errSub string
	}{
		{"no name", Config{Users: []User{{PasswordSHA256: good}}}, "no name"},
		{"no hash", Config{Users: []User{{Name: "a"}}}, "exactly one"},
		{"two hashes", Config{Users: []User{{Name: "a", PasswordSHA256: good, PasswordBcrypt: bcryptHash(t, "x")}}}, "exactly one"},
		{"short sha256", Config{Users: []User{{Name: "a", PasswordSHA256: good[:10]}}}, "64 hex digits"},
		{"not hex", Config{Users: []User{{Name: "a", PasswordSHA256: strings.Repeat("z", 64)}}}, "64 hex digits"},
		{"bad bcrypt", Config{Users: []User{{Name: "a", PasswordBcrypt: "$2a$10$short"}}}, "bcrypt"},
		{"twice", Config{Users: []User{{Name: "a", PasswordSHA256: good}, {Name: "a", PasswordSHA256: good}}}, "twice"},
		{"default and password", Config{Password: "p", Users: []User{{Name: "default", PasswordSHA256: good}}}, "keep one"},
		{"nested prefixes", Config{Users: []User{{Name: "inner", PasswordSHA256: good, KeyPrefix: "t:x:"}, {Name: "outer", PasswordSHA256: good, KeyPrefix: "t:"}}},
			`user "outer" (key prefix "t:") can reach every lock of user "inner" (key prefix "t:x:")`},
		{"a prefix that continues another", Config{Users: []User{{Name: "app1", PasswordSHA256: good, KeyPrefix: "app1"}, {Name: "app10", PasswordSHA256: good, KeyPrefix: "app10"}}},
			`user "app1" (key prefix "app1") can reach every lock of user "app10"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newWithFake(&fakeLocker{}, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("want an error containing %q, got %v", tc.errSub, err)
			}
			if tc.cfg.Users[0].PasswordSHA256 == good && strings.Contains(err.Error(), good) {
				t.Fatalf("the error shows the hash: %v", err)
			}
		})
	}
}

// TestAuthPrefixesThatDoNotNest: users that share a prefix, have none, or
// have prefixes neither of which starts the other are accepted.
func TestAuthPrefixesThatDoNotNest(t *testing.T) {
	good := sha256Hex("x")
	users := []User{
		{Name: "a", PasswordSHA256: good, KeyPrefix: "t:"},
		{Name: "a-rotated", PasswordSHA256: good, KeyPrefix: "t:"},
		{Name: "b", PasswordSHA256: good, KeyPrefix: "u:"},
		{Name: "c", PasswordSHA256: good, KeyPrefix: "tu:"},
		{Name: "admin", PasswordSHA256: good},
	}
	if err := CheckUsers("legacy", users); err != nil {
		t.Fatal(err)
	}
}

// TestAuthCostHidesUserNames: every AUTH does the same hash work, whether
// the user exists, what kind of hash it has and at what cost, and whether
// the password is right, so that the time it takes tells nothing. Counted
// through users.compare rather than timed: each bcrypt comparison costs
// 2^cost rounds, and every AUTH must add up to what the dearest configured
// hash costs.
func TestAuthCostHidesUserNames(t *testing.T) {
	hash := func(pass string, cost int) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pass), cost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	const dearest = bcrypt.MinCost + 3
	s, err := newWithFake(&fakeLocker{}, Config{Password: "pw", Users: []User{
		{Name: "sha", PasswordSHA256: sha256Hex("p-sha")},
		{Name: "cheap", PasswordBcrypt: hash("p-cheap", bcrypt.MinCost)},
		{Name: "middle", PasswordBcrypt: hash("p-middle", bcrypt.MinCost+1)},
		{Name: "dear", PasswordBcrypt: hash("p-dear", dearest)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	users := s.settings().users
	compare, rounds := users.compare, 0
	users.compare = func(hash, pass []byte) error {
		cost, err := bcrypt.Cost(hash)
		if err != nil {
			t.Errorf("compared a password with %q, not a bcrypt hash: %v", hash, err)
		}
		rounds += 1 << cost
		return compare(hash, pass)
	}
	for _, tc := range []struct {
		user, pass string
		ok         bool
	}{
		{"nobody", "x", false},
		{"nobody", "p-dear", false}, // another user's password
		{"sha", "x", false},
		{"sha", "p-sha", true},
		{"sha", "p-dear", false},
		{"default", "x", false},
		{"default", "pw", true},
		{"cheap", "x", false},
		{"cheap", "p-cheap", true},
		{"middle", "p-cheap", false},
		{"middle", "p-middle", true},
		{"dear", "x", false},
		{"dear", "p-dear", true},
	} {
		rounds = 0
		a, err := users.authenticate(tc.user, []byte(tc.pass), false)
		if ok := err == nil && a != nil && a.name == tc.user; ok != tc.ok {
			t.Errorf("AUTH %s %s: admitted %v (%v), want %v", tc.user, tc.pass, ok, err, tc.ok)
		}
		if exp, got := 1<<dearest, rounds; exp != got {
			t.Errorf("AUTH %s %s: %d bcrypt rounds, want %d as for every AUTH", tc.user, tc.pass, got, exp)
		}
	}
}

func TestKeyAndTokenLimits(t *testing.T) {
	ts := startServer(t, Config{MaxKeyBytes: 8, MaxTokenBytes: 4, Users: []User{
		{Name: "u", PasswordSHA256: sha256Hex("p"), KeyPrefix: "a-long-prefix:"}, // the prefix does not count
	}})
	w := connect(t, ts.addr)
	const keyErr, tokenErr = "-ERR key of 9 bytes exceeds max_key_bytes (8)\r\n", "-ERR token of 5 bytes exceeds max_token_bytes (4)\r\n"
	runSteps(t, w, []step{
		{[]string{"AUTH", "u", "p"}, "+OK\r\n"},
		{[]string{"SET", "123456789", "t", "NX", "PX", "100"}, keyErr},
		{[]string{"SET", "k", "12345", "NX", "PX", "100"}, tokenErr},
		{[]string{"SETNX", "k", "12345"}, tokenErr},
		{[]string{"GET", "123456789"}, keyErr},
		{[]string{"PTTL", "123456789"}, keyErr},
		{[]string{"EXPIRE", "123456789", "1"}, keyErr},
		{[]string{"DEL", "ok", "123456789"}, keyErr}, // refused whole: "ok" is not deleted
		{[]string{"EXISTS", "123456789"}, keyErr},
		{[]string{"DELIFEQ", "k", "12345"}, tokenErr},
		{[]string{"DELEX", "123456789", "IFEQ", "t"}, keyErr},
		{[]string{"EVAL", releaseScript, "1", "123456789", "t"}, keyErr},
		{[]string{"EVAL", releaseScript, "1", "k", "12345"}, tokenErr},
		{[]string{"SET", "12345678", "1234", "NX", "PX", "100"}, "+OK\r\n"}, // exactly at both limits
	})
	if exp, got := []string{"acquire a-long-prefix:12345678 1234 100ms"}, ts.fake.seen(); !reflect.DeepEqual(exp, got) {
		t.Fatalf("Locker calls: want %q, got %q", exp, got)
	}
}

func TestMaxClients(t *testing.T) {
	ts := startServer(t, Config{MaxClients: 2})
	a, b := connect(t, ts.addr), connect(t, ts.addr)
	for _, w := range []*wire{a, b} {
		if r := w.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("PING: %q", r)
		}
	}
	c := connect(t, ts.addr)
	if exp, got := "-ERR max number of clients reached\r\n", c.read(); exp != got {
		t.Fatalf("third client: want %q, got %q", exp, got)
	}
	if _, err := readReply(c.rd); !errors.Is(err, io.EOF) {
		t.Fatalf("the third connection stayed open: %v", err)
	}
	a.conn.Close()
	redistest.Eventually(t, func() string {
		d := connect(t, ts.addr)
		if r := d.do("PING"); r != "+PONG\r\n" {
			return "after one client left, a new one got " + r
		}
		d.conn.Close()
		return ""
	})
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, Config{IdleTimeout: 200 * time.Millisecond})
	w := connect(t, ts.addr)
	for range 3 { // activity keeps it open
		time.Sleep(100 * time.Millisecond)
		if r := w.do("PING"); r != "+PONG\r\n" {
			t.Fatalf("PING: %q", r)
		}
	}
	start := time.Now()
	_, err := w.rd.ReadByte()
	var ne net.Error
	if !errors.Is(err, io.EOF) || errors.As(err, &ne) {
		t.Fatalf("an idle connection was not closed by the server: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("closed after %s idle, want about 200ms", d)
	}
}
