package proxy

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

func TestKeys(t *testing.T) {
	ts := startServer(t, Config{})
	hello3 := [][]string{{"HELLO", "3"}}
	// existsOnly answers true for the key "a" and false for any other.
	existsOnly := func(c call) (any, error) { return c.key == "a", nil }
	noQuorum := fails(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3})
	runWireCases(t, ts, []wireCase{
		{name: "get", cmd: []string{"GET", "k"}, answer: returns("tok"), want: "$3\r\ntok\r\n", calls: []string{"get k"}},
		{name: "get missing RESP2", cmd: []string{"get", "k"}, answer: fails(quorum.ErrNotFound), want: "$-1\r\n", calls: []string{"get k"}},
		{name: "get missing RESP3", setup: hello3, cmd: []string{"GET", "k"}, answer: fails(quorum.ErrNotFound), want: "_\r\n", calls: []string{"get k"}},
		{name: "get no quorum", cmd: []string{"GET", "k"}, answer: noQuorum, want: "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n", calls: []string{"get k"}},

		{name: "pttl", cmd: []string{"PTTL", "k"}, answer: returns(1499 * time.Millisecond), want: ":1499\r\n", calls: []string{"pttl k"}},
		{name: "pttl missing", cmd: []string{"PTTL", "k"}, answer: fails(quorum.ErrNotFound), want: ":-2\r\n", calls: []string{"pttl k"}},
		{name: "pttl no expiry", cmd: []string{"PTTL", "k"}, answer: fails(quorum.ErrNoExpiry), want: ":-1\r\n", calls: []string{"pttl k"}},
		{name: "ttl rounds up at half", cmd: []string{"TTL", "k"}, answer: returns(1500 * time.Millisecond), want: ":2\r\n", calls: []string{"pttl k"}},
		{name: "ttl rounds down below half", cmd: []string{"TTL", "k"}, answer: returns(1499 * time.Millisecond), want: ":1\r\n", calls: []string{"pttl k"}},
		{name: "ttl missing", cmd: []string{"ttl", "k"}, answer: fails(quorum.ErrNotFound), want: ":-2\r\n", calls: []string{"pttl k"}},
		{name: "ttl no expiry", cmd: []string{"TTL", "k"}, answer: fails(quorum.ErrNoExpiry), want: ":-1\r\n", calls: []string{"pttl k"}},

		{name: "exists", cmd: []string{"EXISTS", "a"}, answer: existsOnly, want: ":1\r\n", calls: []string{"exists a"}},
		{name: "exists counts repeats", cmd: []string{"EXISTS", "a", "b", "a"}, answer: existsOnly, want: ":2\r\n",
			calls: []string{"exists a", "exists b", "exists a"}},
		{name: "exists no quorum", cmd: []string{"EXISTS", "a", "b"}, answer: noQuorum,
			want: "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n", calls: []string{"exists a"}},
		{name: "del", cmd: []string{"DEL", "a", "b"}, answer: existsOnly, want: ":1\r\n", calls: []string{"delete a", "delete b"}},

		{name: "pexpire", cmd: []string{"PEXPIRE", "k", "5000"}, answer: returns(true), want: ":1\r\n", calls: []string{"expire k 5s"}},
		{name: "pexpire not set", cmd: []string{"pexpire", "k", "5000"}, answer: returns(false), want: ":0\r\n", calls: []string{"expire k 5s"}},
		{name: "expire seconds", cmd: []string{"EXPIRE", "k", "30"}, answer: returns(true), want: ":1\r\n", calls: []string{"expire k 30s"}},
		{name: "pexpire not integer", cmd: []string{"PEXPIRE", "k", "abc"}, want: "-ERR value is not an integer or out of range\r\n"},
		// A TTL ≤ 0 deletes, as on Redis, through the quorum.
		{name: "pexpire zero deletes", cmd: []string{"PEXPIRE", "k", "0"}, answer: returns(true), want: ":1\r\n", calls: []string{"delete k"}},
		{name: "expire negative deletes", cmd: []string{"EXPIRE", "k", "-1"}, answer: returns(false), want: ":0\r\n", calls: []string{"delete k"}},
		{name: "pexpire beyond any max", cmd: []string{"PEXPIRE", "k", "9223372036854775807"},
			want: "-ERR invalid expire time: 9223372036854775807 ms exceeds max_ttl 60000 ms\r\n"},
		{name: "set beyond any max", cmd: []string{"SET", "k", "v", "NX", "EX", "9223372036854"},
			want: "-ERR invalid expire time: 9223372036854 s exceeds max_ttl 60000 ms\r\n"},
		{name: "expire overflow", cmd: []string{"EXPIRE", "k", "9223372036854775807"}, want: "-ERR invalid expire time in 'expire' command\r\n"},
		{name: "pexpire option", cmd: []string{"PEXPIRE", "k", "100", "nx"},
			want: "-ERR lockproxy does not support PEXPIRE options: PEXPIRE key ttl (got NX)\r\n"},
		{name: "pexpire unknown option", cmd: []string{"PEXPIRE", "k", "100", "FOO"}, want: "-ERR Unsupported option FOO\r\n"},
		{name: "expire above max", cmd: []string{"PEXPIRE", "k", "120000"},
			answer: fails(&quorum.TTLError{TTL: 2 * time.Minute, Max: time.Minute}),
			want:   "-ERR invalid expire time: 120000 ms exceeds max_ttl 60000 ms\r\n", calls: []string{"expire k 2m0s"}},

		{name: "delex ifeq", cmd: []string{"DELEX", "k", "IFEQ", "v"}, want: ":1\r\n", calls: []string{"release k v"}},
		{name: "delex not held", cmd: []string{"delex", "k", "ifeq", "v"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"release k v"}},
		{name: "delex unconditional", cmd: []string{"DELEX", "k"}, answer: returns(true), want: ":1\r\n", calls: []string{"delete k"}},
		{name: "delex ifne", cmd: []string{"DELEX", "k", "IFNE", "v"}, want: "-ERR lockproxy only takes DELEX key IFEQ token (got IFNE)\r\n"},
		{name: "delex syntax", cmd: []string{"DELEX", "k", "IFEQ"}, want: "-ERR syntax error\r\n"},
		{name: "delifeq", cmd: []string{"DELIFEQ", "k", "v"}, want: ":1\r\n", calls: []string{"release k v"}},
		{name: "delifeq not held", cmd: []string{"DELIFEQ", "k", "v"}, answer: fails(quorum.ErrNotHeld), want: ":0\r\n", calls: []string{"release k v"}},
		{name: "delifeq no quorum", cmd: []string{"DELIFEQ", "k", "v"}, answer: noQuorum,
			want: "-NOQUORUM 1 of 3 backends answered, 2 needed\r\n", calls: []string{"release k v"}},
	})
}
