package redistest

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// installHint is the command that installs redis-server on Debian and
	// Ubuntu, where the tests and CI run; fakeTimeHint installs libfaketime,
	// for servers whose clock runs at another rate.
	installHint  = "apt-get install -y redis-server"
	fakeTimeHint = "apt-get install -y faketime"

	// readyTimeout bounds how long a new process may take to answer PING;
	// redis-server is usually ready in a few milliseconds, but a loaded CI
	// machine running many test binaries at once can be far slower.
	readyTimeout = 10 * time.Second
	pollInterval = 5 * time.Millisecond
	// startAttempts is how many fresh ports Start tries: the port picked by
	// listening on :0 is free when we close it, and another process may take
	// it before redis-server binds it.
	startAttempts = 3
	// restartAttempts is how often Restart tries the same port again; the
	// port is normally free the moment the old process is reaped.
	restartAttempts = 5
	restartBackoff  = 100 * time.Millisecond
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	opts []string
	env  []string // added to the environment of every process
	port int      // fixed once Start returns: Restart reuses it
	// steps is the SteppedClock the server's clock is on, stepped its
	// reading there; nil when it runs by itself.
	steps   *SteppedClock
	stepped *steppedServer

	mu     sync.Mutex
	proc   *process // nil when not started or killed
	closed bool     // set by the test's cleanup; no process may start after it
}

// process is one run of redis-server; a Server has a new one per Restart.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result, valid after done is closed
}

// Start starts a redis-server on a free 127.0.0.1 port, without persistence
// (--save "" --appendonly no) and with its dir in t.TempDir(). opts are
// extra redis-server arguments, appended after those, so they may override
// them (for example "--appendonly", "yes"), though not --port or --bind.
// Start returns once the server answers PING and kills it when the test
// ends. It calls t.Fatalf when redis-server is not installed or does not
// start.
func Start(t testing.TB, opts ...string) *Server {
	t.Helper()
	return StartN(t, 1, opts...)[0]
}

// StartN starts n servers as Start does, concurrently, and returns them
// once all of them answer PING. It calls t.Fatalf if any fails to start;
// those that did start are still killed when the test ends.
func StartN(t testing.TB, n int, opts ...string) []*Server {
	t.Helper()
	return StartWith(t, n, Options{Args: opts})
}

// Options say how StartWith starts its servers.
type Options struct {
	// Args are extra redis-server arguments, as Start's opts.
	Args []string
	// ClockRate, when not 0, runs the server's clocks (gettimeofday and
	// clock_gettime, which TIME, key expiry and uptime read) at that many
	// times real speed from the moment it starts, through libfaketime: at
	// 1.5 a key set with a TTL of 3 s is gone after 2 s. Restart keeps it;
	// SetClockRate changes it.
	// With Stepped, the rate at which it follows the steps.
	// Default: 0, the real clock.
	ClockRate float64
	// Stepped, when set, freezes the servers' wall clocks (TIME, key
	// expiry, uptime) at its time, and moves them only when it is
	// advanced. Restart keeps them on it.
	Stepped *SteppedClock
}

// StartWith starts n servers as StartN does, with o.
func StartWith(t testing.TB, n int, o Options) []*Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is not installed (%v); install it with: %s (Debian/Ubuntu, as root or with sudo)", err, installHint)
	}
	var env []string
	if o.ClockRate != 0 && o.Stepped == nil {
		if env, err = fakeClock(o.ClockRate); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), opts: o.Args, env: env}
		// Registered after t.TempDir, so it runs before the dir is removed.
		t.Cleanup(s.close)
		servers[i] = s
		if o.Stepped != nil {
			if err := s.stepOn(o.Stepped); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			if o.ClockRate != 0 {
				s.SetClockRate(o.ClockRate)
			}
		}
		// The goroutines only return errors: t.Fatalf must stay on the test
		// goroutine.
		wg.Go(func() { errs[i] = s.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return servers
}

// start launches the first process, trying a new port whenever one fails.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range startAttempts {
		var port int
		if port, err = freePort(); err != nil {
			return err
		}
		var p *process
		if p, err = s.launch(port); err == nil {
			s.port, s.proc = port, p
			return nil
		}
	}
	return err
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns the server's address as a go-redis URL, "redis://127.0.0.1:port".
func (s *Server) URL() string {
	return "redis://" + s.Addr()
}

// Client returns a go-redis client of the server, closed when t ends. It
// does not retry (MaxRetries -1, a single dial attempt) and honours context
// deadlines, as the proxy's node clients do, so a killed or paused server
// shows up as an error at once rather than after hidden retries. It speaks
// RESP2, which every redis-server version understands.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		Protocol:              2,
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		// CLIENT SETINFO is unknown to redis-server before 7.2; skip the
		// round trip that would only fail.
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill kills the server with SIGKILL and waits for it to exit: a lost node.
// It does nothing if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// Pause stops the server with SIGSTOP: a hung node. It keeps its
// connections and accepts new ones in the kernel but answers nothing until
// Resume. It does nothing if the server is not running.
func (s *Server) Pause() { s.signal(stopSignal) }

// Resume continues a paused server with SIGCONT. It does nothing if the
// server is not running.
func (s *Server) Resume() { s.signal(contSignal) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		// The only possible error is that the process already exited, and
		// then there is nothing to pause or resume.
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Restart kills the server if it is running and starts it again on the same
// port, returning once it answers PING. With the default options nothing is
// persisted, so the new server has lost every key: the Redlock restart
// hazard. If the server cannot start again, Restart reports it with t.Errorf
// (safe from any goroutine) and leaves the server down. After the test has
// ended, Restart does nothing.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
	var err error
	for attempt := range restartAttempts {
		if attempt > 0 {
			// A backoff between attempts, not synchronisation: something
			// else briefly holds the port and we have no event to wait for.
			time.Sleep(restartBackoff)
		}
		var p *process
		if p, err = s.launch(s.port); err == nil {
			s.proc = p
			return
		}
	}
	s.t.Errorf("redistest: restart: %v", err)
}

// SetClockRate sets the rate of the server's clocks, as Options.ClockRate
// does (0: the real clock), from its next Restart on; on a SteppedClock,
// from its next step on (0: as the steps). It reports a missing
// libfaketime with t.Errorf and leaves the rate as it was.
func (s *Server) SetClockRate(rate float64) {
	if s.steps != nil {
		s.steps.setRate(s.stepped, cmp.Or(rate, 1))
		return
	}
	var env []string
	if rate != 0 {
		var err error
		if env, err = fakeClock(rate); err != nil {
			s.t.Errorf("redistest: %v", err)
			return
		}
	}
	s.mu.Lock()
	s.env = env
	s.mu.Unlock()
}

// Running reports whether the server process is alive, paused or not. It
// is false after Kill and after the process died by itself.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// close is the test's cleanup: it kills the server for good.
func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// launch starts redis-server on port and waits until it answers PING. On
// failure the process has been killed and the error carries the end of its
// log, which says why (usually "Address already in use").
func (s *Server) launch(port int) (*process, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
	}, s.opts...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	logPath := filepath.Join(s.dir, "redis.log")
	// A file rather than a pipe: a pipe would make Wait also wait for any
	// child redis-server forks (BGSAVE, AOF rewrite) that inherited it.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The log is kept across restarts; a failure shows only this run's part.
	logStart, _ := logFile.Seek(0, io.SeekEnd)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	err = cmd.Start()
	logFile.Close() // the child holds its own copy
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(addr); err != nil {
		p.kill()
		return nil, fmt.Errorf("redis-server %s: %w\n--- end of %s:\n%s", addr, err, logPath, tail(logPath, logStart))
	}
	return p, nil
}

// waitReady polls addr until this process answers PING, it exits, or
// readyTimeout passes.
func (p *process) waitReady(addr string) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := probe(addr, p.cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering PING: %v", p.err)
		case <-deadline.C:
			return fmt.Errorf("no answer to PING within %v: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// kill sends SIGCONT first, so a paused process can die and be reaped at
// once, then SIGKILL, and waits until it has been reaped.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(contSignal)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// probe sends PING to addr and checks that the server answering is the
// process pid. Another test's redis-server may have won the race for the
// port, and its PONG must not make ours look ready while ours is exiting.
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	if line, err = r.ReadString('\n'); err != nil {
		return err
	}
	n := -1
	if len(line) > 3 && line[0] == '$' {
		n, _ = strconv.Atoi(line[1 : len(line)-2])
	}
	if n < 0 {
		return fmt.Errorf("INFO answered %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	if !bytes.Contains(info, []byte("\r\nprocess_id:"+strconv.Itoa(pid)+"\r\n")) {
		return fmt.Errorf("another process answers on %s", addr)
	}
	return nil
}

// fakeClock returns the environment that runs a redis-server's clocks at
// rate times real speed. Not the faketime wrapper: it forks, and the
// process it starts would not be the one Kill, Pause and the readiness
// probe (which checks process_id) know. libfaketime is preloaded directly,
// from where the wrapper itself loads it (ld.so expands $LIB to the
// multiarch directory). Debian's redis-server allocates with jemalloc,
// whose first allocation reads clock_gettime before libfaketime has
// initialised, which libfaketime cannot recover from (libfaketime issues
// 130, 327: the server never starts); glibc's libc_malloc_debug, preloaded
// first, takes malloc, calloc, realloc, free and malloc_usable_size back
// to glibc's allocator, so jemalloc is never initialised that early.
func fakeClock(rate float64) ([]string, error) {
	if rate < 0 {
		return nil, fmt.Errorf("clock rate %g is negative", rate)
	}
	return fakeTimeEnv("FAKETIME=+0 x" + strconv.FormatFloat(rate, 'f', -1, 64))
}

// fakeTimeEnv returns the environment that preloads libfaketime, with
// settings, its FAKETIME variables.
func fakeTimeEnv(settings ...string) ([]string, error) {
	if _, err := exec.LookPath("faketime"); err != nil {
		return nil, fmt.Errorf("libfaketime is not installed (%v); install it with: %s (Debian/Ubuntu, as root or with sudo)", err, fakeTimeHint)
	}
	// ld.so only warns about a library it cannot preload, and the server
	// would run on the real clock.
	if libs, _ := filepath.Glob("/usr/lib*/*/faketime/libfaketime.so.1"); len(libs) == 0 {
		if libs, _ = filepath.Glob("/usr/lib*/faketime/libfaketime.so.1"); len(libs) == 0 {
			return nil, fmt.Errorf("libfaketime.so.1 is not under /usr/lib*/[*/]faketime; install it with: %s", fakeTimeHint)
		}
	}
	return append([]string{"LD_PRELOAD=libc_malloc_debug.so.0:/usr/$LIB/faketime/libfaketime.so.1"}, settings...), nil
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the end of the file at path, from offset from on, for error
// messages.
func tail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const keep = 2048
	b = b[min(from, int64(len(b))):]
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
