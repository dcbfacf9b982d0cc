package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// crashRequest panics redcon v1.6.2: i+size+2 overflows in readCommands.
const crashRequest = "*1\r\n$9223372036854775807\r\n"

const testLimit = 1024

// startGuarded serves a Server behind a guard with the given limit and
// returns its address.
func startGuarded(t *testing.T, limit int) string {
	t.Helper()
	return startServer(t, Config{MaxRequestBytes: limit}).addr
}

// dial connects to addr; every wait on the connection is bounded.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// untilClosed sends req and returns all the server wrote before closing.
func untilClosed(t *testing.T, addr, req string) string {
	t.Helper()
	conn := dial(t, addr)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("server did not close the connection: %v (read %q)", err, got)
	}
	return string(got)
}

// expect reads exactly len(want) bytes from conn and compares them to want.
func expect(t *testing.T, conn net.Conn, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading %q: %v (read %q)", want, err, got)
	}
	if exp, got := want, string(got); exp != got {
		t.Fatalf("expected %q, got %q", exp, got)
	}
}

func bulkCommand(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// echoOfSize returns an ECHO command exactly size bytes long on the wire,
// and the reply to it.
func echoOfSize(t *testing.T, size int) (cmd, reply string) {
	t.Helper()
	for n := size; n >= 0; n-- {
		arg := strings.Repeat("x", n)
		if cmd := bulkCommand("ECHO", arg); len(cmd) == size {
			return cmd, "$" + strconv.Itoa(n) + "\r\n" + arg + "\r\n"
		}
	}
	t.Fatalf("no ECHO command is %d bytes long", size)
	return "", ""
}

func TestGuardRejects(t *testing.T) {
	// 100 bulks of 10 bytes: the count fits the limit (each bulk could be
	// 6 bytes), the arguments do not, so the command streams past it.
	var manyBulks strings.Builder
	manyBulks.WriteString("*100\r\n")
	for range 100 {
		manyBulks.WriteString("$10\r\n0123456789\r\n")
	}
	overLimit, _ := echoOfSize(t, testLimit+1)
	tooBig := "-ERR Protocol error: request exceeds max_request_bytes (1024)\r\n"

	tests := []struct {
		name  string
		limit int // default testLimit
		req   string
		exp   string
	}{
		{name: "crash request", req: crashRequest,
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "crash request under the largest limit", limit: guardMaxLimit, req: crashRequest,
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "huge multibulk count", req: "*4611686018427387904\r\n",
			exp: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "count above Redis's limit", limit: 1 << 27, req: "*1048577\r\n",
			exp: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "count that cannot fit the limit", req: "*171\r\n", exp: tooBig},
		{name: "zero count", req: "*0\r\n",
			exp: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "negative count", req: "*-1\r\n",
			exp: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "count without CR", req: "*1\n",
			exp: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "negative bulk length", req: "*1\r\n$-5\r\n",
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk length over the limit", req: "*1\r\n$1025\r\n",
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk that cannot fit the limit", req: "*2\r\n$4\r\nECHO\r\n$1010\r\n", exp: tooBig},
		{name: "many small bulks past the limit", req: manyBulks.String(), exp: tooBig},
		{name: "garbage after dollar", req: "*1\r\n$abc\r\n",
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "endless leading zeros", limit: 1 << 20, req: "*1\r\n$" + strings.Repeat("0", 21),
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk not followed by CRLF", req: "*1\r\n$4\r\nPINGxx",
			exp: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "argument without dollar", req: "*1\r\nPING\r\n",
			exp: "-ERR Protocol error: expected '$', got 'P'\r\n"},
		{name: "CR instead of dollar stays one line", req: "*1\r\n\r\n",
			exp: "-ERR Protocol error: expected '$', got ' '\r\n"},
		{name: "inline line over the limit", req: strings.Repeat("a", testLimit+1),
			exp: "-ERR Protocol error: too big inline request\r\n"},
		{name: "inline line over 4 KiB", limit: 1 << 20, req: "ECHO " + strings.Repeat("a", 4*1024-4),
			exp: "-ERR Protocol error: too big inline request\r\n"},
		{name: "command one byte over the limit", req: overLimit, exp: tooBig},
		{name: "inline commands before the violation are answered", req: "PING\r\n*1\r\n$-5\r\n",
			exp: "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"},
		{name: "pipeline before the violation is answered",
			req: bulkCommand("PING") + bulkCommand("ECHO", "hi") + "*1\r\n$-5\r\n",
			exp: "+PONG\r\n$2\r\nhi\r\n-ERR Protocol error: invalid bulk length\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.limit
			if limit == 0 {
				limit = testLimit
			}
			addr := startGuarded(t, limit)
			if exp, got := tc.exp, untilClosed(t, addr, tc.req); exp != got {
				t.Errorf("expected %q, got %q", exp, got)
			}
			// The process is alive: a new connection is still served.
			conn := dial(t, addr)
			if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
				t.Fatal(err)
			}
			expect(t, conn, "+PONG\r\n")
		})
	}
}

func TestGuardServes(t *testing.T) {
	pipeline := bulkCommand("PING") + "ECHO hi\r\n" + bulkCommand("ECHO", "") + bulkCommand("ECHO", "a\r\nb")
	replies := "+PONG\r\n$2\r\nhi\r\n$0\r\n\r\n$4\r\na\r\nb\r\n"
	exact, exactReply := echoOfSize(t, testLimit)

	tests := []struct {
		name       string
		req        string
		exp        string
		byteByByte bool
	}{
		{name: "pipeline", req: pipeline, exp: replies},
		{name: "pipeline one byte at a time", req: pipeline, exp: replies, byteByByte: true},
		{name: "command of exactly the limit", req: exact, exp: exactReply},
		{name: "inline line of exactly the limit", req: "ECHO " + strings.Repeat("a", testLimit-5) + "\n",
			exp: "$" + strconv.Itoa(testLimit-5) + "\r\n" + strings.Repeat("a", testLimit-5) + "\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, startGuarded(t, testLimit))
			chunk := len(tc.req)
			if tc.byteByByte {
				chunk = 1
			}
			for req := tc.req; req != ""; req = req[min(chunk, len(req)):] {
				if _, err := io.WriteString(conn, req[:min(chunk, len(req))]); err != nil {
					t.Fatal(err)
				}
			}
			expect(t, conn, tc.exp)
			// Still open and in step after the command.
			if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
				t.Fatal(err)
			}
			expect(t, conn, "+PONG\r\n")
		})
	}
}

// chunkConn is a net.Conn whose reads return chunks, one per Read.
type chunkConn struct {
	net.Conn
	chunks []string
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// readAll reads batches from r until it fails, and returns each batch's
// commands, words joined by spaces.
func readAll(t *testing.T, r *commandReader) (batches [][]string, err error) {
	t.Helper()
	for {
		cmds, err := r.read(false)
		if err != nil {
			return batches, err
		}
		var batch []string
		for _, cmd := range cmds {
			batch = append(batch, strings.Join(words(cmd.Args), " "))
		}
		batches = append(batches, batch)
	}
}

// TestReaderBatches: each read hands out the commands that what arrived so
// far completes, however they were split, inline and multibulk alike.
func TestReaderBatches(t *testing.T) {
	r := newCommandReader(&chunkConn{chunks: []string{"PING\r\n*1\r\n$4\r\nPI", "NG\r\nECHO a\r\nEC", "HO b\r\n  \r\n"}}, testLimit)
	batches, err := readAll(t, r)
	if exp, got := `[[PING] [PING ECHO a] [ECHO b]]`, fmt.Sprint(batches); exp != got || err != io.EOF {
		t.Errorf("expected batches %s and EOF, got %s and %v", exp, got, err)
	}
}

// TestReaderRefuses: the commands before a refused request are handed out
// first, then the refusal, with the reply Redis words.
func TestReaderRefuses(t *testing.T) {
	r := newCommandReader(&chunkConn{chunks: []string{"PING\r\n*1\r\n$-5\r\nPING\r\n"}}, testLimit)
	batches, err := readAll(t, r)
	var refused *protocolError
	if !errors.As(err, &refused) || refused.reply != "-ERR Protocol error: invalid bulk length\r\n" || fmt.Sprint(batches) != "[[PING]]" {
		t.Fatalf("got %v then %v", batches, err)
	}
	r = newCommandReader(&chunkConn{chunks: []string{"PING\r\nSET \"a b\r\n"}}, testLimit)
	batches, err = readAll(t, r)
	if !errors.As(err, &refused) || refused.reply != "-ERR Protocol error: unbalanced quotes in request\r\n" || fmt.Sprint(batches) != "[[PING]]" {
		t.Fatalf("unbalanced quotes: got %v then %v", batches, err)
	}
}

// TestReaderUnauthenticated: before AUTH a command may have at most 10
// arguments of at most 16 KiB, as in Redis, and commands are handed out one
// at a time, so that an AUTH lifts the bounds for the command right after it.
func TestReaderUnauthenticated(t *testing.T) {
	big := bulkCommand("ECHO", strings.Repeat("e", 16385))
	for _, tc := range []struct {
		name  string
		req   string
		reply string // of the refusal, "" for none
	}{
		{"10 arguments", bulkCommand("A", "1", "2", "3", "4", "5", "6", "7", "8", "9"), ""},
		{"11 arguments", "*11\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"16 KiB", bulkCommand("AUTH", strings.Repeat("p", 16384)), ""},
		{"one byte more", bulkCommand("AUTH", strings.Repeat("p", 16385)), "-ERR Protocol error: unauthenticated bulk length\r\n"},
		{"inline", "PING " + strings.Repeat("x", 4000) + "\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCommandReader(&chunkConn{chunks: []string{tc.req}}, 1<<20)
			_, err := r.read(true)
			var refused *protocolError
			switch {
			case tc.reply == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.reply != "" && (!errors.As(err, &refused) || refused.reply != tc.reply):
				t.Fatalf("want %q, got %v", tc.reply, err)
			}
		})
	}

	// Authenticated by the first command, the connection may send more with
	// the second, in the same read.
	r := newCommandReader(&chunkConn{chunks: []string{"AUTH pw\r\n" + big + big}}, 1<<20)
	if cmds, err := r.read(true); err != nil || len(cmds) != 1 {
		t.Fatalf("unauthenticated, the first read hands out %d commands (%v), want only AUTH", len(cmds), err)
	}
	for i := range 2 {
		if cmds, err := r.read(false); err != nil || len(cmds) != 1 || len(cmds[0].Args[1]) != 16385 {
			t.Fatalf("authenticated, large command %d: %d commands, %v", i+1, len(cmds), err)
		}
	}
	// Not authenticated by it, the connection is refused the large one.
	r = newCommandReader(&chunkConn{chunks: []string{"AUTH guess\r\n" + big}}, 1<<20)
	r.read(true)
	var refused *protocolError
	if _, err := r.read(true); !errors.As(err, &refused) || refused.reply != "-ERR Protocol error: unauthenticated bulk length\r\n" {
		t.Fatalf("after a failed AUTH: %v", err)
	}
}

// TestReaderDropsLargeBuffer: a command larger than the read buffer gets
// one buffer of its size (not a doubling up to it), which the connection
// drops once the command was served: an idle connection keeps readBufSize,
// whatever it sent before (see the top of guard.go).
func TestReaderDropsLargeBuffer(t *testing.T) {
	big := bulkCommand("ECHO", strings.Repeat("x", 100_000))
	r := newCommandReader(&chunkConn{chunks: []string{big[:1000], big[1000:], "PING\r\n"}}, 1<<20)
	cmds, err := r.read(false)
	if err != nil || len(cmds) != 1 || len(cmds[0].Args[1]) != 100_000 {
		t.Fatalf("the large command: %d commands, %v", len(cmds), err)
	}
	if got := cap(r.buf); got > len(big)+readBufSize {
		t.Errorf("a %d-byte command grew the buffer to %d bytes", len(big), got)
	}
	if cmds, err = r.read(false); err != nil || len(cmds) != 1 || string(cmds[0].Args[0]) != "PING" {
		t.Fatalf("the command after it: %v", err)
	}
	if exp, got := readBufSize, cap(r.buf); exp != got {
		t.Errorf("after the large command was served the buffer holds %d bytes, want %d", got, exp)
	}
}

// redconPanics reports whether redcon panics parsing raw.
func redconPanics(raw []byte) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	_, _ = redcon.Parse(raw)
	return false
}

// TestGuardRedconPanicsUnguarded shows why the guard exists: without it,
// crashRequest panics redcon's parser (in the server, the whole process).
func TestGuardRedconPanicsUnguarded(t *testing.T) {
	if strconv.IntSize != 64 {
		t.Skip("crashRequest overflows redcon's int only where int has 64 bits")
	}
	if !redconPanics([]byte(crashRequest)) {
		t.Error("redcon no longer panics on the crash request; is the guard still needed?")
	}
	s := guardScanner{limit: testLimit}
	if n, _ := s.scan([]byte(crashRequest)); redconPanics([]byte(crashRequest)[:n]) {
		t.Errorf("redcon panics on the %d bytes the guard passes", n)
	}
}

// scanChunks scans data cut into pieces whose sizes cycle through cuts
// (each size%16+1), stopping at the first violation as commandReader does.
func scanChunks(limit int, data, cuts []byte) guardScanner {
	s := guardScanner{limit: limit}
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(cuts) > 0 {
			n = min(n, int(cuts[i%len(cuts)])%16+1)
		}
		if good, _ := s.scan(data[:n]); good < n {
			break
		}
		data = data[n:]
	}
	return s
}

func TestGuardScannerSplits(t *testing.T) {
	inputs := []string{
		bulkCommand("PING") + "ECHO hi\r\n" + bulkCommand("ECHO", strings.Repeat("y", 300)),
		crashRequest,
		"PING\r\n*1\r\n$-5\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nvxx",
		strings.Repeat("a", 300),
	}
	for _, in := range inputs {
		whole := scanChunks(testLimit, []byte(in), nil)
		for cut := range 16 {
			if got := scanChunks(testLimit, []byte(in), []byte{byte(cut)}); got != whole {
				t.Errorf("%q in chunks of %d: %+v, whole: %+v", in, cut+1, got, whole)
			}
		}
	}
}

func TestGuardScannerAllocs(t *testing.T) {
	pipeline := []byte(bulkCommand("SET", "lock", "token", "NX", "PX", "30000") + "PING\r\n")
	allocs := testing.AllocsPerRun(100, func() {
		s := guardScanner{limit: testLimit}
		s.scan(pipeline)
	})
	if exp, got := 0.0, allocs; exp != got {
		t.Errorf("expected %v allocations, got %v", exp, got)
	}
}

func FuzzGuardScanner(f *testing.F) {
	for _, seed := range []string{
		crashRequest,
		"*4611686018427387904\r\n",
		"PING\r\n*1\r\n$-5\r\n",
		bulkCommand("SET", "k", "v", "NX", "PX", "100") + "ECHO 'a b'\r\n",
		"*1\r\n$abc\r\n",
		"*2\r\n$1\r\na\r\n$0\r\n\r\n*1\r\n",
	} {
		f.Add([]byte(seed), []byte{0, 3, 7})
	}
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		const limit = 256 // small, so inputs reach it
		whole := scanChunks(limit, data, nil)
		if got := scanChunks(limit, data, cuts); got != whole {
			t.Fatalf("split verdict %+v, whole %+v", got, whole)
		}
		s := guardScanner{limit: limit}
		n, end := s.scan(data)
		if (n < len(data)) != (s.bad != violNone) || end > n {
			t.Fatalf("accepted %d of %d bytes, boundary at %d, verdict %d", n, len(data), end, s.bad)
		}
		if s.bad != violNone && !bytes.HasPrefix([]byte(s.reply()), []byte("-ERR Protocol error: ")) {
			t.Fatalf("reply %q", s.reply())
		}
		if redconPanics(data[:n]) {
			t.Fatalf("redcon panics on the %d bytes the guard passes", n)
		}
	})
}
