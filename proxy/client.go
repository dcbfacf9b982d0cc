package proxy

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/tidwall/redcon"
)

// The proxy serves each connection in its own loop, where redcon's server
// would, and keeps redcon for the rest: the Conn interface every handler is
// written against, its Command, its parser (one whole command at a time,
// framed by the guard) and its reply encoders. redcon's loop keeps every
// buffer a connection ever needed (its read buffer only grows, and it keeps
// reply buffers up to 256 KiB), writes with no deadline, so a client that
// stops reading holds its goroutine and its max_clients slot for ever, and
// runs every command of a read even after one closed the connection.

const (
	// replyFlush is how much reply may wait while a batch is served: beyond
	// it the replies so far are written, so that a client pipelining
	// commands with large replies costs at most this and one reply beyond
	// its socket buffers.
	replyFlush = 64 << 10
	// replyKeep is the largest reply buffer a connection keeps once written.
	replyKeep = 4096
	// writeChunk is the most written at once: each chunk gets the whole
	// write timeout, so that a client that reads a large reply slowly, but
	// reads, is not cut off in the middle of it.
	writeChunk = 64 << 10
)

// client is one client connection. It implements redcon.Conn for the
// handlers; only the connection's own goroutine uses it.
type client struct {
	conn         net.Conn
	addr         string
	rd           *commandReader
	idleTimeout  time.Duration // 0: none
	writeTimeout time.Duration
	replies                       // not yet written
	pipe         []redcon.Command // the commands of the batch after the one being served
	ctx          any
	closed       bool  // by Close: nothing more is served
	werr         error // the write error that ended the connection
	// push writes the connection's output from its first SUBSCRIBE on,
	// when messages may come at any time (push.go); nil before.
	push *pushWriter
}

var _ redcon.Conn = (*client)(nil)

// serveConn serves one connection until the client quits or goes away, a
// request is refused, a timeout passes or the server closes it.
// It keeps the limits of the settings it started with: a reload applies to
// the connections that come after it.
func (s *Server) serveConn(nc net.Conn) {
	set := s.settings()
	c := &client{conn: nc, addr: nc.RemoteAddr().String(), rd: newCommandReader(nc, set.cfg.MaxRequestBytes),
		idleTimeout: set.cfg.IdleTimeout, writeTimeout: set.cfg.writeTimeout()}
	s.accepted(c, set)
	err := s.serveCommands(c)
	if sub := state(c).sub; sub != nil {
		sub.dropAll()
	}
	if cs := state(c).sessions; cs != nil {
		s.sessions.closed(cs)
	}
	if t := state(c).tracker; t != nil {
		s.tracking.stop(t)
	}
	nc.Close()
	if c.push != nil {
		c.push.close()
	}
	s.disconnected(c, err)
}

// serveCommands reads a batch of commands, serves them in order, writes
// their replies, and again. It returns nil when the client quit or closed
// its side.
func (s *Server) serveCommands(c *client) error {
	for {
		switch {
		case c.idleTimeout > 0 && subscribed(c) != nil:
			// Subscribers wait for messages, not idle: Redis's timeout
			// spares them too.
			c.conn.SetReadDeadline(time.Time{})
		case c.idleTimeout > 0:
			// Once per batch: a whole command must arrive within it, so a
			// client that trickles one in is cut off as an idle one is.
			c.conn.SetReadDeadline(time.Now().Add(c.idleTimeout))
		}
		cmds, err := c.rd.read(state(c).user == nil)
		if err != nil {
			var refused *protocolError
			if errors.As(err, &refused) {
				c.out = append(c.out, refused.reply...)
				c.flush()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		c.pipe = cmds
		for len(c.pipe) > 0 && !c.closed && c.werr == nil {
			cmd := c.pipe[0]
			c.pipe = c.pipe[1:]
			s.serveRESP(c, cmd)
			if len(c.out) >= replyFlush {
				c.flush()
			}
		}
		c.pipe = nil
		if c.closed || c.werr != nil {
			// What the client sent after QUIT, or after its connection broke,
			// is not run.
			s.dropAhead(c)
			return c.werr
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// flush writes the replies so far. Each chunk of them must be taken within
// writeTimeout: a client that takes nothing for that long has stopped
// reading, and is closed (Redis's client-output-buffer-limit closes such a
// client too) rather than holding its goroutine and its max_clients slot
// for ever. The first write error is kept and returned from then on.
func (c *client) flush() error {
	if c.push != nil {
		if c.werr == nil {
			c.werr = c.push.send(c.out)
		}
		c.out = c.out[:0]
		return c.werr
	}
	for b := c.out; len(b) > 0 && c.werr == nil; {
		c.conn.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		var n int
		n, c.werr = c.conn.Write(b[:min(len(b), writeChunk)])
		b = b[n:]
	}
	if c.werr != nil {
		c.conn.Close() // so that the read side ends too
	}
	if cap(c.out) > replyKeep {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return c.werr
}

// RemoteAddr returns the client's address.
func (c *client) RemoteAddr() string { return c.addr }

// Close writes the replies so far and closes the connection; the commands
// of the batch after the one being served are not run.
func (c *client) Close() error {
	c.flush()
	c.closed = true
	if c.push != nil {
		c.push.close() // what was queued goes out first: QUIT's +OK
	}
	return c.conn.Close()
}

func (c *client) Context() any      { return c.ctx }
func (c *client) SetContext(v any)  { c.ctx = v }
func (c *client) SetReadBuffer(int) {}
func (c *client) NetConn() net.Conn { return c.conn }

// Detach is not supported: nothing in the proxy takes a connection over.
func (c *client) Detach() redcon.DetachedConn { panic("proxy: Detach is not supported") }

// ReadPipeline returns the commands of the batch after the one being
// served, and drops them.
func (c *client) ReadPipeline() []redcon.Command {
	p := c.pipe
	c.pipe = nil
	return p
}

// PeekPipeline returns the commands of the batch after the one being served.
func (c *client) PeekPipeline() []redcon.Command { return c.pipe }

// watchLimit is how much a client may send while a command of its waits:
// beyond it the proxy stops reading, and so stops watching for its close,
// until the wait ends.
const watchLimit = 64 << 10

// watchGone watches the connection while its goroutine is parked in a
// command that waits, which reads nothing meanwhile: gone is called when
// the client closes its side or the connection breaks, so that the wait
// ends at once rather than at its deadline. What the client sends
// meanwhile (its next commands) is kept for the reader. stop ends the
// watch; it must be called before the connection reads again.
func (c *client) watchGone(gone func()) (stop func()) {
	// The wait is not idleness: no deadline while it lasts.
	c.conn.SetReadDeadline(time.Time{})
	var sent []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for len(sent) < watchLimit {
			n, err := c.conn.Read(buf)
			sent = append(sent, buf[:n]...)
			var ne net.Error
			switch {
			case err == nil:
			case errors.As(err, &ne) && ne.Timeout():
				return // stop's doing
			default:
				c.rd.err = err // for the reader, once the wait is over
				gone()
				return
			}
		}
	}()
	return func() {
		c.conn.SetReadDeadline(time.Now())
		<-done
		c.conn.SetReadDeadline(time.Time{})
		c.rd.push(sent)
	}
}
