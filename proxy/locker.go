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
	// Release deletes key where token holds it. May return quorum.ErrNotHeld,
	// which is also quorum.ErrAbsent when a quorum answered that the key
	// does not exist at all (redsync tells that apart: -1).
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

	// The operations below serve the lock scripts of client libraries.

	// AcquireAll takes every key for token; a backend agrees only when it
	// set all of them (none existed). May return quorum.ErrNotAcquired.
	AcquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error)
	// ReleaseAll deletes the keys token holds; it succeeds when a quorum
	// deleted every one of them. May return quorum.ErrNotHeld.
	ReleaseAll(ctx context.Context, keys []string, token string) (quorum.Result, error)
	// ExtendAll sets the TTL of every key where token holds all of them.
	// May return quorum.ErrNotHeld.
	ExtendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (quorum.Result, error)
	// ExtendBy adds add to key's remaining TTL where token holds it (and
	// the key has a TTL). May return quorum.ErrNotHeld, or a
	// *quorum.TTLError when the new TTL would exceed max_ttl.
	ExtendBy(ctx context.Context, key, token string, add time.Duration) (quorum.Result, error)
	// ExtendOrAcquire sets key's TTL where token holds it and takes it
	// where it is free. May return quorum.ErrNotHeld.
	ExtendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (quorum.Result, error)
	// AcquireOrRenew takes key for value, or renews it where the value held
	// starts with the same first tokenLen bytes (bsm/redislock). May return
	// quorum.ErrNotAcquired.
	AcquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (quorum.Result, error)
	// OwnerPTTL returns how long token still holds key on a quorum, less
	// drift. May return quorum.ErrNotHeld.
	OwnerPTTL(ctx context.Context, key, token string) (time.Duration, error)
}

var _ Locker = (*quorum.Engine)(nil)
