package quorum

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Op is an operation of the engine. A caller names it in a request (Lock,
// Unlock, Read or Write), so that whatever wraps the engine (a key prefix,
// metrics) handles every operation, present and future, in one place.
type Op uint8

// The operations. Their order is the order in which INFO lists them.
const (
	OpAcquire         Op     = iota // take a free key (SET NX PX)
	OpRelease                       // delete a key the token holds
	OpExtend                        // set the TTL of a key the token holds
	OpGet                           // the value a quorum holds
	OpPTTL                          // how long the value a quorum holds stays held (a hash lock: how long a quorum has it)
	OpExists                        // whether a key exists on a quorum
	OpDelete                        // delete a key, whoever holds it
	OpExpire                        // set a key's TTL, whoever holds it
	OpAcquireAll                    // take every key, or none
	OpReleaseAll                    // delete the keys the token holds
	OpExtendAll                     // set the TTL of every key where the token holds them all
	OpExtendBy                      // add to the TTL left of a key the token holds
	OpExtendOrAcquire               // extend where the token holds the key, take it where free
	OpAcquireOrRenew                // take a free key, or renew one held by the same owner
	OpOwnerPTTL                     // how long the token still holds a key
	OpFence                         // the fencing token of a key the token holds
	OpAwaitRelease                  // wait until a held key is released or runs out
	OpHashAcquire                   // take or re-enter a hash lock (Redisson's RLock) for an owner's field
	OpHashRelease                   // leave a hash lock once, releasing it at its last hold
	OpHashExists                    // whether a quorum has a hash lock's owner field
	OpHashCount                     // how many holds of a hash lock an owner has, on a quorum
	OpHashPTTL                      // how long a quorum still has a key, whatever its type
	OpHashFence                     // the fencing token of a hash lock, as an owner or whoever holds it
	OpReadAcquire                   // take or re-enter the read lock of a read-write lock (Redisson's RReadWriteLock) for an owner
	OpWriteAcquire                  // take or re-enter the write lock of a read-write lock for an owner
	OpReadRelease                   // leave a read lock once
	OpWriteRelease                  // leave a write lock once; the last write hold with read holds left downgrades
	OpRWMode                        // the mode a quorum has of a read-write lock: "read" or "write"
	OpReadLocked                    // whether a read-write lock is read-locked on a quorum
	OpRWDelete                      // delete a read-write lock whoever holds it, where a quorum has it in a mode
	NumOps            = iota        // how many Ops there are
)

var opNames = [NumOps]string{
	"acquire", "release", "extend", "get", "pttl", "exists", "delete", "expire",
	"acquire_all", "release_all", "extend_all", "extend_by", "extend_or_acquire", "acquire_or_renew", "owner_pttl", "fence", "await_release",
	"hash_acquire", "hash_release", "hash_exists", "hash_count", "hash_pttl", "hash_fence",
	"read_acquire", "write_acquire", "read_release", "write_release", "rw_mode", "read_locked", "rw_delete",
}

// String is the operation's name, e.g. "acquire_all", as metrics label it.
func (o Op) String() string {
	if o >= NumOps {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// Takes reports whether o may take a key that is free: it then succeeds
// as an acquisition, and a key held by another token makes it fail with
// ErrNotAcquired (or ErrNotHeld, for OpExtendOrAcquire).
func (o Op) Takes() bool {
	switch o {
	case OpAcquire, OpAcquireAll, OpExtendOrAcquire, OpAcquireOrRenew, OpHashAcquire, OpReadAcquire, OpWriteAcquire:
		return true
	}
	return false
}

// ForToken reports whether o is about what a token holds, and fails with
// ErrNotHeld when the token does not hold the key (OpHashFence: nor, asked
// without one, any owner).
func (o Op) ForToken() bool {
	switch o {
	case OpRelease, OpReleaseAll, OpExtend, OpExtendAll, OpExtendBy, OpOwnerPTTL, OpFence, OpHashRelease, OpHashFence,
		OpReadRelease, OpWriteRelease:
		return true
	}
	return false
}

// Lock asks to take or extend keys for a token. OpAcquireAll and
// OpExtendAll take any number of keys, which succeed or fail together; the
// other operations (OpAcquire, OpExtend, OpExtendBy, OpExtendOrAcquire,
// OpAcquireOrRenew, OpHashAcquire) take exactly one. For OpHashAcquire the
// key is a hash and Token the owner's field in it (Redisson's
// "<uuid>:<threadId>"), TTL the lease; with Fencing, a re-entry's
// Result.Fence is the token the lock already has.
//
// OpReadAcquire and OpWriteAcquire take a read-write lock (rwlock.go):
// Token is the owner (Redisson's "<uuid>:<threadId>", the reader's field;
// the writer's is Token + WriterSuffix), TTL the lease; OpReadAcquire's
// Keys are the lock and the prefix of its read holds' timeout keys
// (Redisson's "{name}"), OpWriteAcquire's the lock alone. A refusal sets
// Result.HolderTTL as OpHashAcquire's does.
type Lock struct {
	Op    Op
	Keys  []string
	Token string
	// TTL is the lock's TTL; for OpExtendBy, how much to add to the TTL left.
	TTL time.Duration
	// Wait is, for OpAcquire, how long to wait while another token holds
	// the key, in line behind the earlier waiters of this engine: the
	// acquisition is tried again when the key is released through any
	// engine, or its holder's time runs out, until the lock is taken,
	// Wait has passed (ErrNotAcquired) or ctx ends (ctx's error, and
	// nothing is held). Negative: without end. Zero: no wait.
	Wait time.Duration
	// TokenLen is, for OpAcquireOrRenew, how many first bytes of Token name
	// its owner: a value held that starts with them is renewed with Token
	// (bsm/redislock's token followed by metadata).
	TokenLen int
}

// Unlock asks to delete keys a token holds: one with OpRelease, any number
// with OpReleaseAll (every one of them, on a quorum); or, with
// OpHashRelease, to leave the hash lock Keys[0] once for the owner's field
// Token (hashlock.go). OpReadRelease (Keys: the lock and its timeout-key
// prefix) and OpWriteRelease (Keys: the lock) leave a read-write lock's
// read or write lock once for the owner Token (rwlock.go), with Latch as
// OpHashRelease's.
type Unlock struct {
	Op    Op
	Keys  []string
	Token string
	// TTL is, for OpHashRelease and OpWriteRelease, the lease the lock
	// gets when the owner still holds it after this release.
	TTL time.Duration
	// Latch is, for OpHashRelease, OpReadRelease and OpWriteRelease, the key (Redisson's
	// redisson_unlock_latch:{name}:<request id>) in which each backend
	// records what this release did there, for LatchTTL, so that a retry
	// of the same request does not release twice; "" for none.
	Latch    string
	LatchTTL time.Duration
}

// Read asks what a quorum holds of a key: its value (OpGet), how long that
// value stays held (OpPTTL), whether it exists (OpExists), how long Token
// still holds it (OpOwnerPTTL), or the fencing token of Token's lock
// (OpFence); of a hash lock, whether the owner's field Token is there
// (OpHashExists), its count (OpHashCount), how long the key, of any
// type, stays (OpHashPTTL), or its fencing token (OpHashFence) as the
// owner Token holds it, or as whoever holds it when Token is "" (Redisson's
// getToken()); or waits until the key is free (OpAwaitRelease): released
// or deleted through any engine, or its holder's time run out, or not
// held at all, in line behind this engine's earlier waiters for it. It
// answers then, taking nothing: the caller tries for itself (a client's
// own wait, as python-redis-lock's BLPOP). ErrTimeout when Wait (0:
// without end) passed first; ctx's error when ctx ended first.
// Of a read-write lock (rwlock.go): the mode a quorum has (OpRWMode,
// Value "read" or "write"; ErrNotFound for none), or whether it is
// read-locked (OpReadLocked, Exists: by a reader, or by a writer that also
// reads, as Redisson's RReadLock.isLocked() says).
type Read struct {
	Op    Op
	Key   string
	Token string
	Wait  time.Duration
}

// Reading answers a Read, in the field its Op asks for: Value for OpGet,
// TTL for OpPTTL, OpOwnerPTTL and OpHashPTTL, Exists for OpExists and
// OpHashExists, Fence for OpFence and OpHashFence, Count for OpHashCount.
type Reading struct {
	Value  string
	TTL    time.Duration
	Exists bool
	Fence  int64
	Count  int64
}

// Write asks to change a key whoever holds it, as an administrator would:
// delete it (OpDelete) or set its TTL (OpExpire); or delete a read-write
// lock where it has the mode Mode, "read" or "write" (OpRWDelete:
// Redisson's forceUnlock() of its read or write lock).
type Write struct {
	Op   Op
	Key  string
	TTL  time.Duration
	Mode string
}

// OpError reports a request that names an operation it cannot carry, or the
// wrong number of keys for it: a mistake of the caller's.
type OpError struct {
	Op      Op
	Request string // "lock", "unlock", "read" or "write"
	Keys    int
}

func (e *OpError) Error() string {
	return fmt.Sprintf("quorum: %s is not a %s operation of %d keys", e.Op, e.Request, e.Keys)
}

// Every request refuses a key that starts with ReservedPrefix with
// ErrReservedKey, before anything is sent.
//
// What ctx bounds, for every request: the wait for the backends' votes.
// When it ends before the outcome is decided, the request fails with a
// *NoQuorumError joined with ctx's error, and the backends that had not
// answered count as silent. It never cuts short what must be done whatever
// the caller does: the requests already sent to backends, a rollback, the
// wait for an earlier rollback of the same keys and token (which ctx does
// bound, as it comes before anything is sent).

// Lock takes or extends req.Keys for req.Token on a quorum of backends and
// returns the lock's validity. It returns ErrNotAcquired (OpAcquire,
// OpAcquireAll, OpAcquireOrRenew, OpHashAcquire) or ErrNotHeld (the others) when the
// backends that did not answer could not have made it succeed, or no
// validity was left; a *NoQuorumError when they could; a *TTLError for a
// TTL outside (0, MaxTTL]; and an *OpError for a request it cannot carry.
// A failed acquisition is rolled back on every backend where the token may
// have taken a key; a refused extension is rolled back too (a lock its
// holder can no longer rely on is released for others at once), an
// undecided one is not (it may still be held). An acquisition whose votes
// split between contenders that all failed is tried once more after a
// short random pause (split.go); Result.Split says it split again.
func (e *Engine) Lock(ctx context.Context, req Lock) (Result, error) {
	if reserved(req.Keys...) {
		return Result{}, ErrReservedKey
	}
	if retriesSplit(req) {
		return e.retrySplit(ctx, req.Keys, req.Token, func() (Result, error) { return e.lockOnce(ctx, req) })
	}
	return e.lockOnce(ctx, req)
}

// retriesSplit reports whether req is an acquisition that Lock tries once
// more when it splits: every one but a waiting one, whose queue tries
// again itself (waits.go).
func retriesSplit(req Lock) bool {
	switch req.Op {
	case OpAcquire:
		return req.Wait == 0
	case OpAcquireAll, OpExtendOrAcquire, OpAcquireOrRenew, OpHashAcquire, OpReadAcquire, OpWriteAcquire:
		return true
	}
	return false
}

// lockOnce is Lock's one try of req.
func (e *Engine) lockOnce(ctx context.Context, req Lock) (Result, error) {
	if len(req.Keys) > 0 {
		switch req.Op {
		case OpAcquireAll:
			return e.acquireAll(ctx, req.Keys, req.Token, req.TTL)
		case OpExtendAll:
			return e.extendAll(ctx, req.Keys, req.Token, req.TTL)
		}
	}
	if len(req.Keys) == 1 {
		key := req.Keys[0]
		switch req.Op {
		case OpAcquire:
			if req.Wait != 0 {
				return e.acquireWaiting(ctx, key, req.Token, req.TTL, max(req.Wait, 0))
			}
			return e.acquire(ctx, key, req.Token, req.TTL)
		case OpExtend:
			return e.extend(ctx, key, req.Token, req.TTL)
		case OpExtendBy:
			return e.extendBy(ctx, key, req.Token, req.TTL)
		case OpExtendOrAcquire:
			return e.extendOrAcquire(ctx, key, req.Token, req.TTL)
		case OpAcquireOrRenew:
			return e.acquireOrRenew(ctx, key, req.Token, req.TokenLen, req.TTL)
		case OpHashAcquire:
			if reservedField(req.Token) {
				return Result{}, ErrReservedKey
			}
			return e.hashAcquire(ctx, key, req.Token, req.TTL)
		case OpWriteAcquire:
			if reservedField(req.Token) {
				return Result{}, ErrReservedKey
			}
			return e.writeAcquire(ctx, key, req.Token, req.TTL)
		}
	}
	if len(req.Keys) == 2 && req.Op == OpReadAcquire {
		if reservedField(req.Token) {
			return Result{}, ErrReservedKey
		}
		return e.readAcquire(ctx, req.Keys[0], req.Keys[1], req.Token, req.TTL)
	}
	return Result{}, &OpError{Op: req.Op, Request: "lock", Keys: len(req.Keys)}
}

// Unlock deletes req.Keys where req.Token holds them. It succeeds when a
// quorum deleted them (all of them, for OpReleaseAll); it returns
// ErrNotHeld when the backends that did not answer could not have made
// that a quorum (the lock had expired or was never the token's: its
// critical section may not have been exclusive) — ErrAbsent, which is also
// ErrNotHeld, when a quorum found no key at all (OpRelease only) — and a
// *NoQuorumError when they could. OpHashRelease answers as hashRelease
// (hashlock.go) says, with Result.Released and Result.HoldCount.
func (e *Engine) Unlock(ctx context.Context, req Unlock) (Result, error) {
	if reserved(req.Keys...) || req.Latch != "" && reserved(req.Latch) {
		return Result{}, ErrReservedKey
	}
	switch {
	case req.Op == OpHashRelease && len(req.Keys) == 1 && reservedField(req.Token):
		return Result{}, ErrReservedKey
	case req.Op == OpHashRelease && len(req.Keys) == 1:
		return e.hashRelease(ctx, req.Keys[0], req.Token, req.TTL, req.Latch, req.LatchTTL)
	case (req.Op == OpReadRelease || req.Op == OpWriteRelease) && reservedField(req.Token):
		return Result{}, ErrReservedKey
	case req.Op == OpReadRelease && len(req.Keys) == 2:
		return e.readRelease(ctx, req.Keys[0], req.Keys[1], req.Token, req.Latch, req.LatchTTL)
	case req.Op == OpWriteRelease && len(req.Keys) == 1:
		return e.writeRelease(ctx, req.Keys[0], req.Token, req.TTL, req.Latch, req.LatchTTL)
	case req.Op == OpRelease && len(req.Keys) == 1:
		return e.release(ctx, req.Keys[0], req.Token)
	case req.Op == OpReleaseAll && len(req.Keys) > 0:
		return e.releaseAll(ctx, req.Keys, req.Token)
	}
	return Result{}, &OpError{Op: req.Op, Request: "unlock", Keys: len(req.Keys)}
}

// Read answers what a quorum holds of req.Key. OpGet and OpPTTL return
// ErrNotFound when no value is held by a quorum (or, for OpPTTL, too little
// time is left to count on; a key that holds no value anywhere, a hash
// lock, has OpHashPTTL's answer); OpPTTL and OpOwnerPTTL return ErrNoExpiry when
// a quorum holds the key without expiry; OpOwnerPTTL returns ErrNotHeld
// when req.Token does not hold it on a quorum. OpHashCount returns
// ErrNotFound when the owner's field is not on a quorum, OpHashPTTL as
// OpPTTL does for a key of any type. OpFence and OpHashFence return
// ErrNotHeld when the lock is not held on a quorum (by req.Token, or, for
// OpHashFence with Token "", by any one owner), and ErrNoFence when it is
// but no quorum of its holders carries one fencing token. Each of those
// is given only when the backends that did not answer could not make it
// untrue; otherwise the answer is a *NoQuorumError. A hash lock's owner
// field that starts with a NUL byte is refused with ErrReservedKey.
func (e *Engine) Read(ctx context.Context, req Read) (Reading, error) {
	var r Reading
	var err error
	if reserved(req.Key) {
		return r, ErrReservedKey
	}
	switch req.Op {
	case OpGet:
		r.Value, err = e.get(ctx, req.Key)
	case OpPTTL:
		r.TTL, err = e.pttl(ctx, req.Key)
	case OpExists:
		r.Exists, err = e.exists(ctx, req.Key)
	case OpOwnerPTTL:
		r.TTL, err = e.ownerPTTL(ctx, req.Key, req.Token)
	case OpFence:
		r.Fence, err = e.fence(ctx, req.Key, req.Token)
	case OpAwaitRelease:
		err = e.awaitRelease(ctx, req.Key, req.Wait)
	case OpHashExists, OpHashCount, OpHashFence:
		if reservedField(req.Token) {
			return r, ErrReservedKey
		}
		switch req.Op {
		case OpHashExists:
			r.Exists, err = e.hashExists(ctx, req.Key, req.Token)
		case OpHashCount:
			r.Count, err = e.hashCount(ctx, req.Key, req.Token)
		default:
			r.Fence, err = e.hashFence(ctx, req.Key, req.Token)
		}
	case OpHashPTTL:
		r.TTL, err = e.hashPTTL(ctx, req.Key)
	case OpRWMode:
		r.Value, err = e.rwMode(ctx, req.Key)
	case OpReadLocked:
		r.Exists, err = e.readLocked(ctx, req.Key)
	default:
		err = &OpError{Op: req.Op, Request: "read", Keys: 1}
	}
	return r, err
}

// Write deletes req.Key (OpDelete) or sets its TTL (OpExpire) on every
// backend, whoever holds it, and reports whether a quorum did. It returns
// a *NoQuorumError when the backends that did not answer could have made
// that a quorum, and a *TTLError for a TTL outside (0, MaxTTL].
func (e *Engine) Write(ctx context.Context, req Write) (bool, error) {
	if reserved(req.Key) {
		return false, ErrReservedKey
	}
	switch req.Op {
	case OpDelete:
		return e.del(ctx, req.Key)
	case OpExpire:
		return e.expire(ctx, req.Key, req.TTL)
	case OpRWDelete:
		if req.Mode != ReadMode && req.Mode != WriteMode {
			return false, fmt.Errorf("quorum: %s of mode %q, not %q or %q", req.Op, req.Mode, ReadMode, WriteMode)
		}
		return e.rwDelete(ctx, req.Key, req.Mode)
	}
	return false, &OpError{Op: req.Op, Request: "write", Keys: 1}
}

// reserved reports whether any of keys is one of the engine's own.
func reserved(keys ...string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, ReservedPrefix) {
			return true
		}
	}
	return false
}
