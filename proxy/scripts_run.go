package proxy

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// The runners of the recognised scripts (scripts_library.go): each makes
// on a quorum, through the Locker, what its script does on one Redis, and
// answers as the script would.

// notHeld reports whether err says the token does not hold (or did not
// get) the lock: the script's "no" reply, not an error.
func notHeld(err error) bool {
	return errors.Is(err, quorum.ErrNotHeld) || errors.Is(err, quorum.ErrNotAcquired) ||
		errors.Is(err, quorum.ErrNotFound)
}

// answer returns yes when err is nil, no when the lock is not held, and
// err otherwise.
func answer(err error, yes, no any) (any, error) {
	switch {
	case err == nil:
		return yes, nil
	case notHeld(err):
		return no, nil
	}
	return nil, err
}

// lock makes a Lock request of l; the scripts' replies need only its error.
func lock(ctx context.Context, l Locker, op quorum.Op, keys []string, token string, ttl time.Duration) error {
	_, err := l.Lock(ctx, quorum.Lock{Op: op, Keys: keys, Token: token, TTL: ttl})
	return err
}

// unlock makes an Unlock request of l.
func unlock(ctx context.Context, l Locker, op quorum.Op, keys []string, token string) error {
	_, err := l.Unlock(ctx, quorum.Unlock{Op: op, Keys: keys, Token: token})
	return err
}

// ms parses a TTL argument in milliseconds, worded for the command the
// script would have run.
func ms(arg, cmd string) (time.Duration, error) { return parseTTL([]byte(arg), false, cmd) }

// runCompareAndDelete releases KEYS[1] held by ARGV[1]: 1, or 0 when not held.
func runCompareAndDelete(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	err := unlock(ctx, l, quorum.OpRelease, keys[:1], args[0])
	return answer(err, int64(1), int64(0))
}

// runCompareAndPExpire sets KEYS[1]'s TTL to ARGV[2] ms where ARGV[1] holds it.
func runCompareAndPExpire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "pexpire")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtend, keys[:1], args[0], ttl)
	return answer(err, int64(1), int64(0))
}

// runCompareAndPExpireAt sets KEYS[1]'s expiry to the Unix time ARGV[2]
// (ms) where ARGV[1] holds it, read as the TTL from now on the proxy's
// clock, as one Redis reads it on its own; a time past releases it, as
// Redis deletes the key.
func runCompareAndPExpireAt(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	at, ok := parseInt([]byte(args[1]))
	if !ok {
		return nil, errNotInteger
	}
	ttl, err := untilMillis(at)
	switch {
	case err != nil:
		return nil, err
	case ttl <= 0:
		return answer(unlock(ctx, l, quorum.OpRelease, keys[:1], args[0]), int64(1), int64(0))
	}
	return answer(lock(ctx, l, quorum.OpExtend, keys[:1], args[0], ttl), int64(1), int64(0))
}

// runCompareAndDeleteOrAbsent is a release that answers -1 when a quorum
// found the key absent (redsync's ErrLockAlreadyExpired).
func runCompareAndDeleteOrAbsent(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	err := unlock(ctx, l, quorum.OpRelease, keys[:1], args[0])
	if errors.Is(err, quorum.ErrAbsent) {
		return int64(-1), nil
	}
	return answer(err, int64(1), int64(0))
}

// runCompareAndDeleteOrNull releases KEYS[1]: 1 (Lua true), or null (false).
func runCompareAndDeleteOrNull(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	err := unlock(ctx, l, quorum.OpRelease, keys[:1], args[0])
	return answer(err, int64(1), nil)
}

// runCompareAndPExpireOrNull extends KEYS[1] to ARGV[2] ms: 1, or null.
func runCompareAndPExpireOrNull(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "pexpire")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtend, keys[:1], args[0], ttl)
	return answer(err, int64(1), nil)
}

// runCompareAndAddOrSetPTTL is redis-py's extend: ARGV[3] "0" adds ARGV[2]
// ms to the TTL left (ExtendBy), anything else sets it (Extend); 1 or 0.
func runCompareAndAddOrSetPTTL(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	d, err := ms(args[1], "pexpire")
	if err != nil {
		return nil, err
	}
	if args[2] == "0" {
		err = lock(ctx, l, quorum.OpExtendBy, keys[:1], args[0], d)
	} else {
		err = lock(ctx, l, quorum.OpExtend, keys[:1], args[0], d)
	}
	return answer(err, int64(1), int64(0))
}

// runExtendOrAcquire extends KEYS[1] for ARGV[1] or takes it when free: 1 or 0.
func runExtendOrAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	return extendOrAcquire(ctx, l, keys, args, int64(1), int64(0))
}

// runExtendOrAcquireOrNull is Spring's obtain: 1 (true) or null (false).
func runExtendOrAcquireOrNull(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	return extendOrAcquire(ctx, l, keys, args, int64(1), nil)
}

// runExtendOrAcquireOrConflict is RedLock.net's extend: 1, or -1 when
// another lockId holds the key.
func runExtendOrAcquireOrConflict(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	return extendOrAcquire(ctx, l, keys, args, int64(1), int64(-1))
}

func extendOrAcquire(ctx context.Context, l Locker, keys, args []string, yes, no any) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtendOrAcquire, keys[:1], args[0], ttl)
	return answer(err, yes, no)
}

// errScriptERROR is what redis.error_reply('ERROR') replies on Redis 7.0
// (it adds the ERR code to a message that has none): aioredlock's "held by
// another id", which it tells from NOSCRIPT only.
var errScriptERROR = &argError{"ERR ERROR"}

// runExtendOrAcquireOrError is aioredlock's lock and extend: OK, or the
// error reply when another id holds the key.
func runExtendOrAcquireOrError(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtendOrAcquire, keys[:1], args[0], ttl)
	if notHeld(err) {
		return nil, errScriptERROR
	}
	return answer(err, statusOK{}, nil)
}

// runCompareAndDeleteOrFreeOrError is aioredlock's unlock: 1 when released,
// OK when a quorum found the key free, else the error reply (held by
// another id, or no quorum agreeing that it is free).
func runCompareAndDeleteOrFreeOrError(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	err := unlock(ctx, l, quorum.OpRelease, keys[:1], args[0])
	switch {
	case errors.Is(err, quorum.ErrAbsent):
		return statusOK{}, nil
	case notHeld(err):
		return nil, errScriptERROR
	}
	return answer(err, int64(1), nil)
}

// runOwnerTTLSecondsOrError is aioredlock's get_lock: the TTL in seconds,
// rounded as Redis's TTL rounds it, -1 without expiry, or the error reply
// when ARGV[1] does not hold the key.
func runOwnerTTLSecondsOrError(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ms, err := ownerPTTL(ctx, l, keys[0], args[0])
	switch {
	case notHeld(err):
		return nil, errScriptERROR
	case err != nil:
		return nil, err
	case ms < 0:
		return ms, nil
	}
	return (ms + 500) / 1000, nil
}

// runSetIfOwnerOrFree is redlock-rb's lock/extend: ARGV[3] "yes" may take
// a free key (ExtendOrAcquire), anything else only extends; OK or null.
func runSetIfOwnerOrFree(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	if args[2] == "yes" {
		err = lock(ctx, l, quorum.OpExtendOrAcquire, keys[:1], args[0], ttl)
	} else {
		err = lock(ctx, l, quorum.OpExtend, keys[:1], args[0], ttl)
	}
	return answer(err, statusOK{}, nil)
}

// runAcquire is SET KEYS[1] ARGV[1] NX PX ARGV[2] in a script: OK or null.
func runAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpAcquire, keys[:1], args[0], ttl)
	return answer(err, statusOK{}, nil)
}

// runAcquireAt takes KEYS[1] for ARGV[1] until the Unix time ARGV[2]
// (ms), as SET ... NX PXAT: OK or null.
func runAcquireAt(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ttlUntil([]byte(args[1]), false)
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpAcquire, keys[:1], args[0], ttl)
	return answer(err, statusOK{}, nil)
}

// runAcquireOrRenew is bsm/redislock's obtain: OK or null.
func runAcquireOrRenew(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	tokenLen, ttl, err := parseObtain(args)
	if err != nil {
		return nil, err
	}
	_, err = l.Lock(ctx, quorum.Lock{Op: quorum.OpAcquireOrRenew, Keys: keys[:1], Token: args[0], TokenLen: tokenLen, TTL: ttl})
	return answer(err, statusOK{}, nil)
}

// parseObtain parses bsm/redislock's token length and TTL arguments.
func parseObtain(args []string) (int, time.Duration, error) {
	n, ok := parseInt([]byte(args[1]))
	if !ok || n < 0 || n > int64(len(args[0])) {
		return 0, 0, errorf("ERR lockproxy needs a token length between 0 and the value's %d bytes (got %q)", len(args[0]), args[1])
	}
	ttl, err := ms(args[2], "set")
	return int(n), ttl, err
}

// ownerPTTL is the PTTL of key held by token, in ms, as Redis's PTTL
// answers it: -1 for a key without expiry.
func ownerPTTL(ctx context.Context, l Locker, key, token string) (int64, error) {
	r, err := l.Read(ctx, quorum.Read{Op: quorum.OpOwnerPTTL, Key: key, Token: token})
	if errors.Is(err, quorum.ErrNoExpiry) {
		return -1, nil
	}
	return r.TTL.Milliseconds(), err
}

// runOwnerPTTL is bsm/redislock 0.9's TTL: PTTL ms, or -3 when not the owner.
func runOwnerPTTL(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ms, err := ownerPTTL(ctx, l, keys[0], args[0])
	return answer(err, ms, int64(-3))
}

// runOwnerPTTLOrZero is pottery's locked(): PTTL ms when positive, else 0.
func runOwnerPTTLOrZero(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ms, err := ownerPTTL(ctx, l, keys[0], args[0])
	return answer(err, max(ms, 0), int64(0))
}

// runValueAndPTTL is redlock-rb's [value, pttl], [null, -2] when free. It
// takes two Locker calls: the value a quorum holds, then how long that
// value holds the key, so the PTTL is always the returned value's (a value
// that changed in between reads as a free key, as it would a moment later).
func runValueAndPTTL(ctx context.Context, l *keyspace, keys, _ []string) (any, error) {
	free := []any{nil, int64(-2)}
	r, err := l.Read(ctx, quorum.Read{Op: quorum.OpGet, Key: keys[0]})
	if err != nil {
		return answer(err, nil, free)
	}
	ms, err := ownerPTTL(ctx, l, keys[0], r.Value)
	return answer(err, []any{r.Value, ms}, free)
}

// runCompareAndExpireSeconds is python-redis-lock's extend: ARGV[2]
// seconds; 0 extended, 1 not the owner.
func runCompareAndExpireSeconds(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := parseTTL([]byte(args[1]), true, "expire")
	if err != nil {
		return nil, err
	}
	// The owner's lock taken without a TTL has none to extend, as on
	// Redis (NotExpirable), though its lease runs on the backends.
	if token, ok := l.unexpiringBy(keys[0]); ok && token == args[0] {
		return int64(2), nil
	}
	err = lock(ctx, l, quorum.OpExtend, keys[:1], args[0], ttl)
	return answer(err, int64(0), int64(1))
}

// runCompareAndDeleteAndSignal releases KEYS[1] held by ARGV[1]: 0, or 1
// when not held. ARGV[2], the signal list's expiry, is checked as the
// script's PEXPIRE would; nothing else uses it.
func runCompareAndDeleteAndSignal(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if _, ok := parseInt([]byte(args[1])); !ok {
		return nil, errNotInteger
	}
	err := unlock(ctx, l, quorum.OpRelease, keys[:1], args[0])
	return answer(err, int64(0), int64(1))
}

// runDeleteAndSignal deletes KEYS[1] whoever holds it: 1 when a quorum
// held it, else 0.
func runDeleteAndSignal(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if _, ok := parseInt([]byte(args[1])); !ok {
		return nil, errNotInteger
	}
	return deleteWhoever(ctx, l, keys[0])
}

// runDeleteAllLocks deletes every lock:* key that a backend of the
// caller's key space has, whoever holds it, and answers how many.
func runDeleteAllLocks(ctx context.Context, l *keyspace, _, _ []string) (any, error) {
	n, err := deleteAll(ctx, l, "lock:*", false)
	if err != nil {
		return nil, err
	}
	return int64(n), nil
}

// deleteWhoever deletes key whoever holds it, as DEL would: 1 when a
// quorum held it, else 0.
func deleteWhoever(ctx context.Context, l Locker, key string) (any, error) {
	return deletedReply(l.Write(ctx, quorum.Write{Op: quorum.OpDelete, Key: key}))
}

// deletedReply is a script's answer to an administrative delete: 1 when a
// quorum deleted, else 0, or the error.
func deletedReply(deleted bool, err error) (any, error) {
	switch {
	case err != nil:
		return nil, err
	case deleted:
		return int64(1), nil
	}
	return int64(0), nil
}

// runMultiAcquire takes every key for ARGV[1]: #KEYS, or 0.
func runMultiAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpAcquireAll, distinct(keys), args[0], ttl)
	return answer(err, int64(len(keys)), int64(0))
}

// runMultiReleaseCount releases the keys ARGV[1] holds: how many were
// deleted, which is #KEYS without the repeated ones; or 0.
func runMultiReleaseCount(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	keys = distinct(keys)
	err := unlock(ctx, l, quorum.OpReleaseAll, keys, args[0])
	return answer(err, int64(len(keys)), int64(0))
}

// distinct returns keys without repeats, in order. The scripts loop over
// KEYS as given, and a key named twice is taken, extended or deleted once;
// the Locker's operations on several keys take each key once.
func distinct(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// runMultiExtend extends every key ARGV[1] holds: #KEYS, or 0.
func runMultiExtend(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "set")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtendAll, distinct(keys), args[0], ttl)
	return answer(err, int64(len(keys)), int64(0))
}

// inDB0 runs a sesamecare script, whose ARGV[1] is the database it
// selects, when that database is 0: lockproxy has one keyspace.
func inDB0(run func(context.Context, *keyspace, []string, []string) (any, error)) func(context.Context, *keyspace, []string, []string) (any, error) {
	return func(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
		if n, ok := parseInt([]byte(args[0])); !ok || n != 0 {
			return nil, errorf("ERR lockproxy serves db 0 only (the script selects db %q)", args[0])
		}
		return run(ctx, l, keys, args[1:])
	}
}

// runMultiAcquireOrRenew is bsm/redislock 0.10's obtain: OK or null. One
// key is AcquireOrRenew, exactly the script. Several keys are AcquireAll:
// what is lost is the re-obtain, by the same token, of keys it already
// holds (the script's MSET after a failed MSETNX), which then replies null
// as if another token held them.
func runMultiAcquireOrRenew(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if keys = distinct(keys); len(keys) == 1 {
		return runAcquireOrRenew(ctx, l, keys, args)
	}
	_, ttl, err := parseObtain(args)
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpAcquireAll, keys, args[0], ttl)
	return answer(err, statusOK{}, nil)
}

// runMultiReleaseAll releases keys all held by ARGV[1]: OK or null.
func runMultiReleaseAll(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	err := unlock(ctx, l, quorum.OpReleaseAll, distinct(keys), args[0])
	return answer(err, statusOK{}, nil)
}

// runMultiPExpireAll extends keys all held by ARGV[1]: OK or null.
func runMultiPExpireAll(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	ttl, err := ms(args[1], "pexpire")
	if err != nil {
		return nil, err
	}
	err = lock(ctx, l, quorum.OpExtendAll, distinct(keys), args[0], ttl)
	return answer(err, statusOK{}, nil)
}

// runMultiOwnerPTTL is bsm/redislock 0.10's TTL: one OwnerPTTL per key;
// the least positive PTTL (0 if none), or null when any key is not held.
func runMultiOwnerPTTL(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	var least int64
	for _, k := range keys {
		n, err := ownerPTTL(ctx, l, k, args[0])
		if err != nil {
			return answer(err, nil, nil)
		}
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	return least, nil
}

// runPExpireAny sets every key's TTL to ARGV[1] ms: 1 when any was set.
func runPExpireAny(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if args[1] != "" {
		return nil, errorf("ERR lockproxy does not take PEXPIRE conditions (the script passes %q)", args[1])
	}
	ttl, err := ms(args[0], "pexpire")
	if err != nil {
		return nil, err
	}
	var set int64
	for _, k := range keys {
		ok, err := l.Write(ctx, quorum.Write{Op: quorum.OpExpire, Key: k, TTL: ttl})
		if err != nil {
			return nil, err
		}
		if ok {
			set = 1
		}
	}
	return set, nil
}
