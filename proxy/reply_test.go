package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// recConn records what is written to it, as redcon would send it.
type recConn struct {
	redcon.Conn // nil: calling anything not defined below panics
	ctx         any
	out         []byte
}

func (c *recConn) Context() any                { return c.ctx }
func (c *recConn) SetContext(v any)            { c.ctx = v }
func (c *recConn) WriteError(msg string)       { c.out = redcon.AppendError(c.out, msg) }
func (c *recConn) WriteString(s string)        { c.out = redcon.AppendString(c.out, s) }
func (c *recConn) WriteBulkString(s string)    { c.out = redcon.AppendBulkString(c.out, s) }
func (c *recConn) WriteInt(n int)              { c.out = redcon.AppendInt(c.out, int64(n)) }
func (c *recConn) WriteInt64(n int64)          { c.out = redcon.AppendInt(c.out, n) }
func (c *recConn) WriteArray(n int)            { c.out = redcon.AppendArray(c.out, n) }
func (c *recConn) WriteNull()                  { c.out = redcon.AppendNull(c.out) }
func (c *recConn) WriteRaw(b []byte)           { c.out = append(c.out, b...) }
func newRecConn(proto int) *recConn            { return &recConn{ctx: &connState{proto: proto}} }
func (c *recConn) String() string              { return string(c.out) }
func (c *recConn) reset()                      { c.out = c.out[:0] }
func (c *recConn) bytesEqual(want string) bool { return bytes.Equal(c.out, []byte(want)) }

func TestWriteError(t *testing.T) {
	nodes := []*quorum.NodeError{
		{Node: 0, Addr: "10.0.0.1:6379", Err: context.DeadlineExceeded},
		{Node: 1, Addr: "10.0.0.2:6379", Err: syscall.ECONNREFUSED},
		{Node: 2, Addr: "10.0.0.3:6379", Err: fmt.Errorf("dial: %w", context.DeadlineExceeded)},
		{Node: 3, Addr: "10.0.0.4:6379", Err: errors.New("MOVED 3999 10.0.0.9:6379")},
		{Node: 4, Addr: "10.0.0.5:6379", Err: &quorum.QuarantineError{Left: 30 * time.Second}},
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"arg error", errSyntax, "-ERR syntax error\r\n"},
		{"wrapped arg error", fmt.Errorf("x: %w", errNoScript), "-NOSCRIPT No matching script. Please use EVAL.\r\n"},
		{"arity", errArity("set"), "-ERR wrong number of arguments for 'set' command\r\n"},
		{"no quorum", &quorum.NoQuorumError{Counted: 0, Needed: 3, Total: 5, Nodes: nodes},
			"-NOQUORUM 0 of 5 backends count (1 answered, 2 timeout, 1 connection refused, 1 error, 1 quarantined after a restart for up to 30 s more); 3 needed\r\n"},
		{"every backend quarantined", &quorum.NoQuorumError{Counted: 0, Needed: 2, Total: 3, Nodes: []*quorum.NodeError{
			{Node: 0, Addr: "10.0.0.1:6379", Err: &quorum.QuarantineError{Left: 11200 * time.Millisecond}},
			{Node: 1, Addr: "10.0.0.2:6379", Err: &quorum.QuarantineError{Left: 5 * time.Second}},
			{Node: 2, Addr: "10.0.0.3:6379", Err: &quorum.QuarantineError{Left: 300 * time.Millisecond}},
		}}, "-NOQUORUM 0 of 3 backends count (3 answered, 3 quarantined after a restart for up to 12 s more); 2 needed\r\n"},
		{"no quorum without nodes", &quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3},
			"-NOQUORUM 1 of 3 backends answered, 2 needed\r\n"},
		{"joined no quorum", errors.Join(&quorum.NoQuorumError{Counted: 2, Needed: 3, Total: 5, Nodes: nodes[:1]}, context.DeadlineExceeded),
			"-NOQUORUM 2 of 5 backends answered, 3 needed (1 timeout)\r\n"},
		{"undecided with a quorum answering", &quorum.NoQuorumError{Counted: 2, Agreed: 1, Needed: 2, Total: 3, Nodes: nodes[:1]},
			"-NOQUORUM 2 of 3 backends answered but only 1 agreed, 2 needed (1 timeout)\r\n"},
		{"bare no quorum", quorum.ErrNoQuorum, "-NOQUORUM too few backends answered\r\n"},
		{"cancelled, not by shutdown", errors.Join(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3}, context.Canceled),
			"-NOQUORUM 1 of 3 backends answered, 2 needed\r\n"},
		{"ttl above max", &quorum.TTLError{TTL: 120 * time.Second, Max: time.Minute}, "-ERR invalid expire time: 120000 ms exceeds max_ttl 60000 ms\r\n"},
		{"ttl not positive", &quorum.TTLError{TTL: -time.Millisecond, Max: time.Minute}, "-ERR invalid expire time: -1 ms is not positive\r\n"},
		{"backend text is not forwarded", errors.New("MOVED 3999 10.0.0.9:6379"), "-ERR internal error\r\n"},
		{"not held reaching writeError", quorum.ErrNotHeld, "-ERR internal error\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			s := &Server{ctx: context.Background(), log: slog.New(slog.NewTextHandler(&logged, nil))}
			c := newRecConn(2)
			s.writeError(c, tc.err)
			if !c.bytesEqual(tc.want) {
				t.Fatalf("want %q, got %q", tc.want, c)
			}
			if strings.HasSuffix(tc.want, "internal error\r\n") && !strings.Contains(logged.String(), tc.err.Error()) {
				t.Fatalf("internal error not logged with its detail: %q", logged.String())
			}
		})
	}
}

// TestWriteErrorShuttingDown: a call cut short because Shutdown's
// deadline passed says so, rather than blaming the backends.
func TestWriteErrorShuttingDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &Server{ctx: ctx, log: slog.New(slog.DiscardHandler)}
	c := newRecConn(2)
	s.writeError(c, errors.Join(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3}, context.Canceled))
	if exp := "-NOQUORUM request cancelled: lockproxy is shutting down\r\n"; !c.bytesEqual(exp) {
		t.Fatalf("want %q, got %q", exp, c)
	}
}

func TestErrUnknownCommand(t *testing.T) {
	long := strings.Repeat("x", 200)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no args", []string{"FOO"}, "ERR unknown command 'FOO', with args beginning with: "},
		{"args", []string{"foo", "a", "b"}, "ERR unknown command 'foo', with args beginning with: 'a' 'b' "},
		{"long name", []string{long}, "ERR unknown command '" + long[:128] + "', with args beginning with: "},
		// Redis stops once 128 bytes were quoted, truncating the argument
		// that crosses the limit: 'a' (4 bytes) leaves 124 for the next.
		{"long args", []string{"foo", "a", long, "b"}, "ERR unknown command 'foo', with args beginning with: 'a' '" + long[:124] + "' "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := make([][]byte, len(tc.args))
			for i, a := range tc.args {
				args[i] = []byte(a)
			}
			if exp, got := tc.want, errUnknownCommand(args).Error(); exp != got {
				t.Fatalf("want %q, got %q", exp, got)
			}
		})
	}
}
