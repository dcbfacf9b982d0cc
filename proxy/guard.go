package proxy

import (
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// The guard exists because redcon v1.6.2 trusts the lengths a client sends:
// "*1\r\n$9223372036854775807\r\n" overflows an index and panics the whole
// process, "*4611686018427387904\r\n" makes it loop for ages over the count,
// and an unfinished command grows its read buffer without limit. So every
// byte a client sends is framed here first, and redcon's parser only ever
// sees one whole command of bounded size.
//
// The guard also owns each connection's read buffer, where redcon's reader
// would: that one only grows (a 1 MB command leaves 1 MiB behind for as long
// as the connection lives, idle or not) and doubles whenever a read ends
// inside a command. commandReader reads into a buffer of readBufSize, grows
// it to fit a large command at once, as Redis does for a big argument, and
// drops it once that command has been served, as Redis shrinks the query
// buffer of an idle client.
//
// Before a connection has authenticated (when AUTH is required) it may send
// what Redis 7 lets an unauthenticated client send: commands of at most 10
// arguments of at most 16 KiB each. Redis parses each command only after the
// one before it ran, so an AUTH lifts the bounds for the very next command of
// the same write; commandReader does the same by handing out one command at
// a time while the connection is unauthenticated. (Once authenticated, it
// hands out all that a read completes: a RESET among them makes the
// connection unauthenticated only for the commands read after it.)

const (
	// guardMaxMultibulk is Redis's own limit on the number of arguments.
	guardMaxMultibulk = 1024 * 1024
	// guardMaxInline bounds an inline command line. Redis allows 64 KiB
	// (PROTO_INLINE_MAX_SIZE), but redcon's inline parser copies the rest of
	// the line at every space, so its cost grows with the square of the
	// line: a 64 KiB line of spaces took a quarter of a CPU second. Inline
	// commands are typed by people (telnet); 4 KiB is ample and costs at
	// most a few milliseconds.
	guardMaxInline = 4 * 1024
	// guardMaxDigits bounds a length line; values are capped separately, so
	// this only stops an endless run of leading zeros.
	guardMaxDigits = 20
	// guardMinBulk is the wire size of the smallest argument, "$0\r\n\r\n".
	guardMinBulk = 6
	// guardMaxLimit is the largest maxRequestBytes; it keeps s.num*10+9
	// within int on 32-bit platforms too.
	guardMaxLimit = min(1<<40, math.MaxInt/10)
	// guardUnauthArgs and guardUnauthBulk bound the commands of a connection
	// that must authenticate and has not, as Redis 7 bounds them
	// (processMultibulkBuffer: "ll > 10 && authRequired(c)", "ll > 16384").
	guardUnauthArgs = 10
	guardUnauthBulk = 16384

	// readBufSize is the read buffer of a connection between commands: a
	// larger one, grown for a large command, is dropped once it is served.
	readBufSize = 4096
	// maxBatch bounds the commands handed out at once: each costs a
	// Command and its arguments until the batch has been served.
	maxBatch = 1024
	// keptBatch is the largest batch whose slice a connection keeps.
	keptBatch = 16
)

// protocolError is a request the guard refused: the client gets reply, an
// "-ERR Protocol error: ..." worded as Redis words it, after the replies to
// the commands before it, and the connection is closed.
type protocolError struct{ reply string }

func (e *protocolError) Error() string { return strings.TrimSuffix(e.reply[1:], "\r\n") }

// commandReader reads a client's commands through the guard scanner into a
// buffer of its own (see the top of this file). Only the connection's
// goroutine uses it.
type commandReader struct {
	conn net.Conn
	scan guardScanner
	// buf[next:end] was read and not yet handed out; buf[next:scanned] of
	// it has been scanned, and is the start of a command.
	buf                []byte
	next, scanned, end int
	cmds               []redcon.Command // the batch handed out last
	fail               error            // a refused request, once the commands before it are served
	err                error            // the read error, likewise
}

func newCommandReader(conn net.Conn, maxRequestBytes int) *commandReader {
	return &commandReader{conn: conn, scan: guardScanner{limit: maxRequestBytes}}
}

// read returns the next commands, at least one, and at most maxBatch: all
// that what was read so far completes, or only the first while unauth
// (authentication is required and the connection has not authenticated).
// It blocks until one is complete. Their arguments point into the reader's
// buffer and are valid until the next call. A refused request is a
// *protocolError, returned once the commands before it have been.
func (r *commandReader) read(unauth bool) ([]redcon.Command, error) {
	clear(r.cmds) // they point into the buffer that reclaim may drop
	r.cmds = r.cmds[:0]
	r.reclaim()
	for {
		r.frame(unauth)
		switch {
		case len(r.cmds) > 0:
			return r.cmds, nil
		case r.fail != nil:
			return nil, r.fail
		case r.err != nil:
			return nil, r.err
		}
		r.fill()
	}
}

// frame scans what was read for whole commands and parses each.
func (r *commandReader) frame(unauth bool) {
	for r.fail == nil && len(r.cmds) < maxBatch && !(unauth && len(r.cmds) > 0) {
		if r.scan.state == scanStart {
			r.scan.unauth = unauth // a command's bounds are those when it begins
		}
		n, done := r.scan.next(r.buf[r.scanned:r.end])
		r.scanned += n
		if !done {
			if r.scan.bad != violNone {
				r.fail = &protocolError{r.scan.reply()}
			}
			return
		}
		raw := r.buf[r.next:r.scanned]
		r.next = r.scanned
		if blankLine(raw) {
			continue // an empty inline command, skipped as Redis skips it
		}
		cmd, err := redcon.Parse(raw)
		if err != nil {
			// Unbalanced quotes in an inline command: redcon's wording.
			r.fail = &protocolError{"-ERR " + err.Error() + "\r\n"}
			return
		}
		r.cmds = append(r.cmds, cmd)
	}
}

// blankLine reports whether raw is an inline command of spaces only, which
// redcon's parser splits into no argument at all.
func blankLine(raw []byte) bool {
	if raw[0] == '*' {
		return false
	}
	line := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
	return strings.Trim(line, " ") == ""
}

// reclaim forgets the commands handed out, and drops a buffer that a large
// command grew once nothing is left in it.
func (r *commandReader) reclaim() {
	if r.next == r.end {
		r.next, r.scanned, r.end = 0, 0, 0
		if cap(r.buf) > readBufSize {
			r.buf = nil
		}
	}
	if cap(r.cmds) > keptBatch {
		r.cmds = nil
	}
}

// push adds b, read from the connection elsewhere, after what was read. The
// buffer is never moved within: the commands handed out still point into
// it.
func (r *commandReader) push(b []byte) {
	if len(b) == 0 {
		return
	}
	if r.end+len(b) > len(r.buf) {
		buf := make([]byte, max(2*len(r.buf), r.end+len(b), readBufSize))
		copy(buf, r.buf[:r.end])
		r.buf = buf
	}
	r.end += copy(r.buf[r.end:], b)
}

// fill reads more of the command begun at buf[next:], making room for it.
func (r *commandReader) fill() {
	if r.next > 0 {
		r.end = copy(r.buf, r.buf[r.next:r.end])
		r.scanned -= r.next
		r.next = 0
	}
	if r.end == len(r.buf) {
		size := max(2*len(r.buf), readBufSize)
		if r.scan.state == scanData {
			// Room for the whole argument at once rather than doubling up
			// to it; the scanner has checked that it fits the limit.
			size = max(size, r.end+r.scan.remain+2)
		}
		buf := make([]byte, size)
		copy(buf, r.buf[:r.end])
		r.buf = buf
	}
	n, err := r.conn.Read(r.buf[r.end:])
	r.end += n
	r.err = err
}

// guardViolation is why the scanner stopped; violNone while it has not.
type guardViolation uint8

const (
	violNone guardViolation = iota
	violMultibulk
	violBulk
	violDollar
	violInline
	violRequest
	violUnauthMultibulk
	violUnauthBulk
)

// guardState is where the scanner is within a command.
type guardState uint8

const (
	scanStart   guardState = iota // before the first byte of a command
	scanInline                    // in an inline command line, up to '\n'
	scanCount                     // in the digits after '*'
	scanCountLF                   // after the count's '\r'
	scanDollar                    // where the next bulk's '$' must be
	scanLen                       // in the digits after '$'
	scanLenLF                     // after the length's '\r'
	scanData                      // in a bulk's payload
	scanDataCR                    // after a bulk's payload
	scanDataLF                    // after a bulk's trailing '\r'
)

// guardScanner frames RESP requests incrementally, so a command may be split at
// any byte across reads. It allocates nothing, and it is stricter than
// redcon: every prefix it accepts is one redcon parses without panicking,
// looping over an absurd count, or buffering more than the limit.
type guardScanner struct {
	limit   int            // max_request_bytes
	state   guardState     // where in a command the scanner is
	size    int            // bytes of the current multibulk command so far
	line    int            // bytes of the current inline line so far
	num     int            // the count or length being read
	digits  int            // digits of num read so far
	left    int            // bulks left in the command (after scanCountLF)
	remain  int            // payload bytes left in the bulk (in scanData)
	bad     guardViolation // sticky: once set, nothing more is accepted
	badByte byte           // the byte that was not '$'
	unauth  bool           // the command is bounded as an unauthenticated client's
}

// scan consumes p and returns how many of its bytes are acceptable (good)
// and where the last command among them that p completes ends (end, 0 if
// none). A good below len(p) means p[good] is the offending byte and s.bad
// says why.
func (s *guardScanner) scan(p []byte) (good, end int) {
	for good < len(p) {
		n, done := s.next(p[good:])
		good += n
		if !done {
			break
		}
		end = good
	}
	return good, end
}

// next consumes p up to the end of the first command it completes, and
// returns how many bytes it consumed and whether a command ended there.
// Otherwise n below len(p) means p[n] is the offending byte and s.bad says
// why.
func (s *guardScanner) next(p []byte) (n int, done bool) {
	if s.bad != violNone {
		return 0, false
	}
	for i := 0; i < len(p); {
		if s.state == scanData {
			// Payload is opaque: skip it whole rather than a byte at a time.
			k := min(s.remain, len(p)-i)
			s.remain -= k
			s.size += k
			i += k
			if s.remain == 0 {
				s.state = scanDataCR
			}
			continue
		}
		if !s.step(p[i]) {
			return i, false
		}
		i++
		if s.state == scanStart {
			return i, true
		}
	}
	return len(p), false
}

// step consumes one byte outside a payload and reports whether it is valid.
func (s *guardScanner) step(c byte) bool {
	switch s.state {
	case scanStart:
		if c != '*' {
			s.state, s.line = scanInline, 0
			return s.step(c)
		}
		s.state, s.size, s.num, s.digits = scanCount, 1, 0, 0
		return true
	case scanInline:
		if c == '\n' {
			s.state = scanStart
			return true
		}
		s.line++
		if s.line > min(guardMaxInline, s.limit) {
			return s.fail(violInline, c)
		}
		return true
	}

	s.size++
	if s.size > s.limit {
		return s.fail(violRequest, c)
	}
	switch s.state {
	case scanCount:
		switch {
		case '0' <= c && c <= '9':
			if !s.digit(c, guardMaxMultibulk) {
				return s.fail(violMultibulk, c)
			}
		case c == '\r' && s.num > 0: // redcon refuses a count <= 0 anyway
			s.state = scanCountLF
		default:
			return s.fail(violMultibulk, c)
		}
	case scanCountLF:
		if c != '\n' {
			return s.fail(violMultibulk, c)
		}
		if s.unauth && s.num > guardUnauthArgs {
			return s.fail(violUnauthMultibulk, c)
		}
		// Refuse now a count that cannot fit, rather than reading up to
		// the limit first.
		if s.num > (s.limit-s.size)/guardMinBulk {
			return s.fail(violRequest, c)
		}
		s.state, s.left = scanDollar, s.num
	case scanDollar:
		if c != '$' {
			return s.fail(violDollar, c)
		}
		s.state, s.num, s.digits = scanLen, 0, 0
	case scanLen:
		switch {
		case '0' <= c && c <= '9':
			if !s.digit(c, s.limit) {
				return s.fail(violBulk, c)
			}
		case c == '\r' && s.digits > 0:
			s.state = scanLenLF
		default:
			return s.fail(violBulk, c)
		}
	case scanLenLF:
		if c != '\n' {
			return s.fail(violBulk, c)
		}
		if s.unauth && s.num > guardUnauthBulk {
			return s.fail(violUnauthBulk, c)
		}
		// Fail before buffering a payload that cannot fit.
		if s.size+s.num+2 > s.limit {
			return s.fail(violRequest, c)
		}
		s.state, s.remain = scanData, s.num
		if s.num == 0 {
			s.state = scanDataCR
		}
	case scanDataCR:
		if c != '\r' {
			return s.fail(violBulk, c)
		}
		s.state = scanDataLF
	case scanDataLF:
		if c != '\n' {
			return s.fail(violBulk, c)
		}
		s.left--
		s.state = scanDollar
		if s.left == 0 {
			s.state = scanStart
		}
	}
	return true
}

// digit appends decimal digit c to s.num and reports whether the number is
// still at most ceiling and short enough. s.num <= ceiling <= guardMaxLimit
// before the multiplication, so it cannot overflow.
func (s *guardScanner) digit(c byte, ceiling int) bool {
	s.num = s.num*10 + int(c-'0')
	s.digits++
	return s.num <= ceiling && s.digits <= guardMaxDigits
}

func (s *guardScanner) fail(v guardViolation, c byte) bool {
	s.bad, s.badByte = v, c
	return false
}

// reply is the RESP error for s.bad, worded as Redis words it.
func (s *guardScanner) reply() string {
	switch s.bad {
	case violMultibulk:
		return "-ERR Protocol error: invalid multibulk length\r\n"
	case violBulk:
		return "-ERR Protocol error: invalid bulk length\r\n"
	case violDollar:
		c := s.badByte
		if c == '\r' || c == '\n' {
			c = ' ' // as Redis does, so the reply stays one line
		}
		return "-ERR Protocol error: expected '$', got '" + string([]byte{c}) + "'\r\n"
	case violInline:
		return "-ERR Protocol error: too big inline request\r\n"
	case violRequest:
		return "-ERR Protocol error: request exceeds max_request_bytes (" + strconv.Itoa(s.limit) + ")\r\n"
	case violUnauthMultibulk:
		return "-ERR Protocol error: unauthenticated multibulk length\r\n"
	case violUnauthBulk:
		return "-ERR Protocol error: unauthenticated bulk length\r\n"
	}
	return ""
}
