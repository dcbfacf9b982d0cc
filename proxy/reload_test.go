package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// emptyValue is GET's reply when the fake Locker answers with its zero
// Reading: the command was served.
const emptyValue = "$0\r\n\r\n"

// TestReloadPassword: after Reload, AUTH checks the new password on every
// connection, new or open; a connection authenticated before keeps its user
// and is served, even after a failed AUTH with the old password.
func TestReloadPassword(t *testing.T) {
	ts := startServer(t, Config{Password: "old"})
	before := connect(t, ts.addr)
	runSteps(t, before, []step{
		{[]string{"AUTH", "old"}, "+OK\r\n"},
		{[]string{"SET", "k", "v", "NX", "PX", "100"}, "+OK\r\n"},
	})
	if err := ts.Reload(Config{Password: "new", Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	runSteps(t, before, []step{
		{[]string{"GET", "k"}, emptyValue},
		{[]string{"AUTH", "old"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"GET", "k"}, emptyValue}, // a failed AUTH leaves the connection as it was
	})
	after := connect(t, ts.addr)
	runSteps(t, after, []step{
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"AUTH", "old"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"HELLO", "3", "AUTH", "default", "old"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "new"}, "+OK\r\n"},
		{[]string{"GET", "k"}, emptyValue},
	})
	// RESET starts the connection over, as the new configuration has it.
	runSteps(t, before, []step{
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
	})
}

// TestReloadLimits: new limits apply to the connections accepted after
// Reload; those accepted before keep theirs, and a lowered client limit
// closes none.
func TestReloadLimits(t *testing.T) {
	ts := startServer(t, Config{MaxKeyBytes: 8, MaxClients: 1})
	before := connect(t, ts.addr)
	runSteps(t, before, []step{{[]string{"GET", "12345678"}, emptyValue}})
	if err := ts.Reload(Config{MaxKeyBytes: 4, MaxClients: 2}); err != nil {
		t.Fatal(err)
	}
	after := connect(t, ts.addr) // the second client, within the new limit
	runSteps(t, after, []step{{[]string{"GET", "12345678"}, "-ERR key of 8 bytes exceeds max_key_bytes (4)\r\n"}})
	runSteps(t, before, []step{{[]string{"GET", "12345678"}, emptyValue}})

	if err := ts.Reload(Config{MaxClients: 1}); err != nil {
		t.Fatal(err)
	}
	if exp, got := "-ERR max number of clients reached\r\n", connect(t, ts.addr).read(); exp != got {
		t.Fatalf("a third client over a lowered limit: want %q, got %q", exp, got)
	}
	for _, w := range []*wire{before, after} {
		runSteps(t, w, []step{{[]string{"PING"}, "+PONG\r\n"}})
	}
}

// TestReloadRefused: a configuration New would refuse changes nothing.
func TestReloadRefused(t *testing.T) {
	ts := startServer(t, Config{Password: "pw"})
	for _, cfg := range []Config{
		{Password: "other", MaxKeyBytes: -1},
		{Password: "other", Users: []User{{Name: "a", PasswordSHA256: "00"}}},
		{Password: "other", MaxRequestBytes: MaxRequestBytesLimit + 1},
	} {
		if err := ts.Reload(cfg); err == nil {
			t.Fatalf("Reload(%+v) accepted", cfg)
		}
	}
	runSteps(t, connect(t, ts.addr), []step{{[]string{"AUTH", "pw"}, "+OK\r\n"}})
}

// TestReloadKeepsScripts: a user left as it was keeps the scripts it
// loaded; one whose key prefix changed starts with none.
func TestReloadKeepsScripts(t *testing.T) {
	users := func(prefix string) Config {
		return Config{Users: []User{{Name: "u", PasswordSHA256: sha256Hex("p"), KeyPrefix: prefix}}}
	}
	ts := startServer(t, users("a:"))
	runSteps(t, connect(t, ts.addr), []step{
		{[]string{"AUTH", "u", "p"}, "+OK\r\n"},
		{[]string{"SCRIPT", "LOAD", releaseScript}, fmt.Sprintf("$40\r\n%s\r\n", releaseSHA)},
	})
	for _, tc := range []struct {
		prefix, want string
	}{
		{"a:", "*1\r\n:1\r\n"},
		{"b:", "*1\r\n:0\r\n"},
	} {
		if err := ts.Reload(users(tc.prefix)); err != nil {
			t.Fatal(err)
		}
		runSteps(t, connect(t, ts.addr), []step{
			{[]string{"AUTH", "u", "p"}, "+OK\r\n"},
			{[]string{"SCRIPT", "EXISTS", releaseSHA}, tc.want},
		})
	}
}

// TestReloadConcurrent: connections authenticate and lock while the
// configuration is replaced under them (run with -race). Every
// configuration admits password "a" and keys of 100 bytes, so every AUTH
// and every GET must succeed, whichever one it meets.
func TestReloadConcurrent(t *testing.T) {
	ts := startServer(t, Config{Password: "a", MaxKeyBytes: 100})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- authLoop(ts.addr, 50) })
	}
	for i := range 200 {
		cfg := Config{Password: "a", MaxKeyBytes: 100 + i%2}
		if i%2 == 1 {
			cfg.Users = []User{{Name: "u", PasswordSHA256: sha256Hex("p"), KeyPrefix: "u:"}}
		}
		if err := ts.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// authLoop connects n times to addr, authenticates with password "a" and
// GETs a key of 100 bytes. It reports the first failure rather than
// failing a test, as it runs in a goroutine.
func authLoop(addr string, n int) error {
	key := strings.Repeat("k", 100)
	for range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(conn)
		do := func(args ...string) string {
			io.WriteString(conn, encode(args...))
			r, _ := readReply(rd)
			return r
		}
		auth, get := do("AUTH", "a"), do("GET", key)
		conn.Close()
		switch {
		case auth != "+OK\r\n":
			return fmt.Errorf("AUTH: %q", auth)
		case get != emptyValue:
			return fmt.Errorf("GET after AUTH: %q", get)
		}
	}
	return nil
}
