package proxy

import (
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"
)

// The guard exists because redcon v1.6.2 trusts the lengths a client sends:
// "*1\r\n$9223372036854775807\r\n" overflows an index and panics the whole
// process, "*4611686018427387904\r\n" makes it loop for ages over the count,
// and an unfinished command grows its read buffer without limit. So every
// byte a client sends is framed here first, and redcon only ever sees bytes
// that can belong to a command of bounded size.
//
// redcon also never compacts its read buffer: whenever a read leaves a
// command unfinished at the end of the buffer, the buffer doubles, and it
// shrinks only once everything read has been parsed. A client that streams
// commands without pause (valid ones, split anywhere) would grow it forever.
// So the guard ends each read at a command boundary when the chunk has one,
// and hands the unfinished rest to the next read.

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
	// guardReplyTimeout bounds the one write the guard makes, so a client that
	// stopped reading cannot pin its connection's goroutine.
	guardReplyTimeout = time.Second
)

// newGuardListener wraps ln so that every accepted connection rejects
// malformed or oversized RESP before redcon parses it. No command (header
// and arguments together) may exceed maxRequestBytes, and no inline command
// line may exceed min(64 KiB, maxRequestBytes). A violating connection gets
// one "-ERR Protocol error: ..." reply, worded as Redis words it, after the
// replies to the complete commands it sent before, and is then closed.
//
// With TLS, ln must be the TLS listener: the guard frames plaintext.
// It panics unless 1 <= maxRequestBytes <= guardMaxLimit (1 TiB on 64-bit
// platforms, 214748364 on 32-bit ones); the configuration is
// expected to have rejected such values at startup.
func newGuardListener(ln net.Listener, maxRequestBytes int) net.Listener {
	if maxRequestBytes < 1 || maxRequestBytes > guardMaxLimit {
		panic(fmt.Sprintf("proxy: max request bytes %d out of range [1, %d]", maxRequestBytes, guardMaxLimit))
	}
	return &guardListener{Listener: ln, limit: maxRequestBytes}
}

type guardListener struct {
	net.Listener
	limit int
}

// Accept returns the next connection wrapped in a *guardConn.
func (l *guardListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: conn, scan: guardScanner{limit: l.limit}}, nil
}

// guardConn is a net.Conn whose Read passes on only bytes that the scanner
// accepts. All other methods are the wrapped connection's.
type guardConn struct {
	net.Conn
	scan    guardScanner
	held    []byte // scanned bytes of an unfinished command, for the next Read
	replied bool
}

// NetConn returns the wrapped connection, as tls.Conn.NetConn does, for
// code that needs the concrete connection behind redcon.Conn.NetConn.
func (c *guardConn) NetConn() net.Conn { return c.Conn }

// Read reads from the wrapped connection. When a chunk ends inside a command
// that follows a complete one, Read returns up to the end of the complete one
// and the rest with the next call. After a violation it returns the
// bytes before the offending one, so redcon still serves the complete
// commands among them and flushes their replies; the next Read writes the
// error reply and returns io.EOF, which makes redcon close the connection.
//
// Writing from Read is safe because redcon's per-connection goroutine
// (redcon.go handle) is the only reader and, between its Flush and its next
// read, the only writer.
func (c *guardConn) Read(p []byte) (int, error) {
	if len(c.held) > 0 {
		n := copy(p, c.held)
		c.held = c.held[:copy(c.held, c.held[n:])]
		return n, nil
	}
	if c.scan.bad == violNone {
		n, err := c.Conn.Read(p)
		good, end := c.scan.scan(p[:n])
		switch {
		case good == n && (end == 0 || end == n || err != nil):
			return n, err
		case good == n:
			// Keep redcon's buffer from growing: see the top of this file.
			c.held = append(c.held[:0], p[end:n]...)
			return end, nil
		case good > 0:
			return good, nil
		}
	}
	if !c.replied {
		c.replied = true
		// Ignore errors: the connection is closed next either way.
		_ = c.Conn.SetWriteDeadline(time.Now().Add(guardReplyTimeout))
		_, _ = io.WriteString(c.Conn, c.scan.reply())
	}
	return 0, io.EOF
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
}

// scan consumes p and returns how many of its bytes are acceptable (good)
// and where the last command among them that p completes ends (end, 0 if
// none). A good below len(p) means p[good] is the offending byte and s.bad
// says why.
func (s *guardScanner) scan(p []byte) (good, end int) {
	if s.bad != violNone {
		return 0, 0
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
			return i, end
		}
		i++
		if s.state == scanStart {
			end = i
		}
	}
	return len(p), end
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
		// Refuse now a count that cannot fit, rather than letting redcon
		// rescan it on every read while the client trickles bytes.
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
	}
	return ""
}
