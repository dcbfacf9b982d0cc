package quorum

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Read-write locks are Redisson's RReadWriteLock (docs/design/rwlock.md):
// a hash whose field "mode" says "read" or "write", with one field per
// owner counting its holds (a writer's is the owner's with WriterSuffix),
// and, per read hold i of an owner, a key <prefix>:<owner>:rwlock_timeout:<i>
// whose TTL is that hold's lease. The engine runs its own scripts for
// them (lua/rw*.lua), as for hash locks (hashlock.go).
//
// They are decided by the rule every lock is (rule.go). Each backend
// grants a reader where no other owner's writer holds the lock and a
// writer where no other owner holds it at all, so no backend ever holds a
// writer beside another owner; any two quorums share a backend, which
// granted at most one of two grants that cannot coexist (a reader and
// another's writer, two writers). Readers never refuse readers.

// The modes of a read-write lock, as its field "mode" holds them.
const (
	ReadMode  = "read"
	WriteMode = "write"
)

// WriterSuffix ends a writer's field: the owner's, then this
// (RedissonWriteLock.getLockName).
const WriterSuffix = ":write"

// readAcquire takes or re-enters the read lock key for owner with a
// lease, its hold's timeout key under prefix; writeAcquire the write
// lock. Each fails as hashAcquire does, with Result.HolderTTL, and rolls
// back a failed attempt as it does: each attempt records its id beside the
// owner's field, and the undo (lua/rw_undo.lua) takes back only that
// attempt's hold, leaving every other owner's.
func (e *Engine) readAcquire(ctx context.Context, key, prefix, owner string, lease time.Duration) (Result, error) {
	return e.rwAcquire(ctx, key, prefix, owner, ReadMode, lease)
}

func (e *Engine) writeAcquire(ctx context.Context, key, owner string, lease time.Duration) (Result, error) {
	return e.rwAcquire(ctx, key, "", owner, WriteMode, lease)
}

func (e *Engine) rwAcquire(ctx context.Context, key, prefix, owner, mode string, lease time.Duration) (Result, error) {
	if err := e.checkTTL(lease); err != nil {
		return Result{}, err
	}
	attempt := newAttemptID()
	keys := []string{key}
	field, copies := owner, copyRead
	if mode == WriteMode {
		field, copies = owner+WriterSuffix, copyWrite
	}
	var holder leastTTL
	op := lockOp{
		keys:    keys,
		token:   field,
		ttl:     lease,
		refused: ErrNotAcquired,
		cmd:     e.checkedCommand(rwAcquireScript, keys, mode, owner, lease.Milliseconds(), attempt, prefix, e.cfg.MaxTTL.Milliseconds()),
		decode:  decodeHashGrant(&holder),
		undo: func(ctx context.Context, n *node, _ ack) {
			n.run(ctx, rwUndoScript, keys, mode, owner, attempt, prefix)
		},
		copies: copies,
		prefix: prefix,
	}
	res, err := e.lockOp(ctx, op)
	if err != nil {
		res.HolderTTL = holder.get()
	}
	return res, err
}

// What one backend's lua/rw_release.lua did, beside hashLeft's kinds.
const (
	leftWent   = 3 // released, and the whole lock went
	leftNoLock = 4 // no read-write lock there at all
)

func decodeRWRelease(_ *node, r backend.Reply) (hashLeft, error) {
	kind, count, err := pairOfIntegers(r)
	if err == nil && (kind < leftNotOwner || kind > leftNoLock) {
		err = errors.New("quorum: script: unexpected reply")
	}
	return hashLeft{kind: kind, count: count}, err
}

// readRelease leaves the read lock key once for owner; writeRelease the
// write lock, setting lease while write holds are left. Each backend takes
// one hold off (lua/rw_release.lua), and the outcome is decided as
// hashRelease decides a hash lock's, by how many backends still hold the
// owner's field after it: still held (Result.HoldCount); released
// (Result.Released, and Result.Emptied when a quorum answered that the
// whole lock went: no other reader, nor the owner's own read holds under
// its write lock, was left); ErrNotHeld when the owner's hold is not on a
// quorum, ErrAbsent when a quorum has no read-write lock there at all;
// otherwise a *NoQuorumError. The backends that still hold the field
// after a release the quorum decided had missed a re-entry: their hold is
// dropped (lua/rw_drop.lua), other owners' left. With a latch, a retry of
// the same request answers as the release did on each backend.
func (e *Engine) readRelease(ctx context.Context, key, prefix, owner, latch string, latchTTL time.Duration) (Result, error) {
	return e.rwRelease(ctx, key, prefix, owner, ReadMode, 0, latch, latchTTL)
}

func (e *Engine) writeRelease(ctx context.Context, key, owner string, lease time.Duration, latch string, latchTTL time.Duration) (Result, error) {
	if err := e.checkTTL(lease); err != nil {
		return Result{}, err
	}
	return e.rwRelease(ctx, key, "", owner, WriteMode, lease, latch, latchTTL)
}

func (e *Engine) rwRelease(ctx context.Context, key, prefix, owner, mode string, lease time.Duration, latch string, latchTTL time.Duration) (Result, error) {
	keys, err := e.releaseKeys(key, latch, latchTTL)
	if err != nil {
		return Result{}, err
	}
	id := newReleaseID()
	f := fanout(e, e.checkedCommand(rwReleaseScript, keys, mode, owner, lease.Milliseconds(), prefix, latchTTL.Milliseconds(), id), decodeRWRelease)
	r := e.collectRelease(ctx, f)
	switch r.final() {
	case stillHeld:
		return Result{HoldCount: r.holdCount()}, nil
	case lockReleased:
		field := owner
		if mode == WriteMode {
			field += WriterSuffix
		}
		// The backends that still hold the field missed a release; the
		// drop (lua/rw_drop.lua) takes off that owner's hold alone.
		e.dropHeld(ctx, keys[:1], field, r.held, f, r.total-r.heard, func(ctx context.Context, n *node, count int64) {
			n.run(ctx, rwDropScript, keys, mode, owner, prefix, strconv.FormatInt(count, 10), id, latchTTL.Milliseconds())
		})
		emptied := r.went >= r.quorum
		if emptied {
			e.released(key, id)
		}
		return Result{Released: true, Emptied: emptied}, nil
	case notOwned:
		if r.noLock >= r.quorum {
			return Result{}, ErrAbsent
		}
		return Result{}, ErrNotHeld
	}
	return Result{}, cut(ctx, r.noQuorum())
}

// rwMode is the mode a quorum of backends has of the read-write lock key:
// ErrNotFound when none has one on a quorum and the backends that did not
// answer could not make one, a *NoQuorumError when they could.
func (e *Engine) rwMode(ctx context.Context, key string) (string, error) {
	v := e.readWith(ctx, backend.ScriptCommand(rwReadScript, []string{key}, "mode"), func(_ *node, r backend.Reply) (keyState, error) {
		if r.IsNil() {
			return keyState{}, nil
		}
		mode, err := r.Bulk()
		return keyState{exists: true, hasValue: true, value: mode}, err
	})
	return e.quorumValue(v)
}

// readLocked reports whether a quorum of backends has the read-write lock
// key read-held (Redisson's RReadLock.isLocked()), and returns a
// *NoQuorumError when fewer do and the backends that did not answer could
// make them a quorum.
func (e *Engine) readLocked(ctx context.Context, key string) (bool, error) {
	return e.onQuorum(e.readWith(ctx, backend.ScriptCommand(rwReadScript, []string{key}, "read-locked"), func(_ *node, r backend.Reply) (keyState, error) {
		n, err := r.Integer()
		return keyState{exists: n == 1}, err
	}))
}

// rwDelete deletes the read-write lock key where its mode is mode, whoever
// holds it (Redisson's forceUnlock()), and reports whether a quorum did;
// a *NoQuorumError when the backends that did not answer could have made
// that a quorum.
func (e *Engine) rwDelete(ctx context.Context, key, mode string) (bool, error) {
	id := newReleaseID()
	deleted, err := e.writeAll(ctx, backend.ScriptCommand(rwDeleteScript, []string{key}, mode, id))
	if deleted {
		e.released(key, id)
	}
	return deleted, err
}

// renewReads renews read holds (Renewal.Read) as Renew renews hash locks:
// each where its owner's field is, with its timeout keys, the lock's TTL
// never lowered (lua/rw_renew_each.lua); a hold renewed on a quorum is
// topped up where a backend lacks it, with its timeout keys.
func (e *Engine) renewReads(ctx context.Context, ttl time.Duration, locks []Held) []Renewed {
	return e.renew(ctx, ttl, locks, renewScript{script: rwRenewEachScript, decode: decodeRenewedCounts, fields: true, reads: true})
}
