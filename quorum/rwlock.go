package quorum

import (
	"context"
	"errors"
	"time"
)

// Read-write locks are Redisson's RReadWriteLock (docs/design/rwlock.md):
// a hash whose field "mode" says "read" or "write", with one field per
// owner counting its holds, and, per read hold i of an owner, a key
// <prefix>:<owner>:rwlock_timeout:<i> whose TTL is that hold's lease.

// The modes of a read-write lock, as its field "mode" holds them.
const (
	ReadMode  = "read"
	WriteMode = "write"
)

// WriterSuffix ends a writer's field: the owner's, then this
// (RedissonWriteLock.getLockName).
const WriterSuffix = ":write"

var errRWNotBuilt = errors.New("quorum: read-write locks are not built yet")

func (e *Engine) readAcquire(ctx context.Context, key, prefix, owner string, lease time.Duration) (Result, error) {
	return Result{}, errRWNotBuilt
}

func (e *Engine) writeAcquire(ctx context.Context, key, owner string, lease time.Duration) (Result, error) {
	return Result{}, errRWNotBuilt
}

func (e *Engine) readRelease(ctx context.Context, key, prefix, owner, latch string, latchTTL time.Duration) (Result, error) {
	return Result{}, errRWNotBuilt
}

func (e *Engine) writeRelease(ctx context.Context, key, owner string, lease time.Duration, latch string, latchTTL time.Duration) (Result, error) {
	return Result{}, errRWNotBuilt
}

func (e *Engine) rwMode(ctx context.Context, key string) (string, error) { return "", errRWNotBuilt }

func (e *Engine) readLocked(ctx context.Context, key string) (bool, error) {
	return false, errRWNotBuilt
}

func (e *Engine) rwDelete(ctx context.Context, key, mode string) (bool, error) {
	return false, errRWNotBuilt
}

func (e *Engine) renewReads(ctx context.Context, ttl time.Duration, locks []Held) []Renewed {
	out := make([]Renewed, len(locks))
	for i := range out {
		out[i].Err = errRWNotBuilt
	}
	return out
}
