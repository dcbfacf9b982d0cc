package test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// binary is the lockproxy built once for the whole package, with the race
// detector; plainBinary is the same without it, as users run it, which the
// client tests drive.
var binary, plainBinary string

// clientTests are the top-level tests that drive plainBinary: those about
// client libraries, marked by clientTest.
var clientTests sync.Map // test name → struct{}

// preparing serialises what the client tests set up on disk (the Java
// build, Python environments, Node modules), as they run side by side.
var preparing sync.Mutex

// The package's tests run in three phases. First come the few tests that
// call neither proxyTest nor clientTest, one after another: they assert
// on timing that a loaded machine upset when they ran beside others (a
// cut-off measured to the millisecond, the negative control's restart
// hazard). Then the tests of the proxy on its own (proxyTest,
// heavyTest) run side by side; their fault runs time backends out on
// purpose. Last the client tests (clientTest), whose JVMs and interpreters
// keep both cores of a CI machine busy and must not load those fault runs.
// go test -parallel N sets how many tests of a phase run at once: N
// client tests (clientSlots), and one heavy proxy test at most (heavySlot)
// with N-1 others (proxySlots). The heavy tests run one after another,
// the longest chain of the phase, so one of the N places is kept for
// them: in a place shared with the light tests, each waited its turn
// behind a queue of them. With N = 1 there is one place for all
// (heavySlot is proxySlots). TestMain lifts go test's own limit: a client
// test waits for the proxy tests once go test has started it, and under
// go test's limit the waiting client tests could hold every place the
// proxy tests need.
var (
	proxyTests                         sync.WaitGroup // the proxy tests not yet finished
	proxySlots, heavySlot, clientSlots chan struct{}
)

// proxyTest marks a test of the proxy on its own, with no client library's
// program: it runs beside other proxy tests, before any client test.
// It counts itself in proxyTests before t.Parallel, while go test runs
// the package's top-level tests up to their t.Parallel one after another,
// so that every proxy test is counted before any client test waits.
func proxyTest(t *testing.T) {
	t.Helper()
	proxyTests.Add(1)
	t.Cleanup(proxyTests.Done)
	t.Parallel()
	take(t, proxySlots)
}

// heavyTest is proxyTest for a test that keeps about a core busy for many
// seconds (a safety run, a listing of 100,000 locks): one runs at a time,
// in the place kept for them, so that the lighter ones beside it keep a
// core. The builds it is given (brokenFenceBinary, brokenSetBinary) run
// before it waits for its turn, not in it, where the other heavy tests
// would wait on the compiler; the test asks again for what they built (or
// their error).
func heavyTest(t *testing.T, builds ...func() (string, error)) {
	t.Helper()
	proxyTests.Add(1)
	t.Cleanup(proxyTests.Done)
	t.Parallel()
	for _, build := range builds {
		build()
	}
	take(t, heavySlot)
}

// clientTest marks a test about client libraries: its proxies are
// plainBinary, and it runs beside the other client tests, after every
// proxy test, whose timing-sensitive fault runs it thus never loads. The
// engine's and front end's own tests keep the race detector on everything
// (quorum/, proxy/).
func clientTest(t *testing.T) {
	t.Helper()
	clientTests.Store(t.Name(), struct{}{})
	t.Parallel()
	proxyTests.Wait()
	take(t, clientSlots)
}

// take waits for a place in slots and gives it back when t ends.
func take(t *testing.T, slots chan struct{}) {
	slots <- struct{}{}
	t.Cleanup(func() { <-slots })
}

// proxyBinary is the binary that t's proxies run.
func proxyBinary(t *testing.T) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	if _, ok := clientTests.Load(top); ok {
		return plainBinary
	}
	return binary
}

func TestMain(m *testing.M) {
	flag.Parse()
	n := flag.Lookup("test.parallel").Value.(flag.Getter).Get().(int)
	proxySlots, heavySlot, clientSlots = make(chan struct{}, max(n-1, 1)), make(chan struct{}, 1), make(chan struct{}, n)
	if n == 1 {
		heavySlot = proxySlots
	}
	flag.Set("test.parallel", "1000000") // every top-level test; the slots limit them
	dir, err := os.MkdirTemp("", "lockproxy-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "lockproxy")
	plainBinary = filepath.Join(dir, "lockproxy-plain")
	builds := []*exec.Cmd{exec.Command("go", "build", "-race", "-o", binary, ".."), exec.Command("go", "build", "-o", plainBinary, "..")}
	for _, build := range builds {
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "building lockproxy:", err)
			os.Exit(1)
		}
	}
	for _, build := range builds {
		if err := build.Wait(); err != nil {
			fmt.Fprintln(os.Stderr, "building lockproxy:", err)
			os.Exit(1)
		}
	}
	redistest.SilenceGoRedis()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// brokenFenceBinary is lockproxy with fencing deliberately broken
// (quorum/hooks.go's brokenFence), for the negative control that shows the
// checkers catch it; brokenSetBinary with the set check broken, for the
// negative control of a change of the backend set; ignoreHorizonBinary
// with the lease horizons ignored (a lost backend's wait ends the settle
// delay after its loss), for that of the mixed phase. All are one build,
// made once (negativeControlBinary), which each runs with the breach it
// names. No other test runs them.
var (
	brokenFenceBinary   = sync.OnceValues(func() (string, error) { return negativeControl("fence") })
	brokenSetBinary     = sync.OnceValues(func() (string, error) { return negativeControl("set") })
	ignoreHorizonBinary = sync.OnceValues(func() (string, error) { return negativeControl("horizon") })
)

// negativeControlBinary builds lockproxy with the tag that lets
// LOCKPROXY_NEGATIVE_CONTROL break it (quorum/negative_control.go), niced:
// it compiles beside a heavy test's fault run, and takes only the CPU the
// running tests leave.
var negativeControlBinary = sync.OnceValues(func() (string, error) {
	const tag = "lockproxy_negative_control"
	bin := binary + "-" + tag
	out, err := exec.Command("nice", "-n", "19", "go", "build", "-race", "-tags", tag, "-o", bin, "..").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building lockproxy -tags %s: %v\n%s", tag, err, out)
	}
	return bin, nil
})

// negativeControl returns an executable that runs the negative controls'
// build with breach set, as every start of a proxy in the safety runs
// takes it: a path, with its arguments.
func negativeControl(breach string) (string, error) {
	bin, err := negativeControlBinary()
	if err != nil {
		return "", err
	}
	script := bin + "-" + breach
	text := fmt.Sprintf("#!/bin/sh\nLOCKPROXY_NEGATIVE_CONTROL=%s exec %q \"$@\"\n", breach, bin)
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		return "", err
	}
	return script, nil
}

// runAdopt runs lockproxy adopt with args (the proxies' own settings, a
// listen address aside) and returns what it printed.
func runAdopt(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"adopt"}, args...)...)
	cmd.Env = proxyEnv(nil)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// initBackends runs lockproxy init on fresh backends, with args (a proxy's
// own flags, a listen address aside): each then carries the marked record
// of the backend set that a proxy run with args counts, and a marker naming
// its running redis-server with no wait. A proxy with restart quarantine on
// then counts them at once, and each is a witness of the others' horizons
// from the start: without it, a cold start has none and waits max_ttl.
func initBackends(t *testing.T, servers []*redistest.Server, args ...string) {
	t.Helper()
	if out, err := runInit(args...); err != nil {
		t.Fatalf("lockproxy init on %d backends: %v\n%s", len(servers), err, out)
	}
}

// proxyProcess is one running lockproxy binary.
type proxyProcess struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}

	mu  sync.Mutex
	log strings.Builder
}

var listeningLine = regexp.MustCompile(`msg="lockproxy listening" addr=(\S+)`)

// startProxy runs lockproxy on a free loopback port with args and waits for
// it to log the address it listens on.
func startProxy(t *testing.T, args ...string) *proxyProcess {
	t.Helper()
	return startProxyOn(t, "127.0.0.1:0", listeningLine, nil, args...)
}

// startProxyOn runs lockproxy with -listen listen and args, and env added
// to the test's environment (proxyEnv), and takes its address from the first log line
// that addrLine matches.
func startProxyOn(t *testing.T, listen string, addrLine *regexp.Regexp, env []string, args ...string) *proxyProcess {
	t.Helper()
	return startBinary(t, proxyBinary(t), listen, addrLine, env, args...)
}

// startBinary is startProxyOn for the lockproxy binary bin.
func startBinary(t *testing.T, bin, listen string, addrLine *regexp.Regexp, env []string, args ...string) *proxyProcess {
	t.Helper()
	p := &proxyProcess{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"-listen", listen}, args...)...)
	p.cmd.Env = proxyEnv(env)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting lockproxy: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := addrLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("lockproxy log:\n%s", p.Log())
		}
	})
	select {
	case p.Addr = <-addr:
	case <-p.done:
		t.Fatalf("lockproxy exited before listening:\n%s", p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("lockproxy did not start listening:\n%s", p.Log())
	}
	return p
}

// Log returns what the proxy has logged so far.
func (p *proxyProcess) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Signal sends sig and waits for the process to exit, returning its code.
func (p *proxyProcess) Signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("lockproxy did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

// Client returns a go-redis v9 client to the proxy with its defaults
// (RESP3 via HELLO 3), retries off so that every reply is the proxy's own.
func (p *proxyProcess) Client(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// backends starts n real redis-servers and returns them with the -backends
// flag that names them.
func backends(t *testing.T, n int) ([]*redistest.Server, string) {
	t.Helper()
	servers := redistest.StartN(t, n)
	urls := make([]string, n)
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return servers, strings.Join(urls, ",")
}

// cluster is a proxy over n fresh backends without restart quarantine (they
// were all just started) and with a backend timeout fit for a loaded CI box.
type cluster struct {
	servers []*redistest.Server
	proxy   *proxyProcess
}

func newCluster(t *testing.T, n int, args ...string) *cluster {
	t.Helper()
	servers, list := backends(t, n)
	args = append([]string{"-backends", list, "-restart-quarantine=false", "-backend-timeout", "500ms"}, args...)
	return &cluster{servers: servers, proxy: startProxy(t, args...)}
}

// held returns what each backend holds for key ("" when absent, "?" when it
// does not answer).
func (c *cluster) held(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		v, err := s.Client(t).Get(ctx, key).Result()
		cancel()
		switch {
		case err == redis.Nil:
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

// redisCLI runs redis-cli against the proxy and returns its output.
func redisCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// proxyEnv is the test's environment without its LOCKPROXY_ variables,
// which would configure the proxy under test, and with env.
func proxyEnv(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKPROXY_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// runBinary runs lockproxy to completion (for startup failures); one that
// starts serving instead is killed after 20 s.
func runBinary(args ...string) (string, error) { return runBinaryEnv(nil, args...) }

// runBinaryEnv is runBinary with env added to the test's environment
// (proxyEnv).
func runBinaryEnv(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = proxyEnv(env)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitLog waits until the proxy has logged a line matching re and returns
// its submatches.
func (p *proxyProcess) waitLog(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	redistest.Eventually(t, func() string {
		if m = re.FindStringSubmatch(p.Log()); m == nil {
			return "the proxy never logged " + re.String()
		}
		return ""
	})
	return m
}

// Kill stops the proxy with SIGKILL, as a crash would, and waits for it.
func (p *proxyProcess) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// clients returns the proxy's connected_clients (INFO clients), not
// counting the connection that asks.
func clients(t *testing.T, addr string) int {
	t.Helper()
	out, err := runCLI(addr, "INFO", "clients")
	if err != nil {
		t.Fatalf("INFO clients: %v %s", err, out)
	}
	m := regexp.MustCompile(`connected_clients:(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no connected_clients in INFO clients: %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n - 1
}

// waitClients waits until the proxy counts n client connections besides
// the one that asks.
func waitClients(t *testing.T, addr string, n int) {
	t.Helper()
	redistest.Eventually(t, func() string {
		if got := clients(t, addr); got != n {
			return fmt.Sprintf("the proxy counts %d client connections, want %d", got, n)
		}
		return ""
	})
}

// commandCalls is how many times the backend ran the command name (lower
// case), from INFO commandstats: 0 when never. lockproxy's greeting runs a
// few (its identity script writes a marker with SET), so tests compare
// counts before and after, not with zero.
func commandCalls(t *testing.T, s *redistest.Server, name string) int64 {
	t.Helper()
	stats := s.Client(t).Info(t.Context(), "commandstats").Val()
	_, rest, found := strings.Cut(stats, "cmdstat_"+name+":calls=")
	if !found {
		return 0
	}
	n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	return n
}
