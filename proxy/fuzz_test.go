package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/internal/luaform"
	"github.com/tidwall/redcon"
)

// Native fuzz targets (go test -fuzz) for the input guard, the command
// parsers and the whole server. `make fuzz` runs each for a while; the
// inputs the fuzzer found are kept in testdata/fuzz and replayed by every
// go test.

// chunker yields pseudo-random chunk sizes in [1, max] from a seed
// (splitmix64), so that one fuzz input also decides how it is split.
type chunker struct{ state uint64 }

func (c *chunker) next(max int) int {
	c.state += 0x9e3779b97f4a7c15
	z := c.state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return 1 + int(z%uint64(max))
}

// guardSeeds are requests, good and bad, that the guard must frame.
var guardSeeds = []string{
	"*1\r\n$4\r\nPING\r\n",
	"PING\r\n",
	"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n",
	"*6\r\n$3\r\nSET\r\n$4\r\nk\x00\xff\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n*1\r\n$4\r\nPING\r\n",
	"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
	crashRequest,
	"*4611686018427387904\r\n",
	"*9223372036854775807\r\n",
	"*-5\r\n",
	"*0\r\n",
	"*1\r\n$-2\r\n",
	"*1\r\n$99999999999\r\n",
	"*1\n$4\r\nPING\r\n",
	"*1\r\n$4\r\nPINGPING\r\n",
	"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n",
	"*1\r\n+PING\r\n",
	"+PING\r\n",
	"*00000000000000000000001\r\n$4\r\nPING\r\n",
	"SET \"a b\" 'c\r\n",
	"\r\n\r\n\n",
	strings.Repeat("a", 300),
}

// FuzzGuard feeds bytes through the guard's scanner, whole and split at
// random, and through a commandReader. Invariants: no panic; the verdict
// does not depend on how the bytes are split; buffering stays within the
// limit; the reader hands out the commands redcon's own reader parses from
// the bytes the scanner accepts, then the scanner's error reply when it
// refused some; and a pipeline of well-formed commands that each fit the
// limit passes unchanged however it is split.
func FuzzGuard(f *testing.F) {
	for i, s := range guardSeeds {
		f.Add([]byte(s), uint16(64), uint64(i))
		f.Add([]byte(s), uint16(4096), uint64(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit16 uint16, seed uint64) {
		limit := int(limit16) + 1

		whole := guardScanner{limit: limit}
		good, end := whole.scan(data)
		if good > len(data) || end > good || (good < len(data)) != (whole.bad != violNone) {
			t.Fatalf("scan: good %d, end %d of %d bytes, violation %d", good, end, len(data), whole.bad)
		}

		// The same bytes in random chunks: the same verdict, the same last
		// command boundary, and bounded state after every chunk.
		split := guardScanner{limit: limit}
		ch := chunker{seed}
		sgood, send := 0, 0
		for off := 0; off < len(data); {
			n := min(ch.next(32), len(data)-off)
			g, e := split.scan(data[off : off+n])
			sgood += g
			if e > 0 {
				send = off + e
			}
			if split.bad == violNone && (split.size > limit || split.line > min(guardMaxInline, limit)) {
				t.Fatalf("after %d bytes the scanner holds a %d-byte command, a %d-byte inline line (limit %d)", off+g, split.size, split.line, limit)
			}
			if g < n {
				break
			}
			off += n
		}
		if sgood != good || send != end || split.bad != whole.bad {
			t.Fatalf("split scan: good %d end %d violation %d; whole: good %d end %d violation %d", sgood, send, split.bad, good, end, whole.bad)
		}

		// Through a commandReader: the commands in what the scanner
		// accepts, then the reply when it refused the rest.
		cmds, reply := readGuarded(t, data, limit, seed)
		ref, clean := parseAll(t, data[:good])
		if len(cmds) < len(ref) || !slices.EqualFunc(cmds[:len(ref)], ref, slices.Equal) || clean && len(cmds) != len(ref) {
			t.Fatalf("the reader handed out %q; redcon's reader parses %q from the %d bytes accepted", cmds, ref, good)
		}
		switch {
		case whole.bad == violNone && reply != "" && reply != unbalancedQuotes:
			t.Fatalf("nothing refused, yet the reader replied %q", reply)
		case whole.bad != violNone && reply != whole.reply() && reply != unbalancedQuotes:
			t.Fatalf("refused at byte %d (%q), yet the reader replied %q", good, whole.reply(), reply)
		}

		// Well-formed commands built from data pass unchanged.
		req, fits := wellFormed(data, seed, limit)
		cmds, reply = readGuarded(t, req, limit, seed>>1)
		if ref, _ := parseAll(t, req); fits && (!slices.EqualFunc(cmds, ref, slices.Equal) || reply != "") {
			t.Fatalf("well-formed commands within the limit %d: handed out %d of %d, replied %q\n%q", limit, len(cmds), len(ref), reply, req)
		}
		// Beyond the limit: refused as too big, or, for a single argument
		// longer than the limit, as Redis refuses a bulk beyond its maximum.
		if !fits && !strings.HasPrefix(reply, "-ERR Protocol error: request exceeds max_request_bytes") &&
			reply != "-ERR Protocol error: invalid bulk length\r\n" {
			t.Fatalf("a well-formed command beyond the limit %d: replied %q", limit, reply)
		}
	})
}

// unbalancedQuotes is redcon's reply to an inline command it cannot split.
const unbalancedQuotes = "-ERR Protocol error: unbalanced quotes in request\r\n"

// wellFormed encodes data, cut into arguments of pseudo-random sizes, as
// RESP commands of one to four arguments; fits says whether every command
// is within limit bytes.
func wellFormed(data []byte, seed uint64, limit int) ([]byte, bool) {
	var out []byte
	fits := true
	ch := chunker{seed}
	for len(data) > 0 {
		args := ch.next(4)
		cmd := fmt.Appendf(nil, "*%d\r\n", args)
		for range args {
			n := min(ch.next(20)-1, len(data))
			cmd = fmt.Appendf(cmd, "$%d\r\n%s\r\n", n, data[:n])
			data = data[n:]
		}
		fits = fits && len(cmd) <= limit
		out = append(out, cmd...)
	}
	return out, fits
}

// fuzzConn is a net.Conn that reads data in pseudo-random chunks.
type fuzzConn struct {
	net.Conn
	data []byte
	ch   chunker
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data[:min(len(c.data), c.ch.next(48))])
	c.data = c.data[n:]
	return n, nil
}

// readGuarded reads data through a commandReader in chunks of pseudo-random
// sizes and returns the arguments of the commands it handed out and the
// reply to the request it refused ("" when none). Its buffer must stay
// within twice the limit.
func readGuarded(t *testing.T, data []byte, limit int, seed uint64) (cmds [][]string, reply string) {
	r := newCommandReader(&fuzzConn{data: data, ch: chunker{seed}}, limit)
	for range len(data) + 10 {
		batch, err := r.read(false)
		for _, cmd := range batch {
			cmds = append(cmds, words(cmd.Args))
		}
		if bound := 2 * max(limit, readBufSize); cap(r.buf) > bound {
			t.Fatalf("the reader holds a %d-byte buffer, limit %d", cap(r.buf), limit)
		}
		var refused *protocolError
		switch {
		case errors.As(err, &refused):
			return cmds, refused.reply
		case errors.Is(err, io.EOF):
			return cmds, ""
		case err != nil:
			t.Fatal(err)
		}
	}
	t.Fatalf("the reader handed out %d commands without reaching the end of %d bytes", len(cmds), len(data))
	return nil, ""
}

func words(args [][]byte) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}

// parseAll parses data with the reader of redcon's server; it must not
// panic, and must reach the end of the data. It returns the arguments of
// the commands, and whether it parsed all of data without an error (on
// one, such as unbalanced quotes, it drops what it read with the bad line).
func parseAll(t *testing.T, data []byte) (cmds [][]string, clean bool) {
	rd := redcon.NewReader(bytes.NewReader(data))
	for range len(data) + 1 {
		batch, err := rd.ReadCommands()
		for _, cmd := range batch {
			cmds = append(cmds, words(cmd.Args))
		}
		if err != nil {
			return cmds, errors.Is(err, io.EOF)
		}
	}
	t.Fatalf("redcon's reader does not reach the end of %q", data)
	return nil, false
}

// FuzzParsers feeds argument vectors (the first byte of the input
// separates the arguments) to the command parsers. Invariants: no panic;
// parseInt accepts exactly the canonical decimals strconv formats, with
// strconv's value; a parsed TTL is positive and what the number says; a
// parsed SET is a lock shape with the request's key and token, and option
// names are case-insensitive; EVAL's numkeys splits the rest exactly; a
// script's form ignores leading whitespace and comments.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{
		" SET k v NX PX 30000",
		" set k v px 30000 nx",
		" SET k v EX 9223372036854775807 NX",
		" SET k v NX PX 9223372036854775807",
		" SET k v IFEQ v PX 1000",
		" SET k v NX PX -0",
		" SET k v NX KEEPTTL GET XX",
		" SET  0 nX nX",
		"|SET|k\x00\xff|tok en|NX|PX|01",
		" PEXPIRE k 100 NX",
		" EXPIRE k 9223372036854776",
		" EVAL x 2 a b c",
		" EVAL x -1",
		" HELLO 3 AUTH default secret SETNAME x",
		" HELLO 2 SETNAME",
		" 9223372036854775808 -9223372036854775808 +1 - 0 00",
		"\x00" + compareAndDeleteScript,
		"\x00if redis.call('GET', KEYS[1]) == ARGV[1] then\n\treturn redis.call('DEL', KEYS[1])\nelse\n\treturn 0\nend\n",
		"\x00local v = redis.call(\"get\", KEYS[1]) --[[ comment ]] if v == ARGV[1] then return redis.call('pexpire', KEYS[1], tonumber(ARGV[2])) end return 0",
		"\x00[[unterminated \"string '\\",
		"\x00--[==[ long ]==] return (((((1)))))",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		args := bytes.Split(data[1:], data[:1])
		for _, a := range args {
			checkParseInt(t, a)
			checkParseTTL(t, a)
		}
		checkParseSet(t, args)
		if len(args) >= 2 {
			eval := append([][]byte{[]byte("eval")}, args...)
			if req, err := parseEval(eval); err == nil {
				n, _ := parseInt(args[1])
				if int64(len(req.keys)) != n || len(req.keys)+len(req.args) != len(args)-2 {
					t.Fatalf("parseEval(%q): %d keys and %d args", args, len(req.keys), len(req.args))
				}
			}
			pexpire := append([][]byte{[]byte("pexpire")}, args...)
			n, _ := parseInt(args[1])
			if ttl, err := parseExpire(pexpire, false); err == nil && (ttl < 0 || (ttl == 0) != (n <= 0) || len(args) != 2) {
				t.Fatalf("parseExpire(%q) = %s", args, ttl)
			}
		}
		if req, err := parseHello(append([][]byte{[]byte("hello")}, args...)); err == nil && req.proto != 2 && req.proto != 3 && req.proto != 0 {
			t.Fatalf("parseHello(%q): protocol %d", args, req.proto)
		}
		checkForm(t, string(data[1:]))
	})
}

const compareAndDeleteScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

func checkParseInt(t *testing.T, a []byte) {
	v, ok := parseInt(a)
	ref, err := strconv.ParseInt(string(a), 10, 64)
	canonical := err == nil && strconv.FormatInt(ref, 10) == string(a)
	if ok != canonical || (ok && v != ref) {
		t.Fatalf("parseInt(%q) = %d, %v; strconv: %d, %v (canonical %v)", a, v, ok, ref, err, canonical)
	}
}

func checkParseTTL(t *testing.T, a []byte) {
	n, isInt := parseInt(a)
	for _, seconds := range []bool{false, true} {
		ttl, err := parseTTL(a, seconds, "set")
		unit := int64(1)
		if seconds {
			unit = 1000
		}
		switch {
		case !isInt:
			if err != errNotInteger {
				t.Fatalf("parseTTL(%q, %v) = %s, %v; want the not-an-integer error", a, seconds, ttl, err)
			}
		case n <= 0 || n > math.MaxInt64/unit:
			if err == nil || err.Error() != "ERR invalid expire time in 'set' command" {
				t.Fatalf("parseTTL(%q, %v) = %s, %v; want the invalid expire time error", a, seconds, ttl, err)
			}
		case n*unit > math.MaxInt64/int64(time.Millisecond):
			if _, ok := err.(*ttlTooLong); !ok {
				t.Fatalf("parseTTL(%q, %v) = %d, %v; want it too long", a, seconds, ttl, err)
			}
		case err != nil:
			t.Fatalf("parseTTL(%q, %v): %v", a, seconds, err)
		case ttl != time.Duration(n*unit)*time.Millisecond:
			t.Fatalf("parseTTL(%q, %v) = %s", a, seconds, ttl)
		}
	}
}

func checkParseSet(t *testing.T, args [][]byte) {
	set := append([][]byte{[]byte("set")}, args...)
	req, err := parseSet(set)
	if err == nil {
		// SET key token NX (session-bound, options repeatable as Redis
		// allows) has no TTL; every shape with EX or PX has one.
		session := true
		for _, a := range set[3:] {
			if s := strings.ToLower(string(a)); s == "ex" || s == "px" {
				session = false
			}
		}
		if req.key != string(set[1]) || req.token != string(set[2]) || (session != (req.ttl == 0)) || (!session && len(set) < 6) || req.ttl < 0 {
			t.Fatalf("parseSet(%q) = %+v", set, req)
		}
		var cond string
		for _, a := range set[3:] {
			if s := strings.ToLower(string(a)); s == "nx" || s == "ifeq" {
				cond = s
			}
		}
		if cond == "" || req.extend != (cond == "ifeq") {
			t.Fatalf("parseSet(%q) = %+v, which is not a lock shape", set, req)
		}
	}
	// Option names in another case mean the same, unless a compared value
	// (IFEQ's) changes with them.
	upper := make([][]byte, len(set))
	copy(upper, set)
	for i := 3; i < len(set); i++ {
		switch strings.ToLower(string(set[i])) {
		case "ifeq", "ifne", "ifdeq", "ifdne":
			return
		}
		upper[i] = bytes.ToUpper(set[i])
	}
	req2, err2 := parseSet(upper)
	if req != req2 || fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("parseSet(%q) = %+v, %v; in upper case %+v, %v", set, req, err, req2, err2)
	}
}

func checkForm(t *testing.T, src string) {
	if len(src) > maxRecognisedScript {
		return
	}
	form, err := luaform.Form([]byte(src))
	for _, prefix := range []string{" \t\r\n", "--[[ a comment ]]\n", "-- a comment\r"} {
		other, otherErr := luaform.Form([]byte(prefix + src))
		if other != form || (err == nil) != (otherErr == nil) {
			t.Fatalf("%q changed the form of %q: %q (%v), then %q (%v)", prefix, src, form, err, other, otherErr)
		}
	}
	if k := classify([]byte(src)); k != nil && (err != nil || recognised[form] != k) {
		t.Fatalf("classify(%q) = %s, not the kind of its form", src, k.name)
	}
}

// FuzzServer sends raw bytes to a Server in front of a fake Locker, then
// closes its side. Invariants: the server neither panics nor hangs, every
// byte it answers is a complete RESP2 or RESP3 reply, and a new
// connection is served afterwards.
func FuzzServer(f *testing.F) {
	for _, s := range guardSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"*3\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nTIME\r\n",
		"HELLO 3\r\nCLIENT GETNAME\r\nCONFIG GET x\r\nCOMMAND DOCS\r\nINFO\r\nSCRIPT EXISTS a b\r\n",
		"SET k v NX PX 1000\r\nSET k v IFEQ v PX 1000\r\nPTTL k\r\nTTL k\r\nEXISTS k j\r\nDEL k\r\nDELEX k IFEQ v\r\nDELIFEQ k v\r\n",
		"SETNX k v\r\nPEXPIRE k 100\r\nEXPIRE k 1\r\nEVAL x 0\r\nEVALSHA 0 0\r\nSELECT 1\r\nECHO x\r\nRESET\r\nQUIT\r\nPING\r\n",
		"*4\r\n$4\r\nEVAL\r\n$" + strconv.Itoa(len(compareAndDeleteScript)) + "\r\n" + compareAndDeleteScript + "\r\n$1\r\n1\r\n$1\r\nk\r\n",
		"AUTH x\r\nHELLO 3 AUTH default x\r\nCLIENT SETNAME a\r\nCLIENT SETINFO LIB-NAME x\r\nCLIENT ID\r\nCLIENT INFO\r\n",
		"SET k v NX PX 1000\r\nWATCH k\r\nGET k\r\nMULTI\r\nDEL k\r\nEXEC\r\nWATCH k j\r\nMULTI\r\nMULTI\r\nPEXPIRE k 10\r\nNOSUCH\r\nEXEC\r\nDISCARD\r\nUNWATCH\r\n",
		"HELLO 3\r\nSET k v NX PX 1000\r\nWATCH k\r\nGET k\r\nMULTI\r\nSET k v PX 100\r\nEXEC\r\nMULTI\r\nEXISTS k\r\nEXEC\r\nEXEC\r\n",
	} {
		f.Add([]byte(s))
	}
	addr := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			conn.Write(data)
			conn.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(conn)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			// A reset after the server closed with input unread is fine.
			var op *net.OpError
			if !errors.As(err, &op) {
				t.Fatal(err)
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no end of the answer to %q within 10s (got %q)", data, out)
		}
		if err := checkRESP(out); err != nil {
			t.Fatalf("the answer to %q is not RESP: %v\n%q", data, err, out)
		}
		ping, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ping.Close()
		ping.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(ping, "PING\r\n")
		if line, err := bufio.NewReader(ping).ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("PING after %q: %q, %v", data, line, err)
		}
	})
}

// fuzzServer serves a Server in front of a fakeLocker on 127.0.0.1 for
// the whole fuzz run, with a small request limit so that the fuzzer
// reaches it.
func fuzzServer(f *testing.F) string {
	fake := &fakeLocker{maxTTL: time.Minute}
	srv, err := newWithFake(fake, Config{MaxRequestBytes: 4096, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			f.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			f.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// checkRESP reports whether b is a sequence of complete RESP2/RESP3
// replies, each well formed.
func checkRESP(b []byte) error {
	for len(b) > 0 {
		n, err := respValue(b, 0)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// respValue returns the length of the reply at the start of b.
func respValue(b []byte, depth int) (int, error) {
	if depth > 16 {
		return 0, errors.New("nested too deep")
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return 0, fmt.Errorf("no complete line in %q", b)
	}
	line, n := string(b[1:i]), i+2
	if strings.ContainsAny(line, "\r\n") {
		return 0, fmt.Errorf("newline within %q", line)
	}
	switch b[0] {
	case '+', '-':
		return n, nil
	case ':', '(':
		if digits := strings.TrimPrefix(line, "-"); digits == "" || strings.Trim(digits, "0123456789") != "" {
			return 0, fmt.Errorf("bad integer %q", line)
		}
		return n, nil
	case ',':
		if _, err := strconv.ParseFloat(line, 64); err != nil && line != "inf" && line != "-inf" && line != "nan" {
			return 0, fmt.Errorf("bad double %q", line)
		}
		return n, nil
	case '#':
		if line != "t" && line != "f" {
			return 0, fmt.Errorf("bad boolean %q", line)
		}
		return n, nil
	case '_':
		if line != "" {
			return 0, fmt.Errorf("bad null %q", line)
		}
		return n, nil
	}
	count, err := strconv.Atoi(line)
	if err != nil || count < -1 || (count == -1 && b[0] != '$' && b[0] != '*') {
		return 0, fmt.Errorf("bad length %q after %q", line, b[0])
	}
	switch b[0] {
	case '$', '=', '!':
		if count == -1 {
			return n, nil
		}
		if len(b) < n+count+2 || string(b[n+count:n+count+2]) != "\r\n" {
			return 0, fmt.Errorf("bulk of %d bytes not complete in %q", count, b[n:])
		}
		return n + count + 2, nil
	case '%', '|':
		count *= 2
	case '*', '~', '>':
	default:
		return 0, fmt.Errorf("unknown type byte %q", b[0])
	}
	for range max(count, 0) {
		m, err := respValue(b[n:], depth+1)
		if err != nil {
			return 0, err
		}
		n += m
	}
	return n, nil
}
