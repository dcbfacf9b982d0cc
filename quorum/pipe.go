package quorum

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A pipe is the engine's one connection to a backend, shared by every
// operation in flight: requests are appended to one buffer that a writer
// sends with one write, and a reader matches replies to requests in order.
// Under load a single write and read carry hundreds of lock operations;
// when idle a request costs one write and one read, like a plain client.
//
// Nothing is ever retried on a pipe: a lost reply to SET NX retried would
// read as "held elsewhere" while we hold the key. A request either gets its
// own reply or an error, exactly once; an error means its effect is unknown.
type pipe struct {
	opt     *redis.Options
	timeout time.Duration
	// hello runs once per new connection, before any request is written on
	// it: the backend's uptime must be known before its replies count.
	hello func(rw *bufio.ReadWriter) error
	// onState hears of each change between connected and not, once.
	onState func(up bool, err error)

	mu        sync.Mutex
	conn      *pipeConn  // nil while there is none
	waiting   []*pending // requests that arrived while dialing
	dialing   bool
	downUntil time.Time // after a failed dial, requests fail at once until then
	downErr   error
	up        bool // connected, as last reported to onState
	reported  bool // onState has been called at least once
	closed    bool
	// stop cancels a dial in progress when the pipe closes, so that closing
	// the engine never waits out a backend timeout.
	stop    context.CancelFunc
	done    context.Context
	running sync.WaitGroup // dialer, readers and writers
}

// completer receives the outcome of a request: its reply, or the error that
// leaves its effect unknown. It is called exactly once per pending, from the
// pipe's goroutines, and must not block.
type completer interface {
	complete(node int, r reply, err error)
}

// pending is one request on its way to one backend.
type pending struct {
	to      completer
	node    int
	cmd     *command
	retried bool // already resent as EVAL after NOSCRIPT
}

var errPipeClosed = errors.New("quorum: engine closed")

// notSent is the failure of a request that never left the proxy, so that
// the backend certainly did not run it: nothing there needs undoing.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// wasNotSent reports whether err says the request never reached the backend.
func wasNotSent(err error) bool {
	var ns notSent
	return errors.As(err, &ns)
}

func newPipe(opt *redis.Options, timeout time.Duration, hello func(*bufio.ReadWriter) error, onState func(up bool, err error)) *pipe {
	pp := &pipe{opt: opt, timeout: timeout, hello: hello, onState: onState}
	pp.done, pp.stop = context.WithCancel(context.Background())
	return pp
}

// changed records whether the backend is connected and reports whether
// that is news for onState; pipe.mu is held.
func (pp *pipe) changed(up bool) bool {
	news := !pp.reported || pp.up != up
	pp.up, pp.reported = up, true
	return news && !pp.closed
}

// state is the connection's state for Engine.Backends (up, down or idle)
// and, when it is down, the error of the last dial or connection.
func (pp *pipe) state() (State, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	switch {
	case pp.conn != nil:
		return StateUp, nil
	case pp.reported:
		return StateDown, pp.downErr
	}
	return StateIdle, nil
}

// send queues p for the backend; its completer hears back exactly once.
func (pp *pipe) send(p *pending) {
	pp.mu.Lock()
	switch {
	case pp.closed:
		pp.mu.Unlock()
		p.to.complete(p.node, reply{}, notSent{errPipeClosed})
	case pp.conn != nil:
		pp.conn.push(p)
		pp.mu.Unlock()
	case time.Now().Before(pp.downUntil):
		err := pp.downErr
		pp.mu.Unlock()
		p.to.complete(p.node, reply{}, notSent{err})
	default:
		pp.waiting = append(pp.waiting, p)
		if !pp.dialing {
			pp.dialing = true
			pp.running.Add(1)
			go pp.dial()
		}
		pp.mu.Unlock()
	}
}

// redialBackoff is how long requests fail at once after a failed dial, so
// that a dead backend costs a dial per backoff rather than one per request.
// A backend the greeting refused answers, and its greeting costs it a dozen
// commands: it is asked again only every refusalBackoff.
func (pp *pipe) redialBackoff(err error) time.Duration {
	if isRefusal(err) {
		return max(pp.timeout, refusalBackoff)
	}
	return pp.timeout
}

const refusalBackoff = time.Second

func (pp *pipe) dial() {
	defer pp.running.Done()
	nc, rw, err := pp.connect()
	pp.mu.Lock()
	pp.dialing = false
	waiting := pp.waiting
	pp.waiting = nil
	if err == nil && pp.closed {
		nc.Close()
		err = errPipeClosed
	}
	if err != nil {
		pp.downUntil, pp.downErr = time.Now().Add(pp.redialBackoff(err)), err
		news := pp.changed(false)
		pp.mu.Unlock()
		if news {
			pp.onState(false, err)
		}
		for _, p := range waiting {
			p.to.complete(p.node, reply{}, notSent{err})
		}
		return
	}
	c := &pipeConn{pipe: pp, nc: nc, rw: rw, wake: make(chan struct{}, 1), dead: make(chan struct{})}
	pp.conn, pp.downErr = c, nil
	for _, p := range waiting {
		c.push(p)
	}
	pp.running.Add(2)
	go c.writeLoop()
	go c.readLoop()
	news := pp.changed(true)
	pp.mu.Unlock()
	if news {
		pp.onState(true, nil)
	}
}

// connect dials the backend and greets it, all within one backend timeout.
func (pp *pipe) connect() (net.Conn, *bufio.ReadWriter, error) {
	ctx, cancel := context.WithTimeout(pp.done, pp.timeout)
	defer cancel()
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, pp.opt.Network, pp.opt.Addr)
	if err != nil {
		return nil, nil, err
	}
	// The greeting runs under the connection's deadline; closing the pipe
	// ends it too.
	unhook := context.AfterFunc(pp.done, func() { nc.Close() })
	defer unhook()
	if pp.opt.TLSConfig != nil {
		tc := tls.Client(nc, pp.opt.TLSConfig.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, err
		}
		nc = tc
	}
	deadline, _ := ctx.Deadline()
	nc.SetDeadline(deadline)
	rw := bufio.NewReadWriter(bufio.NewReaderSize(nc, 16<<10), bufio.NewWriter(nc))
	if err := pp.greet(rw); err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, rw, nil
}

// greet authenticates and selects the database the URL names, then runs
// hello; it writes everything before reading anything.
func (pp *pipe) greet(rw *bufio.ReadWriter) error {
	var cmds []*command
	switch {
	case pp.opt.Username != "":
		cmds = append(cmds, plainCommand("AUTH", pp.opt.Username, pp.opt.Password))
	case pp.opt.Password != "":
		cmds = append(cmds, plainCommand("AUTH", pp.opt.Password))
	}
	if pp.opt.DB != 0 {
		cmds = append(cmds, plainCommand("SELECT", pp.opt.DB))
	}
	for _, c := range cmds {
		rw.Write(c.wire)
	}
	if err := rw.Flush(); err != nil {
		return err
	}
	for _, c := range cmds {
		r, err := readReply(rw.Reader)
		if err != nil {
			return err
		}
		if r.kind == '-' {
			return redisError(strings.SplitN(string(c.wire), "\r\n", 4)[2] + ": " + r.str)
		}
	}
	return pp.hello(rw)
}

// close fails every request not yet answered and stops the connection.
func (pp *pipe) close() error {
	pp.mu.Lock()
	pp.closed = true
	c := pp.conn
	pp.mu.Unlock()
	pp.stop()
	var err error
	if c != nil {
		err = c.fail(errPipeClosed)
	}
	pp.running.Wait()
	return err
}

// pipeConn is one connection of a pipe. Its fields are guarded by pipe.mu.
type pipeConn struct {
	pipe *pipe
	nc   net.Conn
	rw   *bufio.ReadWriter

	out      []byte     // requests not yet written
	queued   int        // how many requests out holds
	unread   int        // requests written whose replies have not all come
	inflight []*pending // every request pushed and not yet answered, in order
	head     int        // inflight[head:] are the live ones
	broken   bool
	wake     chan struct{} // the writer has something to write
	dead     chan struct{} // closed when the connection broke
}

// stallLimit bounds how long a connection may owe replies without sending
// any: a backend that stops answering (SIGSTOP, a dead host behind a live
// route) is cut off, failing what is in flight, and the next request dials.
func (pp *pipe) stallLimit() time.Duration { return 2 * pp.timeout }

// push queues p; pipe.mu is held.
func (c *pipeConn) push(p *pending) {
	if c.head == len(c.inflight) {
		// Nothing was owed, so the reader may be blocked without a deadline.
		c.nc.SetReadDeadline(time.Now().Add(c.pipe.stallLimit()))
	}
	if p.retried {
		c.out = append(c.out, p.cmd.eval()...)
	} else {
		c.out = append(c.out, p.cmd.wire...)
	}
	c.inflight = append(c.inflight, p)
	c.queued++
	if c.unread == 0 {
		c.wakeWriter()
	}
}

func (c *pipeConn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *pipeConn) writeLoop() {
	defer c.pipe.running.Done()
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.dead:
			return
		}
		c.pipe.mu.Lock()
		if c.unread > 0 || c.queued == 0 {
			c.pipe.mu.Unlock()
			continue
		}
		buf, c.out = c.out, buf[:0]
		c.unread, c.queued = c.queued, 0
		c.pipe.mu.Unlock()
		c.nc.SetWriteDeadline(time.Now().Add(c.pipe.stallLimit()))
		if _, err := c.nc.Write(buf); err != nil {
			c.fail(err)
			return
		}
		// A burst can leave a large buffer behind; do not keep it forever.
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

func (c *pipeConn) readLoop() {
	defer c.pipe.running.Done()
	br := c.rw.Reader
	for {
		r, err := readReply(br)
		if err != nil {
			c.fail(err)
			return
		}
		c.pipe.mu.Lock()
		if c.broken {
			// fail has answered everything in flight, this reply's
			// request included.
			c.pipe.mu.Unlock()
			return
		}
		if c.head == len(c.inflight) {
			c.pipe.mu.Unlock()
			c.fail(errors.New("quorum: backend sent a reply nobody asked for"))
			return
		}
		p := c.inflight[c.head]
		c.inflight[c.head] = nil
		c.head++
		if c.unread--; c.unread == 0 && c.queued > 0 {
			c.wakeWriter()
		}
		if c.head == len(c.inflight) {
			c.inflight, c.head = c.inflight[:0], 0
			c.nc.SetReadDeadline(time.Time{})
		} else if br.Buffered() == 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.pipe.stallLimit()))
		}
		c.pipe.mu.Unlock()
		c.deliver(p, r)
	}
}

func (c *pipeConn) deliver(p *pending, r reply) {
	if r.kind != '-' {
		p.to.complete(p.node, r, nil)
		return
	}
	if p.cmd.script != nil && !p.retried && strings.HasPrefix(r.str, "NOSCRIPT") {
		// Not run, so safe to send again, with the source this time.
		p.retried = true
		c.pipe.send(p)
		return
	}
	p.to.complete(p.node, reply{}, redisError(r.str))
}

// fail breaks the connection: everything in flight gets err, since whether
// the backend ran it is unknown. It returns the error of closing the socket.
func (c *pipeConn) fail(err error) error {
	pp := c.pipe
	pp.mu.Lock()
	if c.broken {
		pp.mu.Unlock()
		return nil
	}
	c.broken = true
	news := false
	if pp.conn == c {
		pp.conn, pp.downErr = nil, err
		news = pp.changed(false)
	}
	owed := c.inflight[c.head:]
	// The last queued were never written: the backend cannot have run them.
	sent := len(owed) - c.queued
	c.inflight, c.head, c.out = nil, 0, nil
	close(c.dead)
	pp.mu.Unlock()
	closeErr := c.nc.Close()
	if news {
		pp.onState(false, err)
	}
	for i, p := range owed {
		if i < sent {
			p.to.complete(p.node, reply{}, err)
		} else {
			p.to.complete(p.node, reply{}, notSent{err})
		}
	}
	return closeErr
}
