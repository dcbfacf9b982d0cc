package quorum

import (
	"context"
	"time"
)

// AcquireAll takes every key for token on a quorum of backends; a backend
// agrees only when it set all of them, none existing before (node-redlock,
// @sesamecare-oss/redlock). Errors as Acquire.
func (e *Engine) AcquireAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}

// ReleaseAll deletes the keys token holds; it succeeds when a quorum
// deleted every one of them. Errors as Release.
func (e *Engine) ReleaseAll(ctx context.Context, keys []string, token string) (Result, error) {
	return Result{}, errTODO
}

// ExtendAll sets the TTL of every key on the backends where token holds all
// of them. Errors as Extend.
func (e *Engine) ExtendAll(ctx context.Context, keys []string, token string, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}

// ExtendBy adds add to key's remaining TTL where token holds it and the key
// has a TTL (redis-py's extend). Errors as Extend; a *TTLError when the new
// TTL would exceed MaxTTL on a backend.
func (e *Engine) ExtendBy(ctx context.Context, key, token string, add time.Duration) (Result, error) {
	return Result{}, errTODO
}

// ExtendOrAcquire sets key's TTL where token holds it and takes it where it
// is free (redsync WithSetNXOnExtend, RedLock.net, Spring obtain). Errors as
// Extend.
func (e *Engine) ExtendOrAcquire(ctx context.Context, key, token string, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}

// AcquireOrRenew takes key for value, or renews it with value where the
// value held starts with the same first tokenLen bytes (bsm/redislock's
// obtain with a caller-chosen token). Errors as Acquire.
func (e *Engine) AcquireOrRenew(ctx context.Context, key, value string, tokenLen int, ttl time.Duration) (Result, error) {
	return Result{}, errTODO
}

// OwnerPTTL returns how long token still holds key on a quorum, less the
// drift allowance. It returns ErrNotHeld when token does not hold key on a
// quorum, and a *NoQuorumError when too few backends answered.
func (e *Engine) OwnerPTTL(ctx context.Context, key, token string) (time.Duration, error) {
	return 0, errTODO
}
