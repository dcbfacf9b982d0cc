package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// Config configures a Server. The zero value of every field means its
// default, but for the lock engine's collaborators, which are required.
// Reload replaces all of it but those, Logger, Observer and Embedded,
// which are New's for the Server's life.
type Config struct {
	// Backends shows the lock engine's backends in INFO (shard.Groups).
	// Required.
	Backends BackendReporter
	// Watcher hears the releases of lock keys and relays PUBLISH between
	// proxies, for pub/sub (shard.Groups). Required.
	Watcher ReleaseWatcher
	// Lister lists the locks held, for LOCK.LIST, SCAN, KEYS, DBSIZE and
	// FLUSHDB (shard.Groups). Required.
	Lister Lister
	// MaxRequestBytes bounds one command, header and arguments together; a
	// client that sends more gets a protocol error and is disconnected.
	// At most MaxRequestBytesLimit. Default: 1 MiB.
	MaxRequestBytes int
	// Password, when set, is the default user's: it must be given with
	// AUTH pass (or AUTH default pass, or HELLO ... AUTH) before any command
	// other than AUTH, HELLO, PING, QUIT and RESET. Default: none.
	Password string
	// Users are named accounts (AUTH user pass) with hashed passwords and
	// optional key prefixes. When some are configured and neither Password
	// nor a user named "default" is, every connection must AUTH as one of
	// them. Default: none (with no Password either, no AUTH is needed).
	Users []User
	// AllowFlush lets FLUSHDB and FLUSHALL delete every lock of the
	// caller's key space; they are allowed on Embedded backends whatever
	// it says. Default: false.
	AllowFlush bool
	// MaxClients bounds the open client connections; one more gets
	// "-ERR max number of clients reached" and is closed. Default: 10000,
	// as Redis's maxclients.
	MaxClients int
	// IdleTimeout closes a connection that has not sent a whole command for
	// that long, and one that has taken none of its replies for that long
	// (no interaction either way, as Redis's timeout counts it) when that
	// is shorter than WriteTimeout. Default: none (0), as Redis's timeout.
	IdleTimeout time.Duration
	// WriteTimeout closes a connection that has taken none of its replies
	// for that long: a client that stopped reading, whose replies fill the
	// socket buffers. Redis's client-output-buffer-limit closes such a
	// client by the size of its pending replies; the proxy writes replies
	// as it makes them and holds at most 64 KiB (and one reply) beyond the
	// socket buffers, so it bounds the time instead. Default: 10s.
	WriteTimeout time.Duration
	// MaxKeyBytes bounds each key a command names (before the user's key
	// prefix). Default: 1 KiB.
	MaxKeyBytes int
	// MaxTokenBytes bounds each lock token (the value of SET, the token
	// argument of a release or extend). Default: 1 KiB.
	MaxTokenBytes int
	// Logger receives internal errors and connection events; nothing is
	// logged per command at Info level. Default: slog.Default().
	Logger *slog.Logger
	// Observer, when set, hears of every lock operation's outcome and
	// duration (observe.go). Default: none.
	Observer Observer
	// Embedded says the Locker's backends live inside this process (the
	// in-memory ones of lockproxy run with no configuration), which INFO
	// tells as backends_embedded:1. Default: false.
	Embedded bool
	// Fencing says the Locker mints fencing tokens: CLIENT FENCING ON is
	// refused without it. Default: false.
	Fencing bool
	// ConfigFile is the configuration file's absolute path, which INFO
	// server shows as config_file. Default: none.
	ConfigFile string
	// Version is lockproxy's own version, which INFO server shows as
	// lockproxy_version beside the Redis version the proxy answers as.
	// Default: "unknown".
	Version string
	// Cluster, when it names nodes, makes the proxy answer cluster-mode
	// clients as a node of a Redis Cluster made of the lockproxy instances
	// it names (cluster.go). Default: a standalone server.
	Cluster ClusterConfig
	// Sessions configures session-bound locks (session.go), for the
	// Server's life: Reload keeps New's.
	Sessions SessionConfig
}

// MaxRequestBytesLimit is the largest Config.MaxRequestBytes: 1 TiB, less
// on 32-bit platforms, where the guard's length arithmetic must fit an int.
const MaxRequestBytesLimit = guardMaxLimit

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 1 << 20
	}
	if c.MaxClients == 0 {
		c.MaxClients = 10000
	}
	if c.MaxKeyBytes == 0 {
		c.MaxKeyBytes = 1024
	}
	if c.MaxTokenBytes == 0 {
		c.MaxTokenBytes = 1024
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "unknown"
	}
	return c
}

// Server answers Redis clients with locks taken through a Locker. It is
// safe for concurrent use; Serve may be called once per listener (a plain
// one and a TLS one, say), concurrently.
type Server struct {
	locks   Locker
	log     *slog.Logger
	cmds    map[string]*command
	refused *scriptCache // scripts not served, by SHA1 (scripts.go)
	// live is what Reload replaces, whole, in one store: a connection
	// reads it once when accepted (limits) and once per AUTH (users), so
	// that it never sees half of one reload and half of another.
	live     atomic.Pointer[settings]
	started  time.Time
	version  string
	runID    string          // INFO's run_id: this process's, random
	tcpPort  atomic.Int64    // INFO's tcp_port: the first listener's
	confFile string          // Config.ConfigFile
	embedded bool            // Config.Embedded
	fencing  bool            // Config.Fencing
	backends BackendReporter // Config.Backends
	watcher  ReleaseWatcher  // Config.Watcher: each user's keyspace wraps it
	lister   Lister          // Config.Lister: each user's keyspace wraps it
	cluster  *cluster        // nil: standalone (Config.Cluster)

	// ctx is the context of every Locker call: no deadline of its own, as
	// the engine bounds each call by its backend timeout (and a timer per
	// command would cost the proxy a twentieth of its CPU under load).
	// Shutdown cancels it only when its own context ends before the
	// commands in flight finished.
	ctx    context.Context
	cancel context.CancelFunc

	nextID  atomic.Int64 // connection ids, as CLIENT ID and HELLO report them
	clients atomic.Int64 // open connections, for INFO and max clients
	stats   *counters    // commands and lock operations (observe.go)
	hub     *pubsubHub   // subscribed connections (pubsub.go)
	// tracking is the keys that tracking connections read (tracking.go).
	tracking *tracking
	// sessions renews the session-bound locks (session.go).
	sessions *sessions

	// mu orders begin against Shutdown so that no command starts after
	// inflight.Wait may have begun, and Serve against Shutdown so that no
	// listener is added after Shutdown closed them.
	mu       sync.RWMutex
	closing  atomic.Bool // written only with mu held
	lns      []*drainListener
	inflight sync.WaitGroup
	serving  sync.WaitGroup // one per Serve that attached a listener

	stopOnce, releaseOnce sync.Once
	stopped               chan struct{} // closed once Shutdown closed the listeners
	release               chan struct{} // closed when connections may be closed
}

// New returns a Server answering with locks. It fails when locks or a
// collaborator of cfg is nil, or cfg holds a negative or out-of-range
// value.
func New(locks Locker, cfg Config) (*Server, error) {
	switch {
	case locks == nil:
		return nil, errors.New("proxy: nil Locker")
	case cfg.Backends == nil:
		return nil, errors.New("proxy: Config.Backends is nil")
	case cfg.Watcher == nil:
		return nil, errors.New("proxy: Config.Watcher is nil")
	case cfg.Lister == nil:
		return nil, errors.New("proxy: Config.Lister is nil")
	}
	cfg = cfg.withDefaults()
	topology, err := newCluster(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cluster:  topology,
		log:      cfg.Logger,
		refused:  newScriptCache(scriptCacheSize),
		started:  time.Now(),
		version:  cfg.Version,
		runID:    newRunID(),
		confFile: cfg.ConfigFile,
		embedded: cfg.Embedded,
		fencing:  cfg.Fencing,
		backends: cfg.Backends,
		watcher:  cfg.Watcher,
		lister:   cfg.Lister,
		stopped:  make(chan struct{}),
		release:  make(chan struct{}),
		hub:      newPubsubHub(),
		tracking: newTracking(),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cmds = s.newCommands()
	// The clients' calls tell the session locks of releases
	// (sessionLocker); theirs and the session locks' own tell the tracking
	// connections of the keys changed, and are counted.
	var observed Locker
	observed, s.stats = observe(locks, cfg.Observer)
	tracked := &trackedLocker{locks: observed, tracking: s.tracking}
	s.sessions = newSessions(s.ctx, cfg.Sessions, tracked, cfg.Observer, cfg.Logger)
	s.locks = &sessionLocker{locks: tracked, sessions: s.sessions}
	if err := s.Reload(cfg); err != nil {
		return nil, err
	}
	if s.cluster != nil {
		go s.cluster.probe(s.stopped, s)
	}
	return s, nil
}

// Serve answers the connections accepted on ln, behind the RESP guard and
// the client limit, until Shutdown. For TLS, ln is the TLS listener. It
// returns nil after Shutdown (at once, closing ln, when Shutdown came
// first), once every connection it accepted is closed and served no more.
func (s *Server) Serve(ln net.Listener) error {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		s.tcpPort.CompareAndSwap(0, int64(a.Port))
	}
	dl := s.attach(ln)
	if dl == nil {
		ln.Close()
		return nil
	}
	defer s.serving.Done()
	var open connSet
	defer open.closeAll()
	for {
		conn, err := dl.Accept()
		switch {
		case errors.Is(err, net.ErrClosed):
			return nil
		case err != nil:
			s.log.Warn("proxy: accept failed", "err", err)
			continue
		}
		open.serve(conn, s.serveConn)
	}
}

// connSet is the connections one Serve accepted and still serves.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// serve runs serveConn(conn) in a goroutine of its own.
func (cs *connSet) serve(conn net.Conn, serveConn func(net.Conn)) {
	cs.mu.Lock()
	if cs.conns == nil {
		cs.conns = map[net.Conn]struct{}{}
	}
	cs.conns[conn] = struct{}{}
	cs.mu.Unlock()
	cs.wg.Go(func() {
		serveConn(conn)
		cs.mu.Lock()
		delete(cs.conns, conn)
		cs.mu.Unlock()
	})
}

// closeAll closes every connection and waits until none is served.
func (cs *connSet) closeAll() {
	cs.mu.Lock()
	for conn := range cs.conns {
		conn.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// attach wraps ln, unless Shutdown already began (nil).
func (s *Server) attach(ln net.Listener) *drainListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	dl := &drainListener{
		Listener: &limitListener{Listener: ln, clients: &s.clients, max: func() int64 { return int64(s.settings().cfg.MaxClients) }},
		closing:  &s.closing, stopped: s.stopped, release: s.release,
	}
	s.lns = append(s.lns, dl)
	s.serving.Add(1)
	return dl
}

// Shutdown stops accepting connections at once, answers every command that
// arrives from then on with an error, waits for the commands in flight to
// finish, then closes every connection, and returns nil. When ctx ends
// first, it cancels the context of the Locker calls still running (they
// stop waiting for votes and answer NOQUORUM; rollbacks still run), closes
// every connection at once, which may be before those answers are written,
// and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	err := s.drain(ctx)
	s.cancel()
	s.releaseOnce.Do(func() { close(s.release) })
	s.serving.Wait() // Serve closes every connection before it returns
	s.sessions.shutdown()
	return err
}

// beginShutdown makes begin refuse new commands, then closes the listeners
// so that the kernel refuses new connections.
func (s *Server) beginShutdown() {
	s.mu.Lock()
	s.closing.Store(true)
	lns := s.lns
	s.mu.Unlock()
	s.stopOnce.Do(func() {
		for _, ln := range lns {
			ln.Listener.Close()
		}
		close(s.stopped)
	})
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
// serveCommands writes them only after the whole batch, and by then
// Shutdown may have closed the connection.
func (s *Server) flushIfClosing(conn redcon.Conn) {
	if !s.closing.Load() {
		return
	}
	if c, ok := conn.(*client); ok {
		c.flush()
	}
}

// accepted starts a connection's state, as set's user who needs no
// AUTH, if any; limitListener has counted it.
func (s *Server) accepted(conn redcon.Conn, set *settings) {
	st := &connState{id: s.nextID.Add(1), proto: 2, user: set.users.anonymous}
	conn.SetContext(st)
	s.tracking.opened(st.id)
	s.log.Debug("proxy: connection opened", "id", st.id, "addr", conn.RemoteAddr())
}

// writeTimeout is how long a reply may wait for a client that reads
// nothing: WriteTimeout, or IdleTimeout when that is shorter.
func (c Config) writeTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return min(c.WriteTimeout, c.IdleTimeout)
	}
	return c.WriteTimeout
}

func (s *Server) disconnected(conn redcon.Conn, err error) {
	s.clients.Add(-1)
	s.tracking.closed(state(conn).id)
	s.log.Debug("proxy: connection closed", "id", state(conn).id, "addr", conn.RemoteAddr(), "err", err)
}

// errMaxClients is Redis's reply to a connection beyond maxclients.
const errMaxClients = "-ERR max number of clients reached\r\n"

// rejectTimeout bounds the reply to a connection beyond the client limit,
// a TLS handshake included.
const rejectTimeout = time.Second

// limitListener counts the open connections (disconnected uncounts them)
// and turns away those beyond max: they get Redis's error and are closed,
// in their own goroutine, since with TLS the reply needs a handshake that
// must not hold up the accept loop.
type limitListener struct {
	net.Listener
	clients *atomic.Int64
	max     func() int64 // read at each accept: Reload may change it
}

// Accept returns the next connection within the limit.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.clients.Add(1) <= l.max() {
			return conn, nil
		}
		l.clients.Add(-1)
		go reject(conn)
	}
}

func reject(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(rejectTimeout))
	io.WriteString(conn, errMaxClients)
	conn.Close()
}

// drainListener keeps Serve's accept loop waiting after Shutdown closed the
// listener: Serve closes every connection as soon as Accept fails, which
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
		l.pause() // Serve retries at once: back off as net/http does (EMFILE)
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
