package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

func splitArgs(s string) [][]byte {
	var args [][]byte
	for _, f := range strings.Fields(s) {
		args = append(args, []byte(f))
	}
	return args
}

const shapeErr = "ERR lockproxy only takes locks: SET key token NX PX|EX ttl, or SET key token IFEQ token PX|EX ttl to extend (got "

func TestParseSet(t *testing.T) {
	acquire := func(ttl time.Duration) setReq { return setReq{key: "k", token: "v", ttl: ttl} }
	extend := func(ttl time.Duration) setReq { return setReq{key: "k", token: "v", ttl: ttl, extend: true} }
	for _, tc := range []struct {
		cmd  string
		want setReq
		err  string
	}{
		// Every order and case that libraries send.
		{cmd: "SET k v NX PX 30000", want: acquire(30 * time.Second)},
		{cmd: "SET k v NX", want: acquire(0)}, // session-bound (session.go)
		{cmd: "SET k v PX 30000 NX", want: acquire(30 * time.Second)},
		{cmd: "set k v nx px 1500", want: acquire(1500 * time.Millisecond)},
		{cmd: "set k v px 1500 nx", want: acquire(1500 * time.Millisecond)},
		{cmd: "set k v ex 8 nx", want: acquire(8 * time.Second)},
		{cmd: "SET k v EX 8 NX", want: acquire(8 * time.Second)},
		{cmd: "SET k v Nx eX 8", want: acquire(8 * time.Second)},
		{cmd: "SET k v NX NX PX 10", want: acquire(10 * time.Millisecond)},    // Redis allows repeats
		{cmd: "SET k v NX PX 10 PX 20", want: acquire(20 * time.Millisecond)}, // and the last value wins
		{cmd: "SET k v IFEQ v PX 5000", want: extend(5 * time.Second)},
		{cmd: "SET k v EX 5 ifeq v", want: extend(5 * time.Second)},

		// Redis's syntax errors.
		{cmd: "SET k v NX PX 10 EX 10", err: "ERR syntax error"},
		{cmd: "SET k v NX XX PX 10", err: "ERR syntax error"},
		{cmd: "SET k v NX IFEQ v PX 10", err: "ERR syntax error"},
		{cmd: "SET k v PX 10 KEEPTTL", err: "ERR syntax error"},
		{cmd: "SET k v NX PX", err: "ERR syntax error"},
		{cmd: "SET k v NX FOO", err: "ERR syntax error"},
		{cmd: "SET k v NX PX abc FOO", err: "ERR syntax error"}, // syntax is checked before the value
		{cmd: "SET k v IFEQ", err: "ERR syntax error"},

		// Redis's expiry errors.
		{cmd: "SET k v NX PX abc", err: "ERR value is not an integer or out of range"},
		{cmd: "SET k v NX PX 1.5", err: "ERR value is not an integer or out of range"},
		{cmd: "SET k v NX PX 0", err: "ERR invalid expire time in 'set' command"},
		{cmd: "SET k v NX EX -1", err: "ERR invalid expire time in 'set' command"},
		{cmd: "SET k v NX EX 9223372036854775807", err: "ERR invalid expire time in 'set' command"},

		// What is not a lock.
		{cmd: "SET k v", err: shapeErr + "SET without NX)"},
		{cmd: "SET k v PX 100", err: shapeErr + "SET without NX)"},
		{cmd: "SET k v XX PX 100", err: shapeErr + "XX)"},
		{cmd: "SET k v IFNE x PX 100", err: shapeErr + "IFNE)"},
		{cmd: "SET k v NX GET PX 100", err: shapeErr + "GET)"},
		{cmd: "SET k v NX KEEPTTL", err: shapeErr + "KEEPTTL)"},
		{cmd: "SET k v NX PXAT 99999999999", err: "ERR invalid expire time in 'set' command"}, // 1973: past
		{cmd: "SET k v IFEQ v", err: shapeErr + "IFEQ without PX or EX: an extension sets a TTL)"},
		{cmd: "SET k new IFEQ old PX 100", err: shapeErr + "IFEQ with a new value: only the holder's own token can extend)"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			got, err := parseSet(splitArgs(tc.cmd))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("want error %q, got %v (%+v)", tc.err, err, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("want %+v, got %+v %v", tc.want, got, err)
			}
		})
	}
}

func TestParseSetCopiesArgs(t *testing.T) {
	args := splitArgs("SET key token NX PX 100")
	req, err := parseSet(args)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		for i := range a {
			a[i] = 'x' // as redcon reuses its buffer after the handler
		}
	}
	if req.key != "key" || req.token != "token" {
		t.Fatalf("parseSet kept the argument buffers: %+v", req)
	}
}

func TestSet(t *testing.T) {
	ts := startServer(t, Config{})
	hello3 := [][]string{{"HELLO", "3"}}
	runWireCases(t, ts, []wireCase{
		{name: "acquired", cmd: []string{"SET", "k", "v", "NX", "PX", "30000"},
			want: "+OK\r\n", calls: []string{"acquire k v 30s"}},
		{name: "acquired with EX", cmd: []string{"set", "k", "v", "ex", "8", "nx"},
			want: "+OK\r\n", calls: []string{"acquire k v 8s"}},
		{name: "held elsewhere RESP2", cmd: []string{"SET", "k", "v", "NX", "PX", "30000"}, answer: fails(quorum.ErrNotAcquired),
			want: "$-1\r\n", calls: []string{"acquire k v 30s"}},
		{name: "held elsewhere RESP3", setup: hello3, cmd: []string{"SET", "k", "v", "NX", "PX", "30000"}, answer: fails(quorum.ErrNotAcquired),
			want: "_\r\n", calls: []string{"acquire k v 30s"}},
		{name: "no quorum", cmd: []string{"SET", "k", "v", "NX", "PX", "30000"},
			answer: fails(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3}),
			want:   "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n", calls: []string{"acquire k v 30s"}},
		{name: "ttl above max", cmd: []string{"SET", "k", "v", "NX", "PX", "120000"},
			answer: fails(&quorum.TTLError{TTL: 2 * time.Minute, Max: time.Minute}),
			want:   "-ERR invalid expire time: 120000 ms exceeds max_ttl 60000 ms\r\n", calls: []string{"acquire k v 2m0s"}},
		{name: "bad ttl makes no call", cmd: []string{"SET", "k", "v", "NX", "PX", "0"},
			want: "-ERR invalid expire time in 'set' command\r\n"},
		{name: "not a lock makes no call", cmd: []string{"SET", "k", "v", "XX", "PX", "100"},
			want: "-" + shapeErr + "XX)\r\n"},
		{name: "binary key and token", cmd: []string{"SET", "k\x00\r\n", "\xff\x00", "NX", "PX", "10"},
			want: "+OK\r\n", calls: []string{"acquire k\x00\r\n \xff\x00 10ms"}},
		{name: "extend", cmd: []string{"SET", "k", "v", "IFEQ", "v", "PX", "5000"},
			want: "+OK\r\n", calls: []string{"extend k v 5s"}},
		{name: "extend not held", setup: hello3, cmd: []string{"SET", "k", "v", "IFEQ", "v", "EX", "5"}, answer: fails(quorum.ErrNotHeld),
			want: "_\r\n", calls: []string{"extend k v 5s"}},
		// Session-bound until a PEXPIRE: the lease's TTL (session.go). The
		// lock taken last, as its release when its connection closes
		// comes after the calls checked.
		{name: "setnx held", cmd: []string{"setnx", "k", "v"}, answer: fails(quorum.ErrNotAcquired),
			want: ":0\r\n", calls: []string{"acquire k v 10s"}},
		{name: "setnx", cmd: []string{"SETNX", "k", "v"},
			want: ":1\r\n", calls: []string{"acquire k v 10s"}},
	})
}

func FuzzParseSet(f *testing.F) {
	for _, s := range []string{
		"SET k v NX PX 30000", "set k v ex 8 nx", "SET k v IFEQ v PX 1", "SET k v NX EX 9223372036854775807",
		"SET k v XX KEEPTTL GET", "SET k v NX PX", "SET k v PXAT -1 NX", "SET k", "SET",
	} {
		f.Add([]byte(strings.ReplaceAll(s, " ", "\x00")))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args := bytes.Split(raw, []byte{0})
		req, err := parseSet(args)
		if err != nil {
			if _, ok := err.(*argError); !ok {
				t.Fatalf("parseSet returned %T, not an *argError", err)
			}
			return
		}
		session := len(args) == 4 && strings.EqualFold(string(args[3]), "nx")
		if (req.ttl <= 0 && !session) || (len(args) < 5 && !session) {
			t.Fatalf("accepted %q as %+v", args, req)
		}
	})
}

// TestSetAt: EXAT and PXAT (rueidislock acquires with SET NX PXAT) are
// read as the TTL from now on the proxy's clock.
func TestSetAt(t *testing.T) {
	hour := time.Now().Add(time.Hour)
	for _, cmd := range []string{
		"SET k v NX PXAT " + strconv.FormatInt(hour.UnixMilli(), 10),
		"SET k v NX EXAT " + strconv.FormatInt(hour.Unix()+1, 10),
	} {
		got, err := parseSet(splitArgs(cmd))
		if err != nil || got.ttl < 59*time.Minute || got.ttl > time.Hour+time.Second || got.extend {
			t.Errorf("%s: %+v, %v; want an acquisition of about an hour", cmd, got, err)
		}
	}
}
