package backend

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Script is a Lua script run by its SHA1, with its source at hand for a
// server that answers NOSCRIPT. What it does is the caller's business.
type Script struct {
	src, sha string
	// id numbers it among every Script made, for a connection's record of
	// those it has loaded (pipeConn.loaded).
	id int
	// load is SCRIPT LOAD with its source, encoded once.
	load []byte
}

// scripts counts the Scripts made, for their ids.
var scripts atomic.Int64

// NewScript returns the script whose source is src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:]), id: int(scripts.Add(1) - 1),
		load: encode([]any{"SCRIPT", "LOAD", src}).wire}
}

// Source is the script's Lua source.
func (s *Script) Source() string { return s.src }

// Command is one request, encoded once and sent unchanged to any number
// of servers. It is never changed once built, so it is safe for
// concurrent use.
type Command struct {
	wire   []byte
	script *Script // set for EVALSHA: NOSCRIPT falls back to EVAL
	argc   int     // for the EVAL form: the array length
	tail   int     // for the EVAL form: where numkeys starts in wire
	key    uint32  // a hash of the first key
	blank  []byte  // a Blank argument's bytes within wire
}

// Blank is an argument of so many bytes that are written after the
// command is encoded (Command.Blank) and before it is sent: a value that
// must be taken at the moment of sending, under a lock that encoding the
// whole command would hold too long.
type Blank int

// Blank is the bytes of the command's Blank argument, zeros until written;
// nil when it has none.
func (c *Command) Blank() []byte { return c.blank }

// KeyCommand encodes verb key args...: a command on key, which keeps its
// place in key's send order (KeyHash). Args are strings and integers (int,
// int64); any other type is a programming mistake, and panics.
func KeyCommand(verb, key string, args ...any) *Command {
	c := encode(append([]any{verb, key}, args...))
	c.key = HashKey(key)
	return c
}

// KeylessCommand encodes a command on no key. Its verb must be one of
// keylessVerbs: any other is a programming mistake, and panics, so that a
// command that may change a key cannot be built without it and slip past
// the key's send order, which a top-up relies on to stop in time.
func KeylessCommand(verb string, args ...any) *Command {
	if !keylessVerbs[verb] {
		panic("backend: " + verb + " is not a keyless command: build it with KeyCommand or ScriptCommand")
	}
	return encode(append([]any{verb}, args...))
}

// keylessVerbs are the commands of no key that the engine sends.
var keylessVerbs = map[string]bool{
	"AUTH": true, "CLIENT": true, "COMMAND": true, "HELLO": true, "INFO": true, "PING": true,
	"PUBLISH": true, "SCAN": true, "SCRIPT": true, "SELECT": true, "TIME": true, "WAIT": true,
	"SUBSCRIBE": true, "PSUBSCRIBE": true, "UNSUBSCRIBE": true, "PUNSUBSCRIBE": true,
}

func encode(args []any) *Command {
	b := appendArrayHeader(nil, len(args))
	for _, a := range args {
		b = appendArg(b, a)
	}
	return &Command{wire: b}
}

// ScriptCommand encodes EVALSHA sha numkeys keys... args...; args are
// strings and integers, as for KeyCommand. A server that answers NOSCRIPT
// is sent the same command once more as EVAL, with the script's source.
func ScriptCommand(s *Script, keys []string, args ...any) *Command {
	argc := 3 + len(keys) + len(args)
	b := appendArrayHeader(make([]byte, 0, wireSize(s.sha, keys, args)), argc)
	b = appendArg(b, "EVALSHA")
	b = appendBulk(b, s.sha)
	tail := len(b)
	b = appendArg(b, len(keys))
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	blank, blankLen := 0, 0
	for _, a := range args {
		if n, ok := a.(Blank); ok {
			b = append(b, '$')
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, '\r', '\n')
			blank, blankLen = len(b), int(n)
			b = append(b, make([]byte, n)...)
			b = append(b, '\r', '\n')
			continue
		}
		b = appendArg(b, a)
	}
	c := &Command{wire: b, script: s, argc: argc, tail: tail}
	if blankLen > 0 {
		c.blank = b[blank : blank+blankLen : blank+blankLen]
	}
	if len(keys) > 0 {
		c.key = HashKey(keys[0])
	}
	return c
}

// HashKey is the hash KeyHash gives a command whose first key is key.
func HashKey(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

// KeyHash is a hash of a command's first key, for a caller that keeps the
// commands on one key in order; it is 0 for a command of no keys.
func (c *Command) KeyHash() uint32 { return c.key }

// eval is the command as EVAL with the script's source, for a server that
// does not have the script cached.
func (c *Command) eval() []byte {
	b := appendArrayHeader(nil, c.argc)
	b = appendArg(b, "EVAL")
	b = appendArg(b, c.script.src)
	return append(b, c.wire[c.tail:]...)
}

// wireSize is enough room for a script command, so that encoding it takes
// one allocation: each argument costs its length and at most 16 bytes of
// framing ("$" length CRLF ... CRLF); an integer at most 20 digits.
func wireSize(sha string, keys []string, args []any) int {
	size := 16 + 16 + len("EVALSHA") + 16 + len(sha) + 16 + 20
	for _, k := range keys {
		size += 16 + len(k)
	}
	for _, a := range args {
		size += 16 + 20
		switch v := a.(type) {
		case string:
			size += len(v)
		case Blank:
			size += int(v)
		}
	}
	return size
}

func appendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendArg(b []byte, a any) []byte {
	var s string
	switch v := a.(type) {
	case string:
		s = v
	case int:
		s = strconv.Itoa(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	default:
		// Every caller is lockproxy's own code; anything else is a
		// programming mistake that no server should see.
		panic(fmt.Sprintf("backend: cannot encode %T", a))
	}
	return appendBulk(b, s)
}

// appendBulk appends s as a bulk string. The keys and the SHA1 of a
// script command come here directly: boxed into an any for appendArg, each
// would cost an allocation, one per key of a batch.
func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// Reply is one RESP2 reply from a server: a status, an integer, a bulk
// string, an array of replies, or nil. Its accessors say which. Error
// replies never reach a caller as replies: they come back as errors.
type Reply struct {
	kind  byte // '+' status, ':' integer, '$' bulk string, '*' array, 0 nil; '-' error, within this package
	int   int64
	str   string
	array []Reply
}

// serverError is a server's error reply.
type serverError string

func (e serverError) Error() string { return string(e) }

var errUnexpectedReply = errors.New("backend: unexpected reply")

// protocolError is a stream that is not RESP: what a server that is not
// Redis sends (dial.go names it when a greeting meets one).
type protocolError string

func (e protocolError) Error() string { return string(e) }

// Integer is an integer reply's value; any other reply is an error.
func (r Reply) Integer() (int64, error) {
	if r.kind != ':' {
		return 0, errUnexpectedReply
	}
	return r.int, nil
}

// IsInteger reports whether r is an integer reply.
func (r Reply) IsInteger() bool { return r.kind == ':' }

// Bulk is a bulk string reply's value; any other reply is an error.
func (r Reply) Bulk() (string, error) {
	if r.kind != '$' {
		return "", errUnexpectedReply
	}
	return r.str, nil
}

// Status is a status reply's text, such as PONG; any other reply is an
// error.
func (r Reply) Status() (string, error) {
	if r.kind != '+' {
		return "", errUnexpectedReply
	}
	return r.str, nil
}

// Array is an array reply's elements; any other reply is an error.
func (r Reply) Array() ([]Reply, error) {
	if r.kind != '*' {
		return nil, errUnexpectedReply
	}
	return r.array, nil
}

// Time reads a reply to TIME, the server's clock: seconds and
// microseconds since the Unix epoch, as a Duration since then, to the
// microsecond. Any other reply is an error.
func (r Reply) Time() (time.Duration, error) {
	if r.kind != '*' || len(r.array) != 2 {
		return 0, errUnexpectedReply
	}
	var parts [2]int64
	for i, e := range r.array {
		n, err := strconv.ParseInt(e.str, 10, 64)
		if e.kind != '$' || err != nil || n < 0 {
			return 0, errUnexpectedReply
		}
		parts[i] = n
	}
	if parts[1] >= 1e6 || parts[0] > math.MaxInt64/int64(time.Second)-1 {
		return 0, errUnexpectedReply
	}
	return time.Duration(parts[0])*time.Second + time.Duration(parts[1])*time.Microsecond, nil
}

// IsNil reports whether r is a nil bulk string or nil array.
func (r Reply) IsNil() bool { return r.kind == 0 }

// maxReplyDepth and maxBulk bound what a misbehaving server can make the
// reader allocate; lockproxy's scripts answer at most a two-element array,
// and the deepest reply read is COMMAND INFO's, whose key specs nest six
// deep.
const (
	maxReplyDepth = 8
	maxBulk       = 512 << 20
	maxArray      = 1 << 20
)

// readReply reads one reply. An error reply comes back as kind '-' with
// its text in str; err is set only when the stream itself is broken.
func readReply(br *bufio.Reader) (Reply, error) { return readReplyDepth(br, 0) }

func readReplyDepth(br *bufio.Reader, depth int) (Reply, error) {
	line, err := readLine(br)
	if err != nil {
		return Reply{}, err
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', '-':
		return Reply{kind: kind, str: string(rest)}, nil
	case ':':
		n, err := strconv.ParseInt(string(rest), 10, 64)
		if err != nil {
			return Reply{}, protocolError(fmt.Sprintf("backend: bad integer reply %q", line))
		}
		return Reply{kind: ':', int: n}, nil
	case '$':
		n, err := strconv.Atoi(string(rest))
		switch {
		case err != nil || n < -1 || n > maxBulk:
			return Reply{}, protocolError(fmt.Sprintf("backend: bad bulk length %q", line))
		case n == -1:
			return Reply{}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return Reply{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Reply{}, protocolError("backend: bulk reply without CRLF")
		}
		return Reply{kind: '$', str: string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(string(rest))
		switch {
		case err != nil || n < -1 || n > maxArray || depth >= maxReplyDepth:
			return Reply{}, protocolError(fmt.Sprintf("backend: bad array reply %q", line))
		case n == -1:
			return Reply{}, nil
		}
		arr := make([]Reply, n)
		for i := range arr {
			if arr[i], err = readReplyDepth(br, depth+1); err != nil {
				return Reply{}, err
			}
		}
		return Reply{kind: '*', array: arr}, nil
	}
	return Reply{}, protocolError(fmt.Sprintf("backend: bad reply type %q", kind))
}

// readLine returns one CRLF-terminated line without its CRLF.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, protocolError("backend: reply line too long")
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, protocolError(fmt.Sprintf("backend: bad reply line %q", line))
	}
	return line[:len(line)-2], nil
}
