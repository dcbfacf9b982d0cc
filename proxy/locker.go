package proxy

import (
	"context"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Locker is what the front end needs from the lock engine. Every method
// returns quorum.ErrNoQuorum (a *quorum.NoQuorumError) when too few backends
// answered to decide, and a *quorum.TTLError for a TTL outside (0, max_ttl].
type Locker interface {
	// Acquire takes key for token. May return quorum.ErrNotAcquired.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error)
	// Release deletes key where token holds it. May return quorum.ErrNotHeld.
	Release(ctx context.Context, key, token string) (quorum.Result, error)
	// Extend sets key's TTL where token holds it. May return quorum.ErrNotHeld.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error)
	// Get returns the value held by a quorum. May return quorum.ErrNotFound.
	Get(ctx context.Context, key string) (string, error)
	// PTTL returns how long the quorum value stays held, less drift.
	// May return quorum.ErrNotFound or quorum.ErrNoExpiry.
	PTTL(ctx context.Context, key string) (time.Duration, error)
	// Exists reports whether key exists on a quorum.
	Exists(ctx context.Context, key string) (bool, error)
	// Delete deletes key unconditionally; true when it existed on a quorum.
	Delete(ctx context.Context, key string) (bool, error)
	// Expire sets key's TTL unconditionally; true when set on a quorum.
	Expire(ctx context.Context, key string, ttl time.Duration) (bool, error)
	// MaxTTL is the longest TTL accepted, used for SETNX's default TTL.
	MaxTTL() time.Duration
}

var _ Locker = (*quorum.Engine)(nil)
