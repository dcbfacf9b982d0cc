package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/lockproxy/lockproxy/internal/admin"
	"github.com/lockproxy/lockproxy/internal/config"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// gcPercent replaces Go's default GOGC of 100. The proxy's live heap is a
// few MiB, so at 100 it collects dozens of times a second under load; at
// 400 a collection costs the same and comes a quarter as often: about a
// tenth less CPU per lock for some 10 MiB more memory. GOGC still wins.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockproxy:", err)
		var usage *config.UsageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run is lockproxy with args, until a signal stops it. -help and -version
// write to stdout, the logs go to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	// First of all: from here on SIGHUP reloads, where by default it kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	if len(args) > 0 && args[0] == "adopt" {
		return adopt(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "init" {
		return initialize(args[1:], stdout)
	}
	build := buildInfo()
	cfg, err := config.Load(args, os.LookupEnv, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil
	case errors.Is(err, config.ErrVersion):
		fmt.Fprintln(stdout, build)
		return nil
	case err != nil:
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	log := config.NewLogger(stderr, cfg.LogFormat, level)
	cfg.Quorum.Logger, cfg.Proxy.Logger = log, log
	cfg.Proxy.Version = build.Version

	// The listeners first, before any backend is dialled: a port taken
	// fails the start at once, in one line. They accept only once the
	// engines are built; until then a client's connection waits in the
	// backlog, as it waited to connect before.
	ls, err := openListeners(cfg)
	if err != nil {
		return err
	}
	defer ls.close() // on a failed start; a second close after Shutdown's is harmless
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}

	if cfg.Embedded {
		urls, stop, err := startEmbedded()
		if err != nil {
			return err
		}
		defer stop()
		cfg.Quorum.Backends = urls
		// They start with the proxy, so quarantine would only delay a first try.
		cfg.Quorum.DisableRestartQuarantine = true
		// In-process servers answer in microseconds, unless the machine is
		// busy (their Lua is slow under the race detector): a newcomer's
		// first lock must not fail for a hiccup of the default 50 ms.
		cfg.Quorum.NodeTimeout = max(cfg.Quorum.NodeTimeout, 500*time.Millisecond)
		cfg.Proxy.Embedded = true
		log.Warn("no backends configured: running on 5 embedded in-memory backends inside this process; they give NO fault tolerance and every lock is lost when lockproxy stops. Configure real Redis masters with -backends or backends in the config file; until then /readyz answers 503")
	}

	obs := admin.NewMetrics(build.Version, build.Revision, build.GoVersion)
	cfg.Quorum.Observer, cfg.Proxy.Observer = obs, obs
	groups, err := newGroups(cfg, log)
	if err != nil {
		return err
	}
	defer groups.Close()
	cfg.Proxy.Backends, cfg.Proxy.Watcher, cfg.Proxy.Lister = groups, groups, groups
	srv, err := proxy.New(groups, cfg.Proxy)
	if err != nil {
		return err
	}
	if err := obs.Register(prometheus.DefaultRegisterer, groups, srv); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	r := &reloader{
		load:    func() (*config.Config, error) { return config.Load(args, os.LookupEnv, io.Discard) },
		log:     log,
		level:   level,
		srv:     srv,
		groups:  groups,
		running: cfg.Fingerprints,
	}
	r.tls.Store(cfg.TLS)
	r.shutdownTimeout.Store(int64(cfg.ShutdownTimeout))
	attrs := []any{"backends", len(groups.Backends()), "quorum", groups.Quorum()}
	if n := len(groups.Engines()); n > 1 {
		attrs = append(attrs, "groups", n)
	}
	lns, mln := ls.serve(cfg, log, &r.tls, append(attrs, "max_ttl", cfg.Quorum.MaxTTL, "restart_quarantine", !cfg.Quorum.DisableRestartQuarantine)...)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	for _, ln := range lns {
		g.Go(func() error { return srv.Serve(ln) })
	}
	var ops *http.Server
	if mln != nil {
		status := admin.NewStatusPage(groups, srv.Stats, cfg.Embedded, build.Version, log)
		g.Go(func() error {
			status.Sample(gctx)
			return nil
		})
		ops = &http.Server{Handler: admin.Handler(groups, status, cfg.Pprof, cfg.Embedded), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := ops.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		r.watch(gctx, hup)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		timeout := time.Duration(r.shutdownTimeout.Load())
		log.Info("shutting down: finishing commands in flight", "timeout", timeout)
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := srv.Shutdown(sctx)
		if ops != nil {
			ops.Shutdown(sctx)
		}
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("lockproxy stopped")
	return nil
}

// newGroups starts the engine of each shard group, or of the one set of
// backends. Each group's set records its slot range, so that proxies
// whose groups differ are refused where the other's records are, rather
// than each granting a key in another group.
func newGroups(cfg *config.Config, log *slog.Logger) (*shard.Groups, error) {
	var engines []*quorum.Engine
	fail := func(err error) (*shard.Groups, error) {
		for _, e := range engines {
			e.Close()
		}
		return nil, err
	}
	configs := groupConfigs(cfg)
	for i, qc := range configs {
		if len(configs) > 1 {
			qc.Logger = log.With("group", i)
		}
		e, err := quorum.New(qc)
		if err != nil {
			if len(configs) > 1 {
				return fail(fmt.Errorf("group %d: %w", i+1, err))
			}
			return fail(fmt.Errorf("backends: %w", err))
		}
		engines = append(engines, e)
	}
	g, err := shard.New(engines)
	if err != nil {
		return fail(err)
	}
	return g, nil
}

// groupConfigs is the engine configuration of each shard group, or of the
// one set of backends.
func groupConfigs(cfg *config.Config) []quorum.Config {
	sets := cfg.Groups
	if len(sets) == 0 {
		sets = [][]string{cfg.Quorum.Backends}
	}
	configs := make([]quorum.Config, len(sets))
	for i, backends := range sets {
		qc := cfg.Quorum
		qc.Backends = backends
		if len(sets) > 1 {
			first, last := shard.Range(i, len(sets))
			qc.SetLabel = fmt.Sprintf("group %d of %d, slots %d-%d", i+1, len(sets), first, last)
		}
		configs[i] = qc
	}
	return configs
}

// listeners are those of the plain, TLS and metrics addresses and of the
// Unix socket that are configured, open but not yet serving.
type listeners struct{ local, plain, secure, ops net.Listener }

// openListeners opens every configured listener, or none: a port taken
// closes those opened before it and names its key.
func openListeners(cfg *config.Config) (*listeners, error) {
	ls := &listeners{}
	var err error
	open := func(key, addr string) net.Listener {
		if err != nil || addr == "" {
			return nil
		}
		ln, lerr := net.Listen("tcp", addr)
		if lerr != nil {
			err = fmt.Errorf("%s: %w", key, lerr)
			return nil
		}
		return ln
	}
	ls.plain, ls.secure, ls.ops = open("listen", cfg.Listen), open("tls_listen", cfg.TLSListen), open("metrics", cfg.Metrics)
	if err == nil && cfg.UnixSocket != "" {
		if ls.local, err = listenUnix(cfg.UnixSocket, cfg.UnixSocketPerm); err != nil {
			err = fmt.Errorf("unix_socket: %w", err)
		}
	}
	if err != nil {
		ls.close()
		return nil, err
	}
	return ls, nil
}

// serve returns the RESP listeners and the metrics one, and logs each,
// the RESP ones with attrs: only once the engines are built, when they
// are served, so that "listening" means ready to answer. The TLS listener
// serves, to each new connection, the settings that tlsNow holds then, so
// that a reload rotates the certificate without closing a connection.
func (ls *listeners) serve(cfg *config.Config, log *slog.Logger, tlsNow *atomic.Pointer[tls.Config], attrs ...any) (lns []net.Listener, ops net.Listener) {
	if ls.local != nil {
		lns = append(lns, ls.local)
		log.Info("lockproxy listening on a Unix socket", append([]any{"path", cfg.UnixSocket, "perm", fmt.Sprintf("%o", cfg.UnixSocketPerm)}, attrs...)...)
	}
	if ls.plain != nil {
		lns = append(lns, ls.plain)
		log.Info("lockproxy listening", append([]any{"addr", ls.plain.Addr().String()}, attrs...)...)
	}
	if ls.secure != nil {
		lns = append(lns, tls.NewListener(ls.secure, &tls.Config{
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return tlsNow.Load(), nil },
		}))
		log.Info("lockproxy listening with TLS", append([]any{"addr", ls.secure.Addr().String(),
			"min_version", tls.VersionName(cfg.TLS.MinVersion), "client_certificates", cfg.TLS.ClientCAs != nil}, attrs...)...)
	}
	if ls.ops != nil {
		log.Info("metrics and health listening", "addr", ls.ops.Addr().String())
	}
	return lns, ls.ops
}

func (ls *listeners) close() {
	for _, ln := range []net.Listener{ls.local, ls.plain, ls.secure, ls.ops} {
		if ln != nil {
			ln.Close()
		}
	}
}

// listenUnix listens on a Unix socket at path, with permissions perm. A
// socket left there by a lockproxy that did not close (killed) is
// replaced; one that answers is another server's, and is not. The socket
// is removed when the listener closes.
func listenUnix(path string, perm fs.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use: another server listens on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// The socket is made with perm rather than changed to it after, so
	// that nobody else can connect in between. The umask is the
	// process's: this runs at start, before anything else makes files.
	old := umask(int(0o777 &^ perm))
	ln, err := net.Listen("unix", path)
	umask(old)
	return ln, err
}
