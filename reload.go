package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/internal/config"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
)

// reloader applies the configuration, read again on SIGHUP, to the running
// process: the keys whose reload is live take effect for new connections,
// the others are refused with a log line and keep their running values.
// Only its watch goroutine calls reload, so reloads never overlap.
type reloader struct {
	load   func() (*config.Config, error) // the file and the flags as given at start
	log    *slog.Logger
	level  *slog.LevelVar
	srv    *proxy.Server
	groups *shard.Groups
	// tls is what the TLS listener serves to a new connection (nil
	// without one), and shutdownTimeout what SIGTERM waits, in nanoseconds.
	tls             atomic.Pointer[tls.Config]
	shutdownTimeout atomic.Int64
	// running are the fingerprints of the values in effect: a refused
	// key keeps its old one, so that every later reload refuses it again
	// until its value is put back.
	running config.Fingerprints
}

// watch reloads on every signal from hup until ctx ends.
func (r *reloader) watch(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload()
		}
	}
}

// reload reads the configuration again and applies what may change while
// running. A configuration that does not load changes nothing and logs one
// error, naming the key; keys that cannot change are refused with one
// warning per kind, and what can is applied.
func (r *reloader) reload() {
	next, err := r.load()
	if err == nil {
		// It was checked as a whole when loaded; this fails only if the
		// proxy's own checks say otherwise.
		err = r.srv.Reload(next.Proxy)
	}
	if err != nil {
		r.log.Error("reload failed: the running configuration is kept", "err", err)
		return
	}
	changed := next.Fingerprints.Changed(r.running)
	refused := changed[config.Restart]
	if len(refused) > 0 {
		r.log.Warn("reload: these keys change only with a restart; their running values are kept",
			"keys", strings.Join(refused, ","))
	}
	if keys := changed[config.Engine]; len(keys) > 0 {
		if err := changeEngine(r.groups, next.Quorum); err != nil {
			r.log.Warn("reload: the backends and engine settings are not changed; the running ones are kept",
				"keys", strings.Join(keys, ","), "reason", err)
			refused = append(refused, keys...)
		}
	}
	for _, name := range refused {
		next.Fingerprints[name] = r.running[name]
	}
	r.running = next.Fingerprints
	// Nil when tls_listen was emptied, which is refused: the running TLS
	// listener keeps its settings.
	if next.TLS != nil {
		r.tls.Store(next.TLS)
	}
	r.shutdownTimeout.Store(int64(next.ShutdownTimeout))
	r.level.Set(next.LogLevel)
	applied := strings.Join(changed[config.Live], ",")
	if applied == "" {
		applied = "none"
	}
	r.log.Info("configuration reloaded", "changed", applied)
}

// errEngineChange is changeEngine's answer: the engine does not change its
// backends while it runs.
var errEngineChange = errors.New("the backends and the engine's settings change only with a restart; a change of backends is adopted (lockproxy adopt) and rolled out by restarting every proxy (docs/backends.md: Changing the backend set)")

// changeEngine is where a reload hands the running engine a configuration
// whose backend set, backend TLS or engine settings (the keys whose reload
// is engine) changed. It refuses every change and the running engine is
// kept as it is: a new set is safe only with a new epoch, whose records
// fence the old set's proxies off (quorum/members.go), and a restart with
// the new configuration does that as well as a reload could, with no
// engine half-way between two sets.
func changeEngine(g *shard.Groups, next quorum.Config) error {
	return errEngineChange
}
