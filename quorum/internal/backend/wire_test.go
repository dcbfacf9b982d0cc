package backend

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestScriptCommandWire(t *testing.T) {
	s := NewScript("return 1")
	cmd := ScriptCommand(s, []string{"k"}, "tok", int64(1500), 7)
	want := "*7\r\n$7\r\nEVALSHA\r\n$40\r\n" + s.sha + "\r\n$1\r\n1\r\n$1\r\nk\r\n$3\r\ntok\r\n$4\r\n1500\r\n$1\r\n7\r\n"
	if got := string(cmd.wire); got != want {
		t.Fatalf("EVALSHA form:\n got %q\nwant %q", got, want)
	}
	wantEval := "*7\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n1\r\n$1\r\nk\r\n$3\r\ntok\r\n$4\r\n1500\r\n$1\r\n7\r\n"
	if got := string(cmd.eval()); got != wantEval {
		t.Fatalf("EVAL form:\n got %q\nwant %q", got, wantEval)
	}
	if got, want := string(KeyCommand("DEL", "k").wire), "*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n"; got != want {
		t.Fatalf("plain: got %q, want %q", got, want)
	}
}

// TestScriptCommandBlank: a Blank argument is encoded as that many bytes,
// written in place after encoding, in both the EVALSHA and EVAL forms.
func TestScriptCommandBlank(t *testing.T) {
	s := NewScript("return 1")
	cmd := ScriptCommand(s, []string{"k"}, "tok", Blank(4), "set")
	if cmd.Blank() == nil || len(cmd.Blank()) != 4 || cap(cmd.Blank()) != 4 {
		t.Fatalf("Blank() = %q (cap %d), want 4 bytes", cmd.Blank(), cap(cmd.Blank()))
	}
	copy(cmd.Blank(), "0042")
	want := "*7\r\n$7\r\nEVALSHA\r\n$40\r\n" + s.sha + "\r\n$1\r\n1\r\n$1\r\nk\r\n$3\r\ntok\r\n$4\r\n0042\r\n$3\r\nset\r\n"
	if got := string(cmd.wire); got != want {
		t.Fatalf("EVALSHA form:\n got %q\nwant %q", got, want)
	}
	if got := string(cmd.eval()); !strings.HasSuffix(got, "$4\r\n0042\r\n$3\r\nset\r\n") {
		t.Fatalf("EVAL form lacks the written blank: %q", got)
	}
	if ScriptCommand(s, []string{"k"}, "tok").Blank() != nil {
		t.Fatal("a command without a Blank argument has one")
	}
}

func TestReadReply(t *testing.T) {
	in := "+OK\r\n:-12\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$-1\r\n:5\r\n*-1\r\n-NOSCRIPT No matching script\r\n$0\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(in))
	want := []Reply{
		{kind: '+', str: "OK"},
		{kind: ':', int: -12},
		{kind: '$', str: "abc"},
		{},
		{kind: '*', array: []Reply{{}, {kind: ':', int: 5}}},
		{},
		{kind: '-', str: "NOSCRIPT No matching script"},
		{kind: '$', str: ""},
	}
	for i, w := range want {
		got, err := readReply(br)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !equalReply(got, w) {
			t.Fatalf("reply %d: got %+v, want %+v", i, got, w)
		}
	}
}

func TestReadReplyRejectsGarbage(t *testing.T) {
	for _, in := range []string{
		"",                  // EOF
		"?x\r\n",            // unknown type
		":12a\r\n",          // bad integer
		"$5\r\nab\r\n",      // short bulk
		"$3\r\nabcd\r\n",    // bulk without its CRLF
		"$-7\r\n",           // negative length
		"$999999999999\r\n", // beyond the bulk limit
		"*2\r\n:1\r\n",      // short array
		":1\n",              // LF without CR
		strings.Repeat("*1\r\n", maxReplyDepth+1) + ":1\r\n", // nested too deep
	} {
		if r, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q: accepted as %+v", in, r)
		}
	}
}

func equalReply(a, b Reply) bool {
	if a.kind != b.kind || a.int != b.int || a.str != b.str || len(a.array) != len(b.array) {
		return false
	}
	for i := range a.array {
		if !equalReply(a.array[i], b.array[i]) {
			return false
		}
	}
	return true
}

// TestReplyAccessors: each accessor answers for its own kind of reply
// only, so that a decoder never mistakes one kind for another.
func TestReplyAccessors(t *testing.T) {
	status, integer, bulk := Reply{kind: '+', str: "PONG"}, Reply{kind: ':', int: 7}, Reply{kind: '$', str: "v"}
	array, null := Reply{kind: '*', array: []Reply{integer}}, Reply{}
	for name, r := range map[string]Reply{"status": status, "integer": integer, "bulk": bulk, "array": array, "nil": null} {
		if s, err := r.Status(); (err == nil) != (name == "status") || err == nil && s != "PONG" {
			t.Errorf("%s: Status() = %q, %v", name, s, err)
		}
		if n, err := r.Integer(); (err == nil) != (name == "integer") || err == nil && n != 7 {
			t.Errorf("%s: Integer() = %d, %v", name, n, err)
		}
		if s, err := r.Bulk(); (err == nil) != (name == "bulk") || err == nil && s != "v" {
			t.Errorf("%s: Bulk() = %q, %v", name, s, err)
		}
		if a, err := r.Array(); (err == nil) != (name == "array") || err == nil && len(a) != 1 {
			t.Errorf("%s: Array() = %v, %v", name, a, err)
		}
		if exp, got := name == "nil", r.IsNil(); exp != got {
			t.Errorf("%s: IsNil() = %v", name, got)
		}
	}
}

func TestReplyTime(t *testing.T) {
	bulk := func(s string) Reply { return Reply{kind: '$', str: s} }
	got, err := Reply{kind: '*', array: []Reply{bulk("1700000000"), bulk("123456")}}.Time()
	if want := 1700000000*time.Second + 123456*time.Microsecond; err != nil || got != want {
		t.Errorf("TIME 1700000000 123456: got %v %v, want %v", got, err, want)
	}
	for name, r := range map[string]Reply{
		"not an array":     bulk("1700000000"),
		"one element":      {kind: '*', array: []Reply{bulk("1")}},
		"integers":         {kind: '*', array: []Reply{{kind: ':', int: 1}, {kind: ':', int: 2}}},
		"not a number":     {kind: '*', array: []Reply{bulk("x"), bulk("0")}},
		"negative":         {kind: '*', array: []Reply{bulk("-1"), bulk("0")}},
		"a million µs":     {kind: '*', array: []Reply{bulk("1"), bulk("1000000")}},
		"past a Duration":  {kind: '*', array: []Reply{bulk("9223372037"), bulk("0")}},
		"nil":              {},
		"an error reply's": {kind: '-', str: "ERR"},
	} {
		if _, err := r.Time(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestIsServerError(t *testing.T) {
	if !IsServerError(fmt.Errorf("wrapped: %w", serverError("NOPERM"))) {
		t.Error("a server's error reply is not one")
	}
	if IsServerError(errClosed) || IsServerError(notSent{errClosed}) {
		t.Error("a closed pipe's error is a server's reply")
	}
}

// TestKeyCommands: a command on a key carries the key's hash, so that it
// keeps the key's send order; a keyed verb cannot be built as keyless.
func TestKeyCommands(t *testing.T) {
	if got, want := KeyCommand("PEXPIRE", "k", 100).KeyHash(), HashKey("k"); got != want {
		t.Errorf("PEXPIRE k: key hash %d, want %d", got, want)
	}
	if got := KeylessCommand("PING").KeyHash(); got != 0 {
		t.Errorf("PING: key hash %d, want 0", got)
	}
	for _, verb := range []string{"PEXPIRE", "DEL", "SET", "EVAL", "GET"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("KeylessCommand(%q) was built; want a panic", verb)
				}
			}()
			KeylessCommand(verb, "k")
		}()
	}
}
