package proxy

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
	"github.com/lockproxy/lockproxy/quorum"
)

// helloReply is Redis 7.0.15's HELLO reply, byte for byte, for a
// connection with the given id and protocol.
func helloReply(id string, proto int) string {
	head := "*14\r\n"
	if proto == 3 {
		head = "%7\r\n"
	}
	return head + bulk("server") + bulk("redis") + bulk("version") + bulk("7.0.15") +
		bulk("proto") + fmt.Sprintf(":%d\r\n", proto) + bulk("id") + ":" + id + "\r\n" +
		bulk("mode") + bulk("standalone") + bulk("role") + bulk("master") + bulk("modules") + "*0\r\n"
}

// clientID asks the connection's id, as it appears in HELLO.
func clientID(t *testing.T, w *wire) string {
	t.Helper()
	r := w.do("CLIENT", "ID")
	if !strings.HasPrefix(r, ":") {
		t.Fatalf("CLIENT ID: %q", r)
	}
	return strings.TrimSuffix(r[1:], "\r\n")
}

type step struct {
	cmd  []string
	want string
}

func runSteps(t *testing.T, w *wire, steps []step) {
	t.Helper()
	for i, s := range steps {
		if exp, got := s.want, w.do(s.cmd...); exp != got {
			t.Fatalf("step %d %q: want %q, got %q", i, s.cmd, exp, got)
		}
	}
}

func TestHello(t *testing.T) {
	ts := startServer(t, Config{})
	ts.fake.reset(fails(quorum.ErrNotFound))
	w := connect(t, ts.addr)
	id := clientID(t, w)
	runSteps(t, w, []step{
		{[]string{"HELLO"}, helloReply(id, 2)},
		{[]string{"GET", "k"}, "$-1\r\n"},
		{[]string{"HELLO", "3"}, helloReply(id, 3)},
		{[]string{"GET", "k"}, "_\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "_\r\n"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "%0\r\n"},
		{[]string{"COMMAND", "DOCS", "get"}, "%0\r\n"},
		{[]string{"hello"}, helloReply(id, 3)},
		{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "three"}, "-ERR Protocol version is not an integer or out of range\r\n"},
		{[]string{"HELLO", "3", "FOO"}, "-ERR Syntax error in HELLO option 'FOO'\r\n"},
		{[]string{"HELLO", "3", "AUTH", "default"}, "-ERR Syntax error in HELLO option 'AUTH'\r\n"},
		{[]string{"HELLO", "3", "SETNAME", "bad name"}, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{[]string{"HELLO", "2", "SETNAME", "app"}, helloReply(id, 2)},
		{[]string{"CLIENT", "GETNAME"}, bulk("app")},
		{[]string{"GET", "k"}, "$-1\r\n"},
		{[]string{"HELLO", "3"}, helloReply(id, 3)},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "k"}, "$-1\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$-1\r\n"},
	})
}

const helloNoAuth = "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"

func TestAuth(t *testing.T) {
	ts := startServer(t, Config{Password: "sekret"})
	w := connect(t, ts.addr)
	const noAuth, wrongPass = "-NOAUTH Authentication required.\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	runSteps(t, w, []step{
		{[]string{"GET", "k"}, noAuth},
		{[]string{"PING"}, "+PONG\r\n"}, // served before AUTH, as issue 6 asks
		{[]string{"ECHO", "x"}, noAuth},
		{[]string{"CLIENT", "ID"}, noAuth},
		{[]string{"FOO"}, "-ERR unknown command 'FOO', with args beginning with: \r\n"}, // checked before auth, as Redis does
		{[]string{"GET"}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"HELLO", "3"}, helloNoAuth},
		{[]string{"HELLO", "3", "AUTH", "default", "wrong"}, wrongPass},
		{[]string{"AUTH", "wrong"}, wrongPass},
		{[]string{"AUTH", "nobody", "sekret"}, wrongPass},
		{[]string{"AUTH", "a", "b", "c"}, "-ERR syntax error\r\n"},
		{[]string{"AUTH", "sekret"}, "+OK\r\n"},
		{[]string{"ECHO", "x"}, bulk("x")},
		{[]string{"AUTH", "wrong"}, wrongPass},
		{[]string{"ECHO", "x"}, bulk("x")}, // a failed AUTH keeps the earlier one
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"ECHO", "x"}, noAuth},
		{[]string{"AUTH", "default", "sekret"}, "+OK\r\n"},
		{[]string{"ECHO", "x"}, bulk("x")},
	})
	if calls := ts.fake.seen(); len(calls) != 0 {
		t.Fatalf("unauthenticated commands reached the Locker: %q", calls)
	}

	w = connect(t, ts.addr)
	r := w.do("HELLO", "3", "AUTH", "default", "sekret", "SETNAME", "app")
	if !strings.HasPrefix(r, "%7\r\n") || !strings.Contains(r, ":3\r\n") {
		t.Fatalf("HELLO 3 AUTH: got %q", r)
	}
	runSteps(t, w, []step{{[]string{"CLIENT", "GETNAME"}, bulk("app")}})
	if exp, got := "+OK\r\n", w.do("QUIT"); exp != got {
		t.Fatalf("QUIT before close: want %q, got %q", exp, got)
	}
	if _, err := readReply(w.rd); !errors.Is(err, io.EOF) {
		t.Fatalf("QUIT left the connection open: %v", err)
	}
}

func TestAuthWithoutPassword(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	runSteps(t, w, []step{
		{[]string{"AUTH", "x"}, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"},
		{[]string{"AUTH", "default", "anything"}, "+OK\r\n"},
		{[]string{"AUTH", "other", "anything"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
	})
	if r := w.do("HELLO", "3", "AUTH", "default", "anything"); !strings.HasPrefix(r, "%7\r\n") {
		t.Fatalf("HELLO 3 AUTH without a password: got %q", r)
	}
}

func TestChatter(t *testing.T) {
	ts := startServer(t, Config{})
	hello3 := [][]string{{"HELLO", "3"}}
	runWireCases(t, ts, []wireCase{
		{name: "ping", cmd: []string{"PING"}, want: "+PONG\r\n"},
		{name: "ping message", cmd: []string{"PING", "hi"}, want: bulk("hi")},
		{name: "ping arity", cmd: []string{"PING", "a", "b"}, want: "-ERR wrong number of arguments for 'ping' command\r\n"},
		{name: "echo", cmd: []string{"ECHO", "a\r\nb"}, want: bulk("a\r\nb")},
		{name: "select 0", cmd: []string{"SELECT", "0"}, want: "+OK\r\n"},
		{name: "select 15", cmd: []string{"SELECT", "15"}, want: "+OK\r\n"},
		{name: "select 16", cmd: []string{"SELECT", "16"}, want: "-ERR DB index is out of range\r\n"},
		{name: "select -1", cmd: []string{"SELECT", "-1"}, want: "-ERR DB index is out of range\r\n"},
		{name: "select word", cmd: []string{"SELECT", "one"}, want: "-ERR value is not an integer or out of range\r\n"},
		{name: "setname", cmd: []string{"CLIENT", "SETNAME", "app"}, want: "+OK\r\n"},
		{name: "setname invalid", cmd: []string{"CLIENT", "SETNAME", "a b"}, want: "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{name: "getname unset", cmd: []string{"CLIENT", "GETNAME"}, want: "$-1\r\n"},
		{name: "getname after setname", setup: [][]string{{"client", "setname", "app"}}, cmd: []string{"CLIENT", "GETNAME"}, want: bulk("app")},
		{name: "setinfo", cmd: []string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis(,go1.26.8)"}, want: "+OK\r\n"},
		{name: "setinfo version", cmd: []string{"client", "setinfo", "lib-ver", "9.23.0"}, want: "+OK\r\n"},
		{name: "setinfo unknown", cmd: []string{"CLIENT", "SETINFO", "COLOR", "red"}, want: "-ERR Unrecognized option 'COLOR'\r\n"},
		{name: "maint notifications", cmd: []string{"client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip"}, want: "+OK\r\n"},
		{name: "client capa", cmd: []string{"CLIENT", "CAPA", "redirect"}, want: "+OK\r\n"},
		{name: "command info", cmd: []string{"COMMAND", "INFO", "get", "nosuch", "evalsha"},
			want: "*3\r\n*10\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n*-1\r\n*10\r\n$7\r\nevalsha\r\n:-3\r\n*1\r\n+movablekeys\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n"},
		{name: "command getkeys", cmd: []string{"COMMAND", "GETKEYS", "EVALSHA", "abc", "2", "k1", "k2", "arg"}, want: "*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n"},
		{name: "command getkeys blpop", cmd: []string{"COMMAND", "GETKEYS", "blpop", "a", "b", "0"}, want: "*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		{name: "command getkeys none", cmd: []string{"COMMAND", "GETKEYS", "ping", "x"}, want: "-ERR The command has no key arguments\r\n"},
		{name: "cluster disabled", cmd: []string{"CLUSTER", "SLOTS"}, want: "-ERR This instance has cluster support disabled\r\n"},
		{name: "readonly disabled", cmd: []string{"READONLY"}, want: "-ERR This instance has cluster support disabled\r\n"},
		{name: "command count", cmd: []string{"COMMAND", "COUNT"}, want: fmt.Sprintf(":%d\r\n", len(ts.cmds))},
		{name: "command docs", cmd: []string{"COMMAND", "DOCS"}, want: "*0\r\n"},
		{name: "command docs RESP3", setup: hello3, cmd: []string{"COMMAND", "DOCS"}, want: "%0\r\n"},
		{name: "config get", cmd: []string{"CONFIG", "GET", "*"}, want: "*0\r\n"},
		{name: "config get RESP3", setup: hello3, cmd: []string{"CONFIG", "GET", "save", "appendonly"}, want: "%0\r\n"},
		{name: "info unknown section", cmd: []string{"INFO", "keyspace"}, want: "$0\r\n\r\n"},
	})
}

func TestClientInfoAndList(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	w.do("CLIENT", "SETNAME", "app")
	id := clientID(t, w)
	if r := w.do("CLIENT", "INFO"); !strings.Contains(r, "id="+id+" ") || !strings.Contains(r, " name=app ") || !strings.Contains(r, " resp=2 ") {
		t.Fatalf("CLIENT INFO: %q", r)
	}
	r := w.do("COMMAND", "LIST")
	for _, name := range []string{"set", "evalsha", "hello"} {
		if !strings.Contains(r, bulk(name)) {
			t.Fatalf("COMMAND LIST lacks %s: %q", name, r)
		}
	}
}

func TestTime(t *testing.T) {
	ts := startServer(t, Config{})
	r := connect(t, ts.addr).do("TIME")
	if !regexp.MustCompile(`^\*2\r\n\$\d+\r\n\d{10,}\r\n\$\d+\r\n\d{1,6}\r\n$`).MatchString(r) {
		t.Fatalf("TIME: %q", r)
	}
}

// TestQuitDropsTheRest: nothing written after QUIT in the same write runs,
// as on redis-server, whether the commands before it ran in turn or ahead
// of it (pipeline.go).
func TestQuitDropsTheRest(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	w.sendRaw(encode("SET", "a", "t", "NX", "PX", "1000") + encode("SET", "b", "t", "NX", "PX", "1000") +
		"QUIT\r\n" + encode("SET", "c", "t", "NX", "PX", "1000") + "SET d t NX PX 1000\r\n")
	got, err := io.ReadAll(w.rd)
	if exp := "+OK\r\n+OK\r\n+OK\r\n"; string(got) != exp || err != nil {
		t.Fatalf("replies: want %q and EOF, got %q (%v)", exp, got, err)
	}
	// Counted closed once its goroutine has served all it was going to.
	redistest.Eventually(t, func() string {
		if n := ts.clients.Load(); n != 0 {
			return fmt.Sprintf("%d connections still counted", n)
		}
		return ""
	})
	// a and b may have run at once, in either order.
	if exp, got := "[acquire a t 1s acquire b t 1s]", fmt.Sprint(slices.Sorted(slices.Values(ts.fake.seen()))); exp != got {
		t.Fatalf("Locker calls: want %s, got %s", exp, got)
	}
}
