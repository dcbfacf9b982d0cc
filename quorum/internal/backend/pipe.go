package backend

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

// Config configures a Pipe.
type Config struct {
	// URL is the server's go-redis URL (redis://, rediss://, unix://):
	// where it is, the user and password to AUTH with, the database to
	// SELECT. Required.
	URL string
	// TLS, when set, is used for a rediss:// URL in place of go-redis's
	// default (the system's CAs, no client certificate): its CAs, client
	// certificate and minimum version. Its ServerName, when empty, is the
	// URL's host, and the URL's skip_verify=true still applies. It has no
	// effect on redis:// and unix:// URLs. Default: none.
	TLS *tls.Config
	// Timeout bounds each dial, greeting included; a connection that owes
	// replies for twice as long without sending any is cut. Required.
	Timeout time.Duration
	// Scripts are loaded (SCRIPT LOAD) on every new connection, in the
	// greeting's round trip: those that Hello runs. Any other script is
	// loaded on a connection when a request first runs it there, in the
	// same write, ahead of it; so a server holds only the scripts that its
	// clients use, whose number every script run on it pays for (Redis's
	// Lua collector walks them all; docs/cost.md). Default: none.
	Scripts []*Script
	// Commands are asked of COMMAND INFO on every new connection:
	// Greeting.Known says which the server knows. Default: none.
	Commands []string
	// Check decides, from what the greeting's first round trip learned (all
	// of Greeting but Hello), whether the greeting goes on: an error fails
	// the connection as Admit's does, before Hello is sent. Default: it
	// goes on.
	Check func(Greeting) error
	// Hello are sent on every new connection that Check let through, in a
	// round trip of their own; their replies are Greeting.Hello, for Admit.
	// Default: none.
	Hello []*Command
	// Admit decides, from what the greeting of a new connection learned,
	// whether the connection may carry requests: an error fails it, and
	// every request waiting for it, with that error. It runs before any
	// request is written on the connection. Default: every connection is.
	Admit func(Greeting) error
	// Refused reports whether a failed greeting will fail the same way
	// until someone changes the server or the configuration (an error of
	// Admit refusing a server that answered, an *AuthError, a
	// *NotRedisError), rather than a failed connection: such a server,
	// whose greeting costs it a dozen commands, is dialled again only
	// every second. Default: none is.
	Refused func(error) bool
	// OnState hears of each change between connected (up) and not, once,
	// with the error that ended the connection or failed the dial; never
	// after Close. It is called from the Pipe's goroutines and must not
	// block. Default: none.
	OnState func(up bool, err error)
}

// A Pipe is one connection to a server, shared by every request in
// flight: a reader matches replies to requests in order, and requests
// made while replies are owed are appended to one buffer that the reader
// writes with one write once the last of those replies is in. Under load
// a single write and read carry hundreds of requests; when idle a request
// costs one write, by the goroutine that made it, and one read, like a
// plain client. It dials when a request comes and finds no connection,
// and greets each new connection before any request is written on it.
//
// Nothing is ever retried on a Pipe: a write retried after its reply was
// lost may answer otherwise (SET NX would answer that the key exists,
// having set it). A request either gets its own reply or an error, exactly
// once; an error means its effect is unknown, unless WasNotSent says it
// never left. A Pipe is safe for concurrent use.
type Pipe struct {
	opt     *redis.Options
	timeout time.Duration
	cfg     Config

	mu        sync.Mutex
	conn      *pipeConn  // nil while there is none
	waiting   []*Request // requests that arrived while dialing
	dialing   bool
	downUntil time.Time // after a failed dial, requests fail at once until then
	downErr   error
	up        bool // connected, as last reported to onState
	reported  bool // onState has been called at least once
	closed    bool
	// stop cancels a dial in progress when the Pipe closes, so that Close
	// never waits out a Timeout.
	stop    context.CancelFunc
	done    context.Context
	running sync.WaitGroup // dialer and reader
}

// A Completer receives the outcome of a request: its reply, or the error
// that leaves its effect unknown. Complete is called exactly once per
// Request, with its ID, from the Pipe's goroutines (or the sender's), and
// must not block.
type Completer interface {
	Complete(id int, r Reply, err error)
}

// Request is one command on its way to one server. A caller that sends a
// command to many servers keeps one Request per server, which Send does
// not copy: it must not be changed or reused until completed.
type Request struct {
	To      Completer
	ID      int // passed back to To, to tell its requests apart
	Cmd     *Command
	retried bool // already resent as EVAL after NOSCRIPT
}

// errClosed fails the requests sent to a Pipe that is closed, or closes.
var errClosed = errors.New("backend: closed")

// notSent is the failure of a request that never left this process, so
// that the server certainly did not run it.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// WasNotSent reports whether err, a request's failure, says it never
// reached the server: the server did not run it, and nothing there needs
// undoing.
func WasNotSent(err error) bool {
	var ns notSent
	return errors.As(err, &ns)
}

// New returns a Pipe to the server cfg.URL names. It fails only on a bad
// URL: it dials nothing until the first request.
func New(cfg Config) (*Pipe, error) {
	opt, err := options(cfg.URL, cfg.TLS)
	if err != nil {
		return nil, err
	}
	pp := &Pipe{opt: opt, timeout: cfg.Timeout, cfg: cfg}
	pp.done, pp.stop = context.WithCancel(context.Background())
	return pp, nil
}

// Addr is the server's host:port, or its socket's path; never a password.
func (pp *Pipe) Addr() string { return pp.opt.Addr }

// changed records whether the server is connected and reports whether
// that is news for OnState; Pipe.mu is held.
func (pp *Pipe) changed(up bool) bool {
	news := !pp.reported || pp.up != up
	pp.up, pp.reported = up, true
	return news && !pp.closed
}

// Status is whether a Pipe is connected.
type Status uint8

// The statuses.
const (
	StatusIdle Status = iota // not dialled yet
	StatusUp                 // connected
	StatusDown               // not connected: the last dial or connection failed
)

// Status is the connection's status and, when it is down, the error of
// the last dial or connection.
func (pp *Pipe) Status() (Status, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	switch {
	case pp.conn != nil:
		return StatusUp, nil
	case pp.reported:
		return StatusDown, pp.downErr
	}
	return StatusIdle, nil
}

// Send queues p for the server; p.To hears back exactly once. After a
// failed dial, requests fail at once (never sent) until the next dial is
// due: a dead server costs a dial per Config.Timeout, not one per request.
// When nothing is in flight on the connection, p is written before Send
// returns, by the caller's goroutine.
func (pp *Pipe) Send(p *Request) { pp.Queue(p).Write() }

// Queue is Send that leaves the write to the caller: when nothing is in
// flight on the connection, the returned Flush holds p, and the caller
// must Write it at once (after releasing its own locks, say); otherwise p
// goes with the next batch, which the Pipe's reader writes as soon as
// the replies owed have come, and the Flush is empty. A lone request is
// thus written by the goroutine that made it, without waking another:
// the latency of one lock operation is its round trips, not a scheduler's
// hand-offs.
func (pp *Pipe) Queue(p *Request) Flush {
	pp.mu.Lock()
	switch {
	case pp.closed:
		pp.mu.Unlock()
		p.To.Complete(p.ID, Reply{}, notSent{errClosed})
	case pp.conn != nil:
		c := pp.conn
		c.push(p)
		if c.unread > 0 {
			pp.mu.Unlock()
			return Flush{}
		}
		batch := c.take()
		pp.mu.Unlock()
		return Flush{c: c, batch: batch}
	case time.Now().Before(pp.downUntil):
		err := pp.downErr
		pp.mu.Unlock()
		p.To.Complete(p.ID, Reply{}, notSent{err})
	default:
		pp.waiting = append(pp.waiting, p)
		if !pp.dialing {
			pp.dialing = true
			pp.running.Add(1)
			go pp.dial()
		}
		pp.mu.Unlock()
	}
	return Flush{}
}

// A Flush is a batch of requests that Queue left to its caller to write.
// The zero Flush writes nothing.
type Flush struct {
	c     *pipeConn
	batch []byte
}

// Write sends the batch. A failure breaks the connection, which answers
// every request in flight on it with the error.
func (f Flush) Write() {
	if f.c != nil {
		f.c.write(f.batch, false)
	}
}

// Do sends cmd and waits for its reply until ctx is done. The command is
// not withdrawn then: its late reply is dropped, and the caller must treat
// its effect as unknown.
func (pp *Pipe) Do(ctx context.Context, cmd *Command) (Reply, error) {
	w := make(waiter, 1)
	pp.Send(&Request{To: w, Cmd: cmd})
	select {
	case o := <-w:
		return o.reply, o.err
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
}

type outcome struct {
	reply Reply
	err   error
}

// waiter is the Completer of a single request with someone waiting on it.
type waiter chan outcome

func (w waiter) Complete(_ int, r Reply, err error) { w <- outcome{r, err} }

// redialBackoff is how long requests fail at once after a failed dial, so
// that a dead server costs a dial per backoff rather than one per request.
// A server that Admit refused answers, and its greeting costs it a dozen
// commands: it is asked again only every refusalBackoff.
func (pp *Pipe) redialBackoff(err error) time.Duration {
	if pp.cfg.Refused != nil && pp.cfg.Refused(err) {
		return max(pp.timeout, refusalBackoff)
	}
	return pp.timeout
}

const refusalBackoff = time.Second

func (pp *Pipe) dial() {
	defer pp.running.Done()
	nc, br, err := pp.connect()
	pp.mu.Lock()
	pp.dialing = false
	waiting := pp.waiting
	pp.waiting = nil
	if err == nil && pp.closed {
		nc.Close()
		err = errClosed
	}
	if err != nil {
		pp.downUntil, pp.downErr = time.Now().Add(pp.redialBackoff(err)), err
		news := pp.changed(false)
		pp.mu.Unlock()
		if news {
			pp.onState(false, err)
		}
		for _, p := range waiting {
			p.To.Complete(p.ID, Reply{}, notSent{err})
		}
		return
	}
	c := &pipeConn{pipe: pp, nc: nc, br: br}
	for _, s := range pp.cfg.Scripts {
		c.noteLoaded(s) // by the greeting
	}
	pp.conn, pp.downErr = c, nil
	for _, p := range waiting {
		c.push(p)
	}
	var batch []byte
	if c.queued > 0 {
		batch = c.take()
	}
	pp.running.Add(1)
	go c.readLoop()
	news := pp.changed(true)
	pp.mu.Unlock()
	if news {
		pp.onState(true, nil)
	}
	if batch != nil {
		c.write(batch, false)
	}
}

func (pp *Pipe) onState(up bool, err error) {
	if pp.cfg.OnState != nil {
		pp.cfg.OnState(up, err)
	}
}

// Close fails every request not yet answered, ends a dial in progress and
// closes the connection; it returns the error of closing the socket. Every
// request sent afterwards fails at once.
func (pp *Pipe) Close() error {
	pp.mu.Lock()
	pp.closed = true
	c := pp.conn
	pp.mu.Unlock()
	pp.stop()
	var err error
	if c != nil {
		err = c.fail(errClosed)
	}
	pp.running.Wait()
	return err
}

// pipeConn is one connection of a Pipe. Its fields are guarded by Pipe.mu.
type pipeConn struct {
	pipe *Pipe
	nc   net.Conn
	br   *bufio.Reader

	out      []byte     // requests not yet written
	spare    []byte     // a written batch's buffer, for the next out
	queued   int        // how many requests out holds
	unread   int        // requests written whose replies have not all come
	loaded   []uint64   // the Scripts loaded on it, a bit per Script.id
	inflight []*Request // every request pushed and not yet answered, in order
	head     int        // inflight[head:] are the live ones
	broken   bool
}

// stallLimit bounds how long a connection may owe replies without sending
// any: a server that stops answering (SIGSTOP, a dead host behind a live
// route) is cut off, failing what is in flight, and the next request dials.
func (pp *Pipe) stallLimit() time.Duration { return 2 * pp.timeout }

// push queues p; Pipe.mu is held.
func (c *pipeConn) push(p *Request) {
	if c.head == len(c.inflight) {
		// Nothing was owed, so the reader may be blocked without a deadline.
		c.nc.SetReadDeadline(time.Now().Add(c.pipe.stallLimit()))
	}
	if p.retried {
		c.out = append(c.out, p.Cmd.eval()...)
	} else {
		if s := p.Cmd.script; s != nil && !c.hasLoaded(s) {
			// Its own load goes first, in the same place in the queue:
			// a NOSCRIPT would send the request again behind those
			// queued after it, out of their order.
			c.noteLoaded(s)
			c.out = append(c.out, s.load...)
			c.inflight = append(c.inflight, &scriptLoad)
			c.queued++
		}
		c.out = append(c.out, p.Cmd.wire...)
	}
	c.inflight = append(c.inflight, p)
	c.queued++
}

// scriptLoad stands in the queue for every SCRIPT LOAD that push sends: its
// reply is not needed. A load that fails leaves its request to answer
// NOSCRIPT, and to be sent once more with its source (deliver).
var scriptLoad = Request{To: ignored{}, Cmd: &Command{}}

type ignored struct{}

func (ignored) Complete(int, Reply, error) {}

func (c *pipeConn) hasLoaded(s *Script) bool {
	i := s.id / 64
	return i < len(c.loaded) && c.loaded[i]&(1<<(s.id%64)) != 0
}

func (c *pipeConn) noteLoaded(s *Script) {
	i := s.id / 64
	for len(c.loaded) <= i {
		c.loaded = append(c.loaded, 0)
	}
	c.loaded[i] |= 1 << (s.id % 64)
}

// take hands the queued requests to whoever writes them next: the replies
// of what it returns are owed from now, so that nothing else is written
// until they have all come. Pipe.mu is held.
func (c *pipeConn) take() []byte {
	batch := c.out
	c.out, c.spare = c.spare[:0], nil
	c.unread, c.queued = c.queued, 0
	return batch
}

// write sends a batch that take gave. The reader, which writes the
// batch queued behind the replies it has just read, sets a deadline: while
// it writes nobody reads, so the read deadline that cuts off a server that
// stopped answering cannot. Any other writer needs none: the batch's
// replies are owed, and the reader's stall limit ends the write with the
// connection.
func (c *pipeConn) write(batch []byte, reader bool) {
	if reader {
		c.nc.SetWriteDeadline(time.Now().Add(c.pipe.stallLimit()))
	}
	_, err := c.nc.Write(batch)
	if reader {
		// Left set, it would fail the next writer's write once passed.
		c.nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.fail(err)
		return
	}
	// A burst can leave a large buffer behind; do not keep it forever.
	if cap(batch) > 1<<20 {
		return
	}
	c.pipe.mu.Lock()
	if c.spare == nil {
		c.spare = batch[:0]
	}
	c.pipe.mu.Unlock()
}

func (c *pipeConn) readLoop() {
	defer c.pipe.running.Done()
	br := c.br
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
			c.fail(errors.New("backend: the server sent a reply nobody asked for"))
			return
		}
		p := c.inflight[c.head]
		c.inflight[c.head] = nil
		c.head++
		// The requests queued while replies were owed go as one batch
		// once the last of those replies is in: under load a write and a
		// read carry many requests.
		var batch []byte
		if c.unread--; c.unread == 0 && c.queued > 0 {
			batch = c.take()
		}
		if c.head == len(c.inflight) {
			c.inflight, c.head = c.inflight[:0], 0
			c.nc.SetReadDeadline(time.Time{})
		} else if br.Buffered() == 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.pipe.stallLimit()))
		}
		c.pipe.mu.Unlock()
		c.deliver(p, r)
		if batch != nil {
			c.write(batch, true)
		}
	}
}

func (c *pipeConn) deliver(p *Request, r Reply) {
	if r.kind != '-' {
		p.To.Complete(p.ID, r, nil)
		return
	}
	if p.Cmd.script != nil && !p.retried && strings.HasPrefix(r.str, "NOSCRIPT") {
		// Not run, so safe to send again, with the source this time.
		p.retried = true
		c.pipe.Send(p)
		return
	}
	p.To.Complete(p.ID, Reply{}, serverError(r.str))
}

// fail breaks the connection: everything in flight gets err, since whether
// the server ran it is unknown. It returns the error of closing the socket.
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
	// The last queued were never written: the server cannot have run them.
	sent := len(owed) - c.queued
	c.inflight, c.head, c.out = nil, 0, nil
	pp.mu.Unlock()
	closeErr := c.nc.Close()
	if news {
		pp.onState(false, err)
	}
	for i, p := range owed {
		if i < sent {
			p.To.Complete(p.ID, Reply{}, err)
		} else {
			p.To.Complete(p.ID, Reply{}, notSent{err})
		}
	}
	return closeErr
}
