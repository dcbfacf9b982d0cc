package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
	"github.com/redis/go-redis/v9"
)

// call is one Locker call seen by fakeLocker.
type call struct {
	ctx        context.Context
	op         string
	key, token string
	ttl        time.Duration // or a Read's Wait
}

func (c call) String() string {
	s := c.op + " " + c.key
	if c.token != "" {
		s += " " + c.token
	}
	if c.ttl != 0 {
		s += " " + c.ttl.String()
	}
	return s
}

// fakeLocker records calls and answers them with answer.
type fakeLocker struct {
	maxTTL time.Duration
	mu     sync.Mutex
	calls  []string
	answer func(call) (any, error) // nil: zero values, no error
}

var _ Locker = (*fakeLocker)(nil)

// reset forgets the calls so far and answers the next ones with answer.
func (f *fakeLocker) reset(answer func(call) (any, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.answer = nil, answer
}

func (f *fakeLocker) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeLocker) do(c call) (any, error) {
	f.mu.Lock()
	f.calls = append(f.calls, c.String())
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return nil, nil
	}
	return answer(c)
}

// opName is how calls name an operation: "acquireall" for acquire_all.
func opName(op quorum.Op) string { return strings.ReplaceAll(op.String(), "_", "") }

func (f *fakeLocker) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	op := opName(req.Op)
	if req.Op == quorum.OpAcquireOrRenew {
		op += fmt.Sprintf("/%d", req.TokenLen)
	}
	v, err := f.do(call{ctx, op, strings.Join(req.Keys, ","), req.Token, req.TTL})
	res, ok := v.(quorum.Result)
	if !ok && err == nil {
		res.Validity = req.TTL // as the engine's, a lock taken is valid for a while
	}
	return res, err
}

// Unlock answers with a quorum.Result. A hash lock release's call shows
// its lease, and its latch in brackets.
func (f *fakeLocker) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	op := opName(req.Op)
	if req.Latch != "" {
		op += fmt.Sprintf("[%s %s]", req.Latch, req.LatchTTL)
	}
	v, err := f.do(call{ctx, op, strings.Join(req.Keys, ","), req.Token, req.TTL})
	res, _ := v.(quorum.Result)
	return res, err
}

// Renew makes one call per lock, answered on its own: "renewfields" for a
// hash lock, "renewreads" for a read hold (its key and prefix), "renew"
// for another.
func (f *fakeLocker) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	op := "renew"
	switch {
	case req.Hash:
		op = "renewfields"
	case req.Read:
		op = "renewreads"
	}
	out := make([]quorum.Renewed, len(req.Locks))
	for i, l := range req.Locks {
		key := l.Key
		if l.Prefix != "" {
			key += "," + l.Prefix
		}
		_, out[i].Err = f.do(call{ctx, op, key, l.Token, req.TTL})
		if out[i].Err == nil {
			out[i].Validity = req.TTL
		}
	}
	return out
}

// Read answers with a string (the value), a time.Duration (a TTL) or a
// bool (exists).
func (f *fakeLocker) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	v, err := f.do(call{ctx, opName(req.Op), req.Key, req.Token, req.Wait})
	var r quorum.Reading
	switch v := v.(type) {
	case string:
		r.Value = v
	case time.Duration:
		r.TTL = v
	case bool:
		r.Exists = v
	case int64:
		r.Count = v
	}
	return r, err
}

// Write answers with a bool; a mode shows after the operation's name.
func (f *fakeLocker) Write(ctx context.Context, req quorum.Write) (bool, error) {
	op := opName(req.Op)
	if req.Mode != "" {
		op += "/" + req.Mode
	}
	v, err := f.do(call{ctx, op, req.Key, "", req.TTL})
	b, _ := v.(bool)
	return b, err
}

func (f *fakeLocker) MaxTTL() time.Duration { return f.maxTTL }

// A fakeLocker has no backends, hears no releases and cannot list: the
// collaborators of a Server's Config (withFakes).
var (
	_ BackendReporter = (*fakeLocker)(nil)
	_ ReleaseWatcher  = (*fakeLocker)(nil)
	_ Lister          = (*fakeLocker)(nil)
)

func (f *fakeLocker) States() []shard.GroupState { return nil }
func (f *fakeLocker) Quorum() int                { return 0 }
func (f *fakeLocker) BackendSet() string         { return "" }
func (f *fakeLocker) Fences() quorum.FenceStats  { return quorum.FenceStats{} }
func (f *fakeLocker) Waits() quorum.WaitStats    { return quorum.WaitStats{} }

func (f *fakeLocker) Releases(string, func(key, token string)) (stop func()) { return func() {} }
func (f *fakeLocker) Relay(context.Context, string, string) error            { return nil }
func (f *fakeLocker) Relayed(string, func(topic, message string)) (stop func()) {
	return func() {}
}

// errNoLister is the fake's refusal to list, as a Lister that cannot list
// would refuse: its tests see the error reach the client.
var errNoLister = &argError{"ERR this lockproxy cannot list locks"}

// List refuses, as a Lister that cannot list would.
func (f *fakeLocker) List(context.Context, quorum.List) (quorum.Listing, error) {
	return quorum.Listing{}, errNoLister
}

// fakeEngine is a fake of the lock engine and all it serves a Server.
type fakeEngine interface {
	Locker
	BackendReporter
	ReleaseWatcher
	Lister
}

// withFakes is cfg with e as every collaborator of the engine's.
func withFakes(e fakeEngine, cfg Config) Config {
	cfg.Backends, cfg.Watcher, cfg.Lister = e, e, e
	return cfg
}

// newWithFake is New with f as the Locker and every collaborator.
func newWithFake(f *fakeLocker, cfg Config) (*Server, error) { return New(f, withFakes(f, cfg)) }

// Answers for fakeLocker.answer.
func fails(err error) func(call) (any, error) {
	return func(call) (any, error) { return nil, err }
}

// failsWith answers v with err: a refusal that says more (Result.HolderTTL).
func failsWith(v any, err error) func(call) (any, error) {
	return func(call) (any, error) { return v, err }
}

func returns(v any) func(call) (any, error) {
	return func(call) (any, error) { return v, nil }
}

// testServer is a Server on 127.0.0.1:0 in front of a fakeLocker.
type testServer struct {
	*Server
	fake *fakeLocker
	addr string
}

// startServer serves a fresh fakeLocker and shuts the server down (checking
// that Serve returned nil) when the test ends.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	fake := &fakeLocker{maxTTL: time.Minute}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := New(fake, withFakes(fake, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{Server: srv, fake: fake, addr: serve(t, srv)}
}

// serve serves srv on a loopback port and shuts it down (checking that
// Serve returned nil) when the test ends. It returns the address.
func serve(t testing.TB, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// wire is a raw RESP connection for checking replies byte for byte.
type wire struct {
	t    testing.TB
	conn net.Conn
	rd   *bufio.Reader
}

func connect(t testing.TB, addr string) *wire {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a hung test fails instead of hanging
	return &wire{t: t, conn: conn, rd: bufio.NewReader(conn)}
}

// encode writes args as a RESP array of bulk strings.
func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func (w *wire) send(args ...string) {
	w.t.Helper()
	w.sendRaw(encode(args...))
}

func (w *wire) sendRaw(raw string) {
	w.t.Helper()
	if _, err := io.WriteString(w.conn, raw); err != nil {
		w.t.Fatal(err)
	}
}

// do sends one command and returns its whole reply, raw.
func (w *wire) do(args ...string) string {
	w.t.Helper()
	w.send(args...)
	return w.read()
}

func (w *wire) read() string {
	w.t.Helper()
	r, err := readReply(w.rd)
	if err != nil {
		w.t.Fatalf("reading reply (got %q so far): %v", r, err)
	}
	return r
}

// readReply reads one complete RESP2 or RESP3 reply and returns its bytes.
func readReply(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil || len(line) < 3 {
		return line, errors.Join(err, io.ErrUnexpectedEOF)
	}
	n, _ := strconv.Atoi(line[1 : len(line)-2])
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		_, err := io.ReadFull(rd, body)
		return line + string(body), err
	case '%', '|':
		n *= 2
	case '*', '~', '>':
	default:
		return line, nil
	}
	for range max(n, 0) {
		elem, err := readReply(rd)
		line += elem
		if err != nil {
			return line, err
		}
	}
	return line, nil
}

// wireCase is one command on a fresh connection: the Locker answers with
// answer, and the reply and the Locker calls must be exactly these.
type wireCase struct {
	name   string
	setup  [][]string // commands sent first on the same connection
	cmd    []string
	answer func(call) (any, error)
	want   string
	calls  []string
}

func runWireCases(t *testing.T, ts *testServer, cases []wireCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := connect(t, ts.addr)
			for _, c := range tc.setup {
				w.do(c...)
			}
			ts.fake.reset(tc.answer)
			if exp, got := tc.want, w.do(tc.cmd...); exp != got {
				t.Errorf("reply: want %q, got %q", exp, got)
			}
			if exp, got := fmt.Sprint(tc.calls), fmt.Sprint(ts.fake.seen()); exp != got {
				t.Errorf("calls: want %s, got %s", exp, got)
			}
		})
	}
}

func TestNew(t *testing.T) {
	fake := &fakeLocker{}
	for _, tc := range []struct {
		name   string
		locks  Locker
		cfg    Config
		errSub string
	}{
		{name: "defaults", locks: fake},
		{name: "nil locker", cfg: Config{}, errSub: "nil Locker"},
		{name: "negative max request", locks: fake, cfg: Config{MaxRequestBytes: -1}, errSub: "max request bytes"},
		{name: "huge max request", locks: fake, cfg: Config{MaxRequestBytes: 1<<40 + 1}, errSub: "max request bytes"},
		{name: "negative idle timeout", locks: fake, cfg: Config{IdleTimeout: -time.Second}, errSub: "idle timeout"},
		{name: "negative max clients", locks: fake, cfg: Config{MaxClients: -1}, errSub: "max clients"},
		{name: "negative max key", locks: fake, cfg: Config{MaxKeyBytes: -1}, errSub: "max key bytes"},
		{name: "bad user", locks: fake, cfg: Config{Users: []User{{Name: "a", PasswordSHA256: "00"}}}, errSub: `users: entry 1 ("a")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.locks, withFakes(fake, tc.cfg))
			if tc.errSub == "" {
				if err != nil {
					t.Fatal(err)
				}
				type limits struct {
					request, clients, key, token int
					idle                         time.Duration
				}
				cfg := s.settings().cfg
				if exp, got := (limits{1 << 20, 10000, 1024, 1024, 0}), (limits{cfg.MaxRequestBytes, cfg.MaxClients,
					cfg.MaxKeyBytes, cfg.MaxTokenBytes, cfg.IdleTimeout}); exp != got {
					t.Fatalf("defaults: want %+v, got %+v", exp, got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("want an error containing %q, got %v", tc.errSub, err)
			}
		})
	}
}

// TestNewNeedsCollaborators: a Server is refused without each of the lock
// engine's collaborators, rather than served with a feature turned off.
func TestNewNeedsCollaborators(t *testing.T) {
	fake := &fakeLocker{maxTTL: time.Minute}
	for _, tc := range []struct {
		field string
		drop  func(*Config)
	}{
		{"Backends", func(c *Config) { c.Backends = nil }},
		{"Watcher", func(c *Config) { c.Watcher = nil }},
		{"Lister", func(c *Config) { c.Lister = nil }},
	} {
		cfg := withFakes(fake, Config{})
		tc.drop(&cfg)
		if _, err := New(fake, cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New without %s: %v, want an error naming it", tc.field, err)
		}
	}
	if _, err := New(nil, withFakes(fake, Config{})); err == nil {
		t.Error("New with a nil Locker: no error")
	}
}

// blockingAcquire answers acquire only when release is closed (or the
// call's context ends), telling entered when it starts and done when it
// returns.
func blockingAcquire(entered, release chan struct{}, done chan error) func(call) (any, error) {
	return func(c call) (any, error) {
		entered <- struct{}{}
		var err error
		select {
		case <-release:
		case <-c.ctx.Done():
			err = c.ctx.Err()
		}
		done <- err
		return nil, err
	}
}

func TestShutdownDrains(t *testing.T) {
	ts := startServer(t, Config{})
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	ts.fake.reset(blockingAcquire(entered, release, done))
	holder, other := connect(t, ts.addr), connect(t, ts.addr)
	if exp, got := "+PONG\r\n", other.do("PING"); exp != got {
		t.Fatalf("want %q, got %q", exp, got)
	}
	holder.send("SET", "k", "v", "NX", "PX", "1000")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(context.Background()) }()
	<-ts.stopped

	if c, err := net.Dial("tcp", ts.addr); err == nil {
		c.Close()
		t.Fatal("a new connection was accepted after Shutdown began")
	}
	if exp, got := "-ERR lockproxy is shutting down\r\n", other.do("PING"); exp != got {
		t.Fatalf("command after Shutdown began: want %q, got %q", exp, got)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a command was in flight", err)
	default:
	}
	close(release)
	if exp, got := "+OK\r\n", holder.read(); exp != got {
		t.Fatalf("in-flight command: want %q, got %q", exp, got)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := readReply(other.rd); !errors.Is(err, io.EOF) {
		t.Fatalf("connection still open after Shutdown: %v", err)
	}
}

func TestShutdownContextEnds(t *testing.T) {
	ts := startServer(t, Config{})
	entered, done := make(chan struct{}), make(chan error, 1)
	ts.fake.reset(blockingAcquire(entered, make(chan struct{}), done))
	holder := connect(t, ts.addr)
	holder.send("SET", "k", "v", "NX", "PX", "1000")
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(ctx) }()
	<-ts.stopped
	cancel()
	if err := <-shut; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: want context.Canceled, got %v", err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Locker call was not cancelled: %v", err)
	}
	// The reply races with the connection's close: either is an answer.
	if r, err := readReply(holder.rd); err == nil && !strings.HasPrefix(r, "-NOQUORUM") {
		t.Fatalf("cancelled command: got %q", r)
	}
}

func TestShutdownBeforeServe(t *testing.T) {
	srv, err := newWithFake(&fakeLocker{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("Serve after Shutdown left the listener open")
	}
}

// TestServeTwoListeners serves a second listener (as main does a TLS one)
// beside the first; Shutdown, in startServer's cleanup, ends both.
func TestServeTwoListeners(t *testing.T) {
	ts := startServer(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ts.Serve(ln) }()
	for _, addr := range []string{ts.addr, ln.Addr().String()} {
		if exp, got := "+PONG\r\n", connect(t, addr).do("PING"); exp != got {
			t.Fatalf("%s: want %q, got %q", addr, exp, got)
		}
	}
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("second Serve: %v", err)
	}
}

func TestGuardedAgainstRedconPanic(t *testing.T) {
	ts := startServer(t, Config{})
	w := connect(t, ts.addr)
	w.sendRaw("*1\r\n$9223372036854775807\r\n")
	if r := w.read(); !strings.HasPrefix(r, "-ERR Protocol error") {
		t.Fatalf("want a protocol error, got %q", r)
	}
	if exp, got := "+PONG\r\n", connect(t, ts.addr).do("PING"); exp != got {
		t.Fatalf("server after a malformed request: want %q, got %q", exp, got)
	}
}

// TestGoRedis drives the proxy with an unchanged go-redis v9 client, which
// sends HELLO 3, CLIENT MAINT_NOTIFICATIONS and CLIENT SETINFO first.
func TestGoRedis(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol int
		password string
	}{
		{"RESP3", 3, ""},
		{"RESP2", 2, ""},
		{"RESP3 with password", 3, "sekret"},
		{"RESP2 with password", 2, "sekret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, Config{Password: tc.password})
			rdb := redis.NewClient(&redis.Options{Addr: ts.addr, Protocol: tc.protocol, Password: tc.password})
			t.Cleanup(func() { rdb.Close() })
			ctx := t.Context()

			hello, err := rdb.Do(ctx, "HELLO").Result()
			if err != nil {
				t.Fatal(err)
			}
			if _, isMap := hello.(map[any]any); isMap != (tc.protocol == 3) {
				t.Fatalf("HELLO reply %T on a RESP%d connection", hello, tc.protocol)
			}
			testGoRedisLocks(t, ts, rdb)
		})
	}
}

func testGoRedisLocks(t *testing.T, ts *testServer, rdb *redis.Client) {
	ctx := t.Context()
	check := func(what string, exp, got any, err error) {
		t.Helper()
		if err != nil || fmt.Sprint(exp) != fmt.Sprint(got) {
			t.Fatalf("%s: want %v, got %v (err %v); calls %v", what, exp, got, err, ts.fake.seen())
		}
	}
	ts.fake.reset(nil)
	ok, err := rdb.SetNX(ctx, "k", "v", 30*time.Second).Result()
	check("SetNX", true, ok, err)
	ok, err = rdb.SetNX(ctx, "k", "v", 1500*time.Millisecond).Result()
	check("SetNX ms", true, ok, err)
	check("acquire calls", "[acquire k v 30s acquire k v 1.5s]", ts.fake.seen(), nil)

	ts.fake.reset(fails(quorum.ErrNotAcquired))
	ok, err = rdb.SetNX(ctx, "k", "v", 30*time.Second).Result()
	check("SetNX held elsewhere", false, ok, err)

	ts.fake.reset(fails(quorum.ErrNotFound))
	_, err = rdb.Get(ctx, "k").Result()
	check("Get missing is redis.Nil", true, errors.Is(err, redis.Nil), nil)

	ts.fake.reset(returns(1500 * time.Millisecond))
	d, err := rdb.PTTL(ctx, "k").Result()
	check("PTTL", 1500*time.Millisecond, d, err)

	ts.fake.reset(returns(true))
	n, err := rdb.Exists(ctx, "a", "b").Result()
	check("Exists", 2, n, err)
	ok, err = rdb.PExpire(ctx, "k", 5*time.Second).Result()
	check("PExpire", true, ok, err)

	// Script.Run sends EVALSHA, gets NOSCRIPT, and falls back to EVAL.
	ts.fake.reset(nil)
	v, err := redis.NewScript(releaseScript).Run(ctx, rdb, []string{"k"}, "v").Int()
	check("release script", 1, v, err)
	ts.fake.reset(fails(quorum.ErrNotHeld))
	v, err = redis.NewScript(releaseScript).Run(ctx, rdb, []string{"k"}, "v").Int()
	check("release script not held", 0, v, err)

	// NOQUORUM is not among the errors go-redis retries by itself.
	ts.fake.reset(fails(&quorum.NoQuorumError{Counted: 1, Needed: 2, Total: 3}))
	err = rdb.SetNX(ctx, "k", "v", time.Second).Err()
	check("no quorum", "NOQUORUM 1 of 3 backends answered, 2 needed", err, nil)
	check("no quorum is not retried", 1, len(ts.fake.seen()), nil)

	info, err := rdb.Info(ctx, "server").Result()
	check("INFO", true, strings.Contains(info, "redis_version:7.0.15"), err)
}
