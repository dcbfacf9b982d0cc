//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// options are the command's flags.
type options struct {
	duration    time.Duration
	rounds      int
	concurrency []int
	ttl         time.Duration
	retryDelay  time.Duration
	contendKeys int
	// uncontended and contended are the modes to measure.
	uncontended, contended bool
	backends               []string
	proxyAddr              string
	proxyBin               string
	proxyArgs              []string
	idleConns              int
	jsonPath               string
	profileDir             string
	pprofAddr              string // where the proxy serves /debug/pprof/; empty: unknown
	// fencedPprofAddr is where the fenced proxy of -fencing serves it, with
	// -profile.
	fencedPprofAddr string
	soak            time.Duration
	soakWorkers     int
	// fencing starts a second proxy with -fencing over the same backends
	// and measures it as one more system, in turns with the others.
	fencing bool
	// baselineBin is a second lockproxy binary, measured as the system
	// baseline in turns with proxy; empty: none.
	baselineBin string
	// costTable builds a variant of the proxy per feature with that
	// feature's per-cycle work off (costtable.go) and measures each as one
	// more system.
	costTable bool
	// unix: the started proxies' clients connect on a Unix socket.
	unix    bool
	systems []string // the systems to measure; empty: all
	// waiting runs the waiting bench (waiting.go) in place of the table.
	waitingOn bool
	sessions  int // -sessions: the session bench's locks; 0: none
	waiting   waitingOptions
	// openLoop are the offered rates (cycles/s) of the open-loop bench
	// (openloop.go), run in place of the table; empty: none.
	openLoop []int
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "length of one round of one system")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per system and setting (taken in turns: direct, redsync, proxy, direct, …)")
	conc := fs.String("concurrency", "1,8,32,128", "comma-separated worker counts")
	fs.DurationVar(&o.ttl, "ttl", 10*time.Second, "lock TTL")
	fs.DurationVar(&o.retryDelay, "retry-delay", time.Millisecond, "contended mode: pause after a failed attempt, the same for all systems")
	modes := fs.String("modes", "uncontended,contended", "comma-separated modes to measure: uncontended (a key per worker), contended (all on -contended-keys keys)")
	fs.IntVar(&o.contendKeys, "contended-keys", 8, "contended mode: number of keys all workers share")
	backends := fs.String("backends", "", "comma-separated host:port of Redis masters to use instead of starting 5 redis-servers")
	fs.StringVar(&o.proxyAddr, "proxy", "", "host:port of a running lockproxy over the same backends (no memory figures then)")
	fs.StringVar(&o.proxyBin, "proxy-bin", "", "lockproxy binary to start; empty: go build it from the module root")
	proxyArgs := fs.String("proxy-args", "", "extra space-separated flags for the started lockproxy")
	fs.IntVar(&o.idleConns, "idle-conns", 10000, "idle client connections for the memory figure; 0 skips it")
	fs.StringVar(&o.jsonPath, "json", "", "write all figures to this file as JSON")
	fs.StringVar(&o.profileDir, "profile", "", "write a CPU profile of the proxy's first round of every setting into this directory")
	fs.StringVar(&o.pprofAddr, "pprof-addr", "", "with -proxy: its -metrics host:port, served with -pprof, for -profile and -soak")
	fs.DurationVar(&o.soak, "soak", 0, "after the table, run the proxy alone this long and sample its memory; 0 skips it")
	fs.IntVar(&o.soakWorkers, "soak-workers", 32, "workers of the -soak run, uncontended")
	fs.StringVar(&o.baselineBin, "baseline-bin", "", "also start this lockproxy binary (an earlier build) with the same flags and measure it (baseline) in turns with the proxy, for before-and-after figures from the same run")
	fs.BoolVar(&o.costTable, "cost-table", false, "also build this tree once per feature with that feature's per-cycle work off (quorum.measureWithout=setcheck, stamp, horizon, notice, topup, all), start each over the same backends, measure them in turns with the proxy, and print the cost per feature as a markdown table")
	fs.BoolVar(&o.unix, "unix", false, "clients reach the started proxies on a Unix socket (unix_socket) instead of loopback TCP, as a sidecar's may")
	fs.BoolVar(&o.fencing, "fencing", false, "also start a lockproxy with -fencing and measure it (proxy-fenced) in turns with the plain one")
	fs.BoolVar(&o.waitingOn, "waiting", false, "run the waiting bench instead of the table: polling against LOCK.ACQUIRE ... WAIT on one key, and wake-up latency across two proxies")
	fs.IntVar(&o.sessions, "sessions", 0, "run the session bench instead of the table: this many session-bound locks (SET k token NX, no TTL), one per connection, against the same connections idle, each phase -duration long")
	waitConc := fs.String("wait-contenders", "8,32,128", "-waiting: comma-separated numbers of contenders on the one key")
	fs.DurationVar(&o.waiting.hold, "wait-hold", time.Millisecond, "-waiting: how long each grant is held before its release")
	fs.IntVar(&o.waiting.wakes, "wait-wakes", 200, "-waiting: wake-ups measured across proxies")
	openLoop := fs.String("open-loop", "", "run the open-loop bench instead of the table: comma-separated offered rates of lock cycles per second (e.g. 1000,5000,10000,20000), each cycle on its own key at its due time, latency from that time")
	only := fs.String("systems", "", "comma-separated systems to measure (direct, redsync, proxy, proxy-fenced, baseline); empty: all. -baseline-bin's and -cost-table's are measured whatever it says")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-concurrency: bad worker count %q", s)
		}
		o.concurrency = append(o.concurrency, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		switch strings.TrimSpace(m) {
		case "uncontended":
			o.uncontended = true
		case "contended":
			o.contended = true
		default:
			return nil, fmt.Errorf("-modes: no mode %q (uncontended, contended)", m)
		}
	}
	for _, b := range strings.Split(*backends, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.backends = append(o.backends, b)
		}
	}
	o.proxyArgs = strings.Fields(*proxyArgs)
	for _, c := range strings.Split(*waitConc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-wait-contenders: bad count %q", c)
		}
		o.waiting.contenders = append(o.waiting.contenders, n)
	}
	for _, r := range strings.Split(*openLoop, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, fmt.Errorf("-open-loop: bad rate %q (cycles per second, 1 to 1000000)", r)
		}
		o.openLoop = append(o.openLoop, n)
	}
	for _, name := range strings.Split(*only, ",") {
		if name = strings.TrimSpace(name); name != "" {
			if !slices.Contains(systemNames, name) {
				return nil, fmt.Errorf("-systems: no system %q", name)
			}
			o.systems = append(o.systems, name)
		}
	}
	switch {
	case o.duration <= 0 || o.rounds < 1 || o.ttl < time.Millisecond || o.contendKeys < 1:
		return nil, errors.New("-duration, -rounds, -ttl and -contended-keys must be positive")
	case o.proxyAddr != "" && len(o.backends) == 0:
		return nil, errors.New("-proxy needs -backends: the proxy's own backends, for direct and redsync")
	case o.pprofAddr != "" && o.proxyAddr == "":
		return nil, errors.New("-pprof-addr is for -proxy: the started proxy serves pprof on a port of the bench's choosing")
	case o.profileDir != "" && o.proxyAddr != "" && o.pprofAddr == "":
		return nil, errors.New("-profile with -proxy needs -pprof-addr: the proxy's -metrics address, started with -pprof")
	case o.soak < 0 || (o.soak > 0 && o.soakWorkers < 1):
		return nil, errors.New("-soak must not be negative, and -soak-workers must be positive")
	case o.waitingOn && o.proxyAddr != "":
		return nil, errors.New("-waiting starts both proxies itself: it cannot be used with -proxy")
	case o.sessions < 0:
		return nil, errors.New("-sessions must not be negative")
	case o.waiting.wakes < 1:
		return nil, errors.New("-wait-wakes must be positive")
	case o.fencing && o.proxyAddr != "":
		return nil, errors.New("-fencing starts both proxies itself: it cannot be used with -proxy")
	case o.unix && o.proxyAddr != "":
		return nil, errors.New("-unix is for the proxies the bench starts: it cannot be used with -proxy")
	case o.baselineBin != "" && o.proxyAddr != "":
		return nil, errors.New("-baseline-bin starts both proxies itself: it cannot be used with -proxy")
	case o.costTable && (o.proxyAddr != "" || o.proxyBin != ""):
		return nil, errors.New("-cost-table builds the proxy of this tree and its variants: it cannot be used with -proxy or -proxy-bin")
	case o.costTable && len(o.systems) > 0 && !slices.Contains(o.systems, "proxy"):
		return nil, errors.New("-cost-table compares with the full build, the system proxy: keep it in -systems")
	case o.costTable && (o.waitingOn || o.sessions > 0 || len(o.openLoop) > 0):
		return nil, errors.New("-cost-table is a table of the closed-loop bench: it cannot be used with -waiting, -sessions or -open-loop")
	case slices.Contains(o.systems, "baseline") && o.baselineBin == "":
		return nil, errors.New("-systems baseline needs -baseline-bin")
	case slices.Contains(o.systems, "proxy-fenced") && !o.fencing:
		return nil, errors.New("-systems proxy-fenced needs -fencing")
	case (o.soak > 0 || o.idleConns > 0) && len(o.systems) > 0 && !slices.Contains(o.systems, "proxy"):
		return nil, errors.New("-soak and -idle-conns measure the plain proxy: keep it in -systems, or pass -idle-conns 0")
	}
	return o, nil
}

func run(args []string, out io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// go-redis logs each failed dial and pool event; errors are counted instead.
	redis.SetLogger(discardLogger{})

	// Before any child starts: the proxy inherits this limit.
	nofile, err := raiseNoFile()
	if err != nil {
		return err
	}
	env := newEnv()
	env.unix = o.unix
	defer env.close()
	if len(o.backends) == 0 {
		if o.backends, err = env.startRedis(ctx, 5); err != nil {
			return err
		}
	}
	if o.profileDir != "" {
		// Now, not after the first rounds.
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}
	proxy := o.proxyAddr
	if proxy == "" {
		if proxy, err = startProxy(ctx, o, env); err != nil {
			return err
		}
	}
	if o.sessions > 0 {
		r, err := runSessions(ctx, o, env, proxy, o.sessions, out)
		if err != nil {
			return err
		}
		if o.jsonPath != "" {
			return writeJSONFile(o.jsonPath, r)
		}
		return nil
	}
	if o.waitingOn {
		w, err := runWaiting(ctx, o, env, proxy, out)
		if err != nil {
			return err
		}
		if o.jsonPath != "" {
			return writeJSONFile(o.jsonPath, w)
		}
		return nil
	}
	var others []namedProxy
	if o.baselineBin != "" {
		baseline, err := startBaselineProxy(ctx, o, env)
		if err != nil {
			return err
		}
		others = append(others, namedProxy{"baseline", baseline})
	}
	if o.costTable {
		variants, err := startVariants(ctx, o, env)
		if err != nil {
			return err
		}
		others = append(others, variants...)
	}
	var fenced string
	if o.fencing {
		if fenced, err = startFencedProxy(ctx, o, env); err != nil {
			return err
		}
	}
	if o.pprofAddr != "" {
		if err := (pprofClient{o.pprofAddr}).wait(ctx); err != nil {
			return err
		}
	}
	maxWorkers := 1
	for _, n := range o.concurrency {
		maxWorkers = max(maxWorkers, n)
	}
	if o.soak > 0 {
		maxWorkers = max(maxWorkers, o.soakWorkers)
	}
	if len(o.openLoop) > 0 {
		// Pools as large as the cycles that may be under way at once.
		maxWorkers = max(maxWorkers, openLoopInFlight)
	}
	systems := newSystems(o.backends, proxy, fenced, others, env.sockets, maxWorkers, o.ttl, o.systems)
	defer systems.close()
	if len(o.openLoop) > 0 {
		r, err := runOpenLoop(ctx, o, systems, env.cpuClock(), out)
		if err != nil {
			return err
		}
		if o.jsonPath != "" {
			return writeJSONFile(o.jsonPath, r)
		}
		return nil
	}

	rep := &report{
		Started: time.Now().UTC(), Machine: machineInfo(), NoFileLimit: nofile,
		Params: params{
			Duration: o.duration.String(), Rounds: o.rounds, Concurrency: o.concurrency,
			TTL: o.ttl.String(), RetryDelay: o.retryDelay.String(), ContendedKeys: o.contendKeys,
			Backends: o.backends, Proxy: proxy, ProxyArgs: o.proxyArgs, FencedProxy: fenced,
			ProfileDir: o.profileDir, PprofAddr: o.pprofAddr, CostTable: o.costTable,
		},
	}
	if env.proxy != nil {
		rep.Memory.RSSStart = env.proxyRSS()
	}
	fmt.Fprintf(out, "lockproxy bench: %d backends, proxy %s, %s × %d rounds per system, ttl %s; %s\n",
		len(o.backends), proxy, o.duration, o.rounds, o.ttl, rep.Machine)
	// First, on a machine that nothing else of the bench keeps busy.
	if rep.Floor, err = measureFloor(ctx, o.backends); err != nil {
		return err
	}
	if err := measure(ctx, o, systems, env.cpuClock(), rep, out); err != nil {
		return err
	}
	if env.proxy != nil {
		rep.Memory.RSSAfterLoad = env.proxyRSS()
	}
	if fenced != "" {
		rep.FencingTokens, rep.FencingWriteBacks = fencingCounts(ctx, fenced)
	}
	if o.soak > 0 {
		if rep.Soak, err = runSoak(ctx, o, systems.byName("proxy"), probeOf(o, env), out); err != nil {
			return err
		}
	}
	if env.proxy != nil && o.idleConns > 0 {
		if err := measureIdle(ctx, env, proxy, o.idleConns, &rep.Memory); err != nil {
			return err
		}
	}
	rep.Machine.LoadAfter = loadAvg()
	rep.ratios()
	rep.print(out)
	if o.jsonPath != "" {
		return rep.writeJSON(o.jsonPath)
	}
	return nil
}

// startProxy builds (unless -proxy-bin) and starts lockproxy. With -profile
// or -soak it also serves pprof, on a port chosen here because the proxy
// logs the one it got only at info level, which the bench turns off.
func startProxy(ctx context.Context, o *options, e *env) (string, error) {
	bin, args, err := proxyCommand(ctx, o, e)
	if err != nil {
		return "", err
	}
	if o.profileDir != "" || o.soak > 0 {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		o.pprofAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// Last, so they win over a -metrics in -proxy-args.
		args = append(args, "-metrics", o.pprofAddr, "-pprof")
	}
	addr, c, err := e.startProxy(ctx, bin, o.backends, args)
	e.proxy = c
	return addr, err
}

// proxyCommand is the binary and the flags of the proxies the bench starts:
// built unless -proxy-bin; flags -proxy-args after room for the idle
// connections, which are opened while the load's pooled connections are
// still open (first, so -proxy-args may say otherwise). The flags' slice
// is the caller's to append to.
func proxyCommand(ctx context.Context, o *options, e *env) (string, []string, error) {
	bin := o.proxyBin
	if bin == "" {
		var err error
		if bin, err = e.buildProxy(ctx); err != nil {
			return "", nil, err
		}
	}
	return bin, proxyFlags(o), nil
}

// proxyFlags are the flags of the proxies the bench starts, in a slice of
// the caller's.
func proxyFlags(o *options) []string {
	args := append([]string{"-max-clients", strconv.Itoa(o.idleConns + 4096)}, o.proxyArgs...)
	return slices.Clip(args)
}

// startBaselineProxy starts the proxy of -baseline-bin: that binary, with
// the flags of the plain one.
func startBaselineProxy(ctx context.Context, o *options, e *env) (string, error) {
	addr, c, err := e.startProxy(ctx, o.baselineBin, o.backends, proxyFlags(o))
	if err != nil {
		return "", err
	}
	e.addOther("baseline", c)
	return addr, nil
}

// startFencedProxy starts the proxy of -fencing: the same binary and flags
// as the plain one, and -fencing. With -profile it serves pprof too, so
// that its rounds are profiled beside the plain one's; -soak looks at the
// plain one alone.
func startFencedProxy(ctx context.Context, o *options, e *env) (string, error) {
	bin, args, err := proxyCommand(ctx, o, e)
	if err != nil {
		return "", err
	}
	if o.profileDir != "" {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		o.fencedPprofAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args = append(args, "-metrics", o.fencedPprofAddr, "-pprof")
	}
	addr, c, err := e.startProxy(ctx, bin, o.backends, append(args, "-fencing"))
	e.fenced = c
	return addr, err
}

// probeOf is what the soak can read of the proxy.
func probeOf(o *options, e *env) soakProbe {
	var p soakProbe
	if e.proxy != nil {
		p.rss = e.proxyRSS
	}
	if o.pprofAddr != "" {
		p.pp = &pprofClient{o.pprofAddr}
	}
	return p
}

// fencingCounts reads from the proxy's INFO backends how many tokens it
// minted and how many of them took a write-back (the extra round trip
// fencing avoids in the steady state); -1 each when it does not say.
func fencingCounts(ctx context.Context, addr string) (tokens, writeBacks int64) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	tokens, writeBacks = -1, -1
	info, err := cl.Info(ctx, "backends").Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "fencing_tokens:"); ok {
			tokens, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "fencing_write_backs:"); ok {
			writeBacks, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// raiseNoFile lifts the soft open-files limit to the hard one: 10,000 idle
// connections need as many descriptors here and in the proxy.
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, nil
}
