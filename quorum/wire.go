package quorum

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
)

// script is a Lua script run on every backend by its SHA1, with its source
// at hand for a backend that answers NOSCRIPT.
type script struct {
	src, sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// command is one request, encoded once and sent unchanged to every backend.
type command struct {
	wire   []byte
	script *script // set for EVALSHA: NOSCRIPT falls back to EVAL
	argc   int     // for the EVAL form: the array length
	tail   int     // for the EVAL form: where numkeys starts in wire
	key    uint32  // a hash of the first key, for fanout's send order
}

// plainCommand encodes a command of strings and integers.
func plainCommand(args ...any) *command {
	b := appendArrayHeader(nil, len(args))
	for _, a := range args {
		b = appendArg(b, a)
	}
	return &command{wire: b}
}

// scriptCommand encodes EVALSHA sha numkeys keys... args....
func scriptCommand(s *script, keys []string, args ...any) *command {
	argc := 3 + len(keys) + len(args)
	b := appendArrayHeader(make([]byte, 0, wireSize(s.sha, keys, args)), argc)
	b = appendArg(b, "EVALSHA")
	b = appendArg(b, s.sha)
	tail := len(b)
	b = appendArg(b, len(keys))
	for _, k := range keys {
		b = appendArg(b, k)
	}
	for _, a := range args {
		b = appendArg(b, a)
	}
	c := &command{wire: b, script: s, argc: argc, tail: tail}
	if len(keys) > 0 {
		h := fnv.New32a()
		h.Write([]byte(keys[0]))
		c.key = h.Sum32()
	}
	return c
}

// eval is the command as EVAL with the script's source, for a backend that
// does not have the script cached.
func (c *command) eval() []byte {
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
		if s, ok := a.(string); ok {
			size += len(s)
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
		// Every caller is in this package; anything else is a programming
		// mistake that no backend should see.
		panic(fmt.Sprintf("quorum: cannot encode %T", a))
	}
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// reply is one RESP2 reply from a backend. Error replies never reach the
// engine as replies: they become a redisError.
type reply struct {
	kind  byte // '+' status, ':' integer, '$' bulk string, '*' array, 0 nil
	int   int64
	str   string
	array []reply
}

// redisError is a backend's error reply.
type redisError string

func (e redisError) Error() string { return string(e) }

var errUnexpectedReply = errors.New("quorum: unexpected reply from backend")

// integer is an integer reply's value.
func (r reply) integer() (int64, error) {
	if r.kind != ':' {
		return 0, errUnexpectedReply
	}
	return r.int, nil
}

// bulk is a bulk string reply's value.
func (r reply) bulk() (string, error) {
	if r.kind != '$' {
		return "", errUnexpectedReply
	}
	return r.str, nil
}

// status is a status reply's text, such as PONG.
func (r reply) status() (string, error) {
	if r.kind != '+' {
		return "", errUnexpectedReply
	}
	return r.str, nil
}

// elems is an array reply's elements.
func (r reply) elems() ([]reply, error) {
	if r.kind != '*' {
		return nil, errUnexpectedReply
	}
	return r.array, nil
}

// isNil reports whether r is a nil bulk string or array.
func (r reply) isNil() bool { return r.kind == 0 }

// maxReplyDepth and maxBulk bound what a misbehaving backend can make the
// reader allocate; our scripts answer at most a two-element array, and the
// deepest reply read is COMMAND INFO's, whose key specs nest six deep.
const (
	maxReplyDepth = 8
	maxBulk       = 512 << 20
	maxArray      = 1 << 20
)

// readReply reads one reply. An error reply comes back as kind '-' with its
// text in str; err is set only when the stream itself is broken.
func readReply(br *bufio.Reader) (reply, error) { return readReplyDepth(br, 0) }

func readReplyDepth(br *bufio.Reader, depth int) (reply, error) {
	line, err := readLine(br)
	if err != nil {
		return reply{}, err
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', '-':
		return reply{kind: kind, str: string(rest)}, nil
	case ':':
		n, err := strconv.ParseInt(string(rest), 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("quorum: bad integer reply %q", line)
		}
		return reply{kind: ':', int: n}, nil
	case '$':
		n, err := strconv.Atoi(string(rest))
		switch {
		case err != nil || n < -1 || n > maxBulk:
			return reply{}, fmt.Errorf("quorum: bad bulk length %q", line)
		case n == -1:
			return reply{}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return reply{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return reply{}, errors.New("quorum: bulk reply without CRLF")
		}
		return reply{kind: '$', str: string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(string(rest))
		switch {
		case err != nil || n < -1 || n > maxArray || depth >= maxReplyDepth:
			return reply{}, fmt.Errorf("quorum: bad array reply %q", line)
		case n == -1:
			return reply{}, nil
		}
		arr := make([]reply, n)
		for i := range arr {
			if arr[i], err = readReplyDepth(br, depth+1); err != nil {
				return reply{}, err
			}
		}
		return reply{kind: '*', array: arr}, nil
	}
	return reply{}, fmt.Errorf("quorum: bad reply type %q", kind)
}

// readLine returns one CRLF-terminated line without its CRLF.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("quorum: reply line too long")
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("quorum: bad reply line %q", line)
	}
	return line[:len(line)-2], nil
}
