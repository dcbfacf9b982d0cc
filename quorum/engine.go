package quorum

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Config configures an Engine. The zero value of every field but Backends
// means its default.
type Config struct {
	// Backends are go-redis URLs (redis://, rediss://, unix://) of the N
	// independent masters. Required.
	Backends []string
	// NodeTimeout bounds each request to one backend. Default: 50ms.
	NodeTimeout time.Duration
	// DriftFactor is the share of the TTL allowed for clock drift between
	// backends; drift = TTL × DriftFactor + 2ms. Default: 0.01.
	DriftFactor float64
	// MaxTTL is the longest lock TTL accepted, and how long a restarted
	// backend stays in quarantine. Default: 60s.
	MaxTTL time.Duration
	// DisableRestartQuarantine lets a backend count toward quorums as soon as
	// it answers, even right after a restart. Safe only when the backends
	// persist every write (appendfsync always). Default: false.
	DisableRestartQuarantine bool
	// Logger receives one line per backend state change. Default: slog.Default().
	Logger *slog.Logger
}

// Result describes a decided lock operation.
type Result struct {
	// Validity is how long the lock is known held from now on (acquire and
	// extend only): TTL − elapsed − drift.
	Validity time.Duration
	// Counted is how many backends gave a reply that counts toward quorum.
	Counted int
	// Succeeded is how many of those did what was asked.
	Succeeded int
}

// Engine runs Redlock operations over its backends. It is safe for
// concurrent use.
type Engine struct {
	cfg Config
}

var errTODO = errors.New("quorum: not implemented")

// New validates cfg and connects lazily to its backends.
func New(cfg Config) (*Engine, error) { return &Engine{cfg: cfg}, nil }

// Close closes every backend connection.
func (e *Engine) Close() error { return nil }

// MaxTTL returns the longest TTL the engine accepts.
func (e *Engine) MaxTTL() time.Duration { return e.cfg.MaxTTL }

func (e *Engine) Acquire(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}
func (e *Engine) Release(ctx context.Context, key, token string) (Result, error) {
	return Result{}, errTODO
}
func (e *Engine) Extend(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}
func (e *Engine) Get(ctx context.Context, key string) (string, error)         { return "", errTODO }
func (e *Engine) PTTL(ctx context.Context, key string) (time.Duration, error) { return 0, errTODO }
func (e *Engine) Exists(ctx context.Context, key string) (bool, error)        { return false, errTODO }
func (e *Engine) Delete(ctx context.Context, key string) (bool, error)        { return false, errTODO }
func (e *Engine) Expire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	return false, errTODO
}
