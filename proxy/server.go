package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// Config configures a Server. The zero value of every field means its
// default.
type Config struct {
	// MaxRequestBytes bounds one command, header and arguments together; a
	// client that sends more gets a protocol error and is disconnected.
	// At most 1<<40. Default: 1 MiB.
	MaxRequestBytes int
	// Password, when set, must be given with AUTH (or HELLO ... AUTH) before
	// any command other than AUTH, HELLO, QUIT and RESET. Default: none.
	Password string
	// RequestTimeout, when positive, bounds each call on the Locker.
	// Default: none, for a Locker that bounds its own calls, as
	// quorum.Engine does by its backend timeout: a timer per command costs
	// the proxy a twentieth of its CPU under load.
	RequestTimeout time.Duration
	// Logger receives internal errors and connection events; nothing is
	// logged per command at Info level. Default: slog.Default().
	Logger *slog.Logger
}

const maxRequestBytesLimit = 1 << 40 // the guard's own ceiling

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Server answers Redis clients with locks taken through a Locker. It is
// safe for concurrent use; Serve may be called once.
type Server struct {
	cfg     Config
	locks   Locker
	log     *slog.Logger
	cmds    map[string]*command
	scripts *scriptCache
	started time.Time
	version string

	// ctx is the parent of every Locker call. Shutdown cancels it only when
	// its own context ends before the commands in flight finished.
	ctx    context.Context
	cancel context.CancelFunc

	nextID  atomic.Int64 // connection ids, as CLIENT ID and HELLO report them
	clients atomic.Int64 // open connections, for INFO

	// mu orders begin against Shutdown so that no command starts after
	// inflight.Wait may have begun.
	mu       sync.RWMutex
	closing  atomic.Bool // written only with mu held
	ln       *drainListener
	inflight sync.WaitGroup

	stopOnce, releaseOnce sync.Once
	stopped               chan struct{} // closed once Shutdown closed the listener
	release               chan struct{} // closed when connections may be closed
	served                chan struct{} // closed when Serve returned
}

// New returns a Server answering with locks. It fails when locks is nil or
// cfg holds a negative or out-of-range value.
func New(locks Locker, cfg Config) (*Server, error) {
	if locks == nil {
		return nil, errors.New("proxy: nil Locker")
	}
	if cfg.MaxRequestBytes < 0 || cfg.MaxRequestBytes > maxRequestBytesLimit {
		return nil, fmt.Errorf("proxy: max request bytes %d out of range [1, %d]", cfg.MaxRequestBytes, int64(maxRequestBytesLimit))
	}
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("proxy: negative request timeout %s", cfg.RequestTimeout)
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		locks:   locks,
		log:     cfg.Logger,
		scripts: newScriptCache(scriptCacheSize),
		started: time.Now(),
		version: buildVersion(),
		stopped: make(chan struct{}),
		release: make(chan struct{}),
		served:  make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cmds = s.newCommands()
	return s, nil
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Serve answers the connections accepted on ln, behind the RESP guard,
// until Shutdown. It returns nil after Shutdown (at once, closing ln, when
// Shutdown came first), and an error when called a second time.
func (s *Server) Serve(ln net.Listener) error {
	dl, err := s.attach(ln)
	if dl == nil {
		if err == nil {
			ln.Close()
		}
		return err
	}
	defer close(s.served)
	rs := redcon.NewServerNetwork(ln.Addr().Network(), ln.Addr().String(), s.serveRESP, s.accepted, s.disconnected)
	rs.AcceptError = func(err error) { s.log.Warn("proxy: accept failed", "err", err) }
	return rs.Serve(dl)
}

// attach wraps ln, unless Shutdown already began (nil, nil) or another
// listener is served (nil, error).
func (s *Server) attach(ln net.Listener) (*drainListener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing.Load():
		return nil, nil
	case s.ln != nil:
		return nil, errors.New("proxy: Serve called twice")
	}
	s.ln = &drainListener{
		Listener: newGuardListener(ln, s.cfg.MaxRequestBytes),
		closing:  &s.closing, stopped: s.stopped, release: s.release,
	}
	return s.ln, nil
}

// Shutdown stops accepting connections at once, answers every command that
// arrives from then on with an error, waits for the commands in flight to
// finish, then closes every connection. When ctx ends first, it cancels the
// Locker calls still running, closes every connection and returns
// ctx.Err(). Its result is nil otherwise.
func (s *Server) Shutdown(ctx context.Context) error {
	ln := s.beginShutdown()
	err := s.drain(ctx)
	s.cancel()
	s.releaseOnce.Do(func() { close(s.release) })
	if ln != nil {
		<-s.served // redcon closes every connection before Serve returns
	}
	return err
}

// beginShutdown makes begin refuse new commands, then closes the listener
// so that the kernel refuses new connections.
func (s *Server) beginShutdown() *drainListener {
	s.mu.Lock()
	s.closing.Store(true)
	ln := s.ln
	s.mu.Unlock()
	s.stopOnce.Do(func() {
		if ln != nil {
			ln.Listener.Close()
		}
		close(s.stopped)
	})
	return ln
}

func (s *Server) drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin registers a command in flight; false once Shutdown began.
func (s *Server) begin() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closing.Load() {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Server) end(conn redcon.Conn) {
	s.flushIfClosing(conn)
	s.inflight.Done()
}

// flushIfClosing sends the replies written so far when Shutdown began:
// redcon flushes only after the whole pipeline, and by then Shutdown may
// have closed the connection.
func (s *Server) flushIfClosing(conn redcon.Conn) {
	if !s.closing.Load() {
		return
	}
	if w := redcon.BaseWriter(conn); w != nil {
		w.Flush()
	}
}

// requestContext is the context of one Locker call.
func (s *Server) requestContext() (context.Context, context.CancelFunc) {
	if s.cfg.RequestTimeout > 0 {
		return context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	}
	return s.ctx, func() {}
}

func (s *Server) accepted(conn redcon.Conn) bool {
	st := &connState{id: s.nextID.Add(1), proto: 2, authed: s.cfg.Password == ""}
	conn.SetContext(st)
	s.clients.Add(1)
	s.log.Debug("proxy: connection opened", "id", st.id, "addr", conn.RemoteAddr())
	return true
}

func (s *Server) disconnected(conn redcon.Conn, err error) {
	s.clients.Add(-1)
	s.log.Debug("proxy: connection closed", "id", state(conn).id, "addr", conn.RemoteAddr(), "err", err)
}

// drainListener keeps redcon's accept loop waiting after Shutdown closed
// the listener: redcon closes every connection as soon as Accept fails, which
// would cut the commands in flight.
type drainListener struct {
	net.Listener
	closing *atomic.Bool // set before the listener is closed
	stopped <-chan struct{}
	release <-chan struct{}
	backoff time.Duration
}

// Accept returns the next connection. After Shutdown began it blocks until
// the commands in flight finished, then fails with net.ErrClosed.
func (l *drainListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err == nil {
		l.backoff = 0
		return conn, nil
	}
	if l.closing.Load() {
		<-l.release
		return nil, net.ErrClosed
	}
	if !errors.Is(err, net.ErrClosed) {
		l.pause() // redcon retries at once: back off as net/http does (EMFILE)
	}
	return nil, err
}

func (l *drainListener) pause() {
	l.backoff = min(max(2*l.backoff, 5*time.Millisecond), time.Second)
	t := time.NewTimer(l.backoff)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.stopped:
	}
}
