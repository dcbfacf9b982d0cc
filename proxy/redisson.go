package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Redisson's RLock, served unchanged. The lock is a hash, name, whose one
// field, the owner's "<client uuid>:<thread id>", counts the owner's
// holds (re-entries included), with the lease as the hash's TTL. Its
// scripts are recognised (scripts_library.go) and each runs as one hash
// lock operation of the engine (quorum/hashlock.go), which runs its own
// scripts on the backends, never the client's: those PUBLISH, N copies
// from N backends. Waiters subscribe to redisson_lock__channel:{name} and
// are told of each release by every proxy (redissonChannel). The reads
// are EXISTS, PTTL, HEXISTS and HGET (keys.go).

// The script bodies, as Redisson sends them, by the versions that send
// them (testdata/scripts has each byte for byte).
const (
	// 3.19.0 on.
	redissonAcquire = `
		if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
			redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		return redis.call('pttl', KEYS[1]);`
	// 3.12.3 to 3.18.1.
	redissonAcquireTwoBranches = `
		if (redis.call('exists', KEYS[1]) == 0) then
			redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
			redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		return redis.call('pttl', KEYS[1]);`
	// 3.24.0 on: KEYS name, channel, latch; ARGV message, lease, owner,
	// publish command, latch TTL.
	redissonReleaseLatched = `
		local val = redis.call('get', KEYS[3]);
		if val ~= false then return tonumber(val);end;
		if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end;
		local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
		if (counter > 0) then
			redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0;
		else
			redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1;
		end; `
	// 3.10.6 to 3.23.5, publishing with %s: 'publish', or ARGV[4] (3.22 on).
	redissonReleaseBody = `
		if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end;
		local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
		if (counter > 0) then
			redis.call('pexpire', KEYS[1], ARGV[2]); return 0;
		else
			redis.call('del', KEYS[1]); redis.call(%s, KEYS[2], ARGV[1]); return 1;
		end;
		return nil;`
	// forceUnlock, publishing with %s: 'publish' (to 3.21.3), or ARGV[2].
	redissonForceUnlock = `
		if (redis.call('del', KEYS[1]) == 1) then redis.call(%s, KEYS[2], ARGV[1]); return 1 else return 0 end`
	// RFencedLock's lock() and tryLock(): RLock's acquisition that also
	// counts KEYS[2], its token counter, up.
	redissonFencedAcquire = `
		if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
			redis.call('incr', KEYS[2]);
			redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		return redis.call('pttl', KEYS[1]);`
	// RFencedLock's lockAndGetToken() and tryLockAndGetToken(): {-1,
	// token} when taken, {the holder's PTTL, -1} when not.
	redissonFencedAcquireToken = `
		if (redis.call('exists', KEYS[1]) == 0 or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
			local token = redis.call('incr', KEYS[2]);
			redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]);
			return {-1, token};
		end;
		return {redis.call('pttl', KEYS[1]), -1};`
	// The watchdog, 3.44.0 on: unrelated locks in one call.
	redissonRenewBatch = `
		local result = {}
		for i = 1, #KEYS, 1 do
			if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then
				redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1);
			else table.insert(result, 0); end;
		end;
		return result;`
	// The watchdog, 3.10.0 to 3.43.0.
	redissonRenew = `
		if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;`
)

// redissonLease parses a Redisson lease argument (ms).
func redissonLease(arg string) (time.Duration, error) { return ms(arg, "pexpire") }

// redissonError words a lease refused for max_ttl for Redisson's users:
// every lock taken without a lease gets lockWatchdogTimeout's, 30 s by
// default, and a max_ttl below it refuses them all.
func redissonError(err error) error {
	var ttl *quorum.TTLError
	if errors.As(err, &ttl) && ttl.TTL > 0 {
		return errorf("ERR invalid expire time: Redisson's lease of %d ms exceeds max_ttl %d ms (a lock taken without a lease time has Config.lockWatchdogTimeout's, 30 s by default: set max_ttl to at least that)",
			ttl.TTL.Milliseconds(), ttl.Max.Milliseconds())
	}
	return err
}

// runRedissonAcquire takes or re-enters the lock KEYS[1] for the owner
// ARGV[2] with a lease of ARGV[1] ms: null, or how long the client should
// wait before trying again, which on one Redis is the holder's PTTL.
func runRedissonAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[0])
	if err != nil {
		return nil, err
	}
	res, err := l.Lock(ctx, quorum.Lock{Op: quorum.OpHashAcquire, Keys: keys[:1], Token: args[1], TTL: lease})
	if err == nil {
		return nil, nil
	}
	return redissonRefusal(res, err)
}

// redissonRefusal is the answer to a refused acquisition: how long to
// wait before trying again, which on one Redis is the holder's PTTL; or
// the error to reply.
func redissonRefusal(res quorum.Result, err error) (int64, error) {
	// Undecided, but another owner holds it somewhere (the votes split
	// between contenders while a backend was down or slow): the attempt
	// was rolled back; to Redisson that is a lock held by another, to wait
	// for (one Redis would have said so), not an exception.
	heldSomewhere := errors.Is(err, quorum.ErrNoQuorum) && res.HolderTTL > 0
	if !errors.Is(err, quorum.ErrNotAcquired) && !heldSomewhere {
		return 0, redissonError(err)
	}
	if res.HolderTTL > 0 && !res.Split {
		return max(res.HolderTTL.Milliseconds(), 1), nil
	}
	// No holder's lease known, or none on a quorum (the contenders split
	// the votes and every one failed, or the validity ran out): no unlock
	// message will come, so Redisson must try again soon rather than wait
	// out the other contenders' leases. Jittered, so that contenders that
	// split do not meet again.
	return 10 + rand.Int64N(31), nil
}

// redissonFencing refuses RFencedLock where lockproxy mints no fencing
// tokens: its token is the lock's fencing token.
const redissonFencing = "Redisson's RFencedLock needs fencing: its tokens are lockproxy's fencing tokens; set fencing = true on every lockproxy of this deployment"

// runRedissonFencedAcquireToken takes or re-enters the lock as
// runRedissonAcquire does, answering {-1, the lock's fencing token} when
// taken, {how long to wait, -1} when not. The token is lockproxy's
// (fence.go): larger than every earlier holder's of the lock, through
// every proxy, where Redisson's own counts up one master's counter, which
// a failover can take back. A re-entry answers the lock's token again.
func runRedissonFencedAcquireToken(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[0])
	if err != nil {
		return nil, err
	}
	res, err := l.Lock(ctx, quorum.Lock{Op: quorum.OpHashAcquire, Keys: keys[:1], Token: args[1], TTL: lease})
	if err == nil {
		return []any{int64(-1), res.Fence}, nil
	}
	wait, err := redissonRefusal(res, err)
	if err != nil {
		return nil, err
	}
	return []any{wait, int64(-1)}, nil
}

// redissonTokenPrefix starts the key of RFencedLock's token counter,
// redisson_lock_token:{name} (name's braces as in redissonChannel).
const redissonTokenPrefix = "redisson_lock_token:"

// redissonTokenLock is the lock whose token key is key, for
// RFencedLock.getToken()'s GET.
func redissonTokenLock(key string) (string, bool) {
	name, _, ok := redissonName(key, redissonTokenPrefix)
	return name, ok
}

// redissonName undoes Redisson's prefixName: the lock name in s after
// prefix, which is "{name}" for a name without a "{" and the name itself
// otherwise. braced says s had the braces added, where the lock may also be
// "{name}" itself (both give the same text); ok is false when s is not
// such a text.
func redissonName(s, prefix string) (name string, braced, ok bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || rest == "" {
		return "", false, false
	}
	if inner, cut := strings.CutPrefix(rest, "{"); cut {
		if inner, cut = strings.CutSuffix(inner, "}"); cut && !strings.Contains(inner, "{") {
			return inner, true, true
		}
	}
	// Redisson braces every name without one.
	return rest, false, strings.Contains(rest, "{")
}

// replyRedissonToken answers RFencedLock.getToken()'s GET of the lock
// name's token key: the fencing token a quorum of the lock's holders
// carry, whoever holds it (Redisson's reads no owner), or null when the
// lock is not held. Where Redisson's counter would still answer the last
// token after the unlock, this answers none: there is no lock to fence.
func (s *Server) replyRedissonToken(conn redcon.Conn, name string) {
	r, err := space(conn).Read(s.ctx, quorum.Read{Op: quorum.OpHashFence, Key: name})
	switch {
	case err == nil:
		conn.WriteBulkString(strconv.FormatInt(r.Fence, 10))
	case notHeld(err), errors.Is(err, quorum.ErrNoFence):
		writeNull(conn)
	default:
		s.writeError(conn, err)
	}
}

// redissonRelease is one release script's layout: where its latch (none
// before 3.24) and latch TTL are.
type redissonRelease struct{ latched bool }

// run leaves the lock KEYS[1] once for the owner ARGV[3], setting the
// lease ARGV[2] ms while holds are left: 0 still held, 1 released, null
// when the owner did not hold it (IllegalMonitorStateException). Its
// PUBLISH of ARGV[1] on KEYS[2] is not run: every proxy tells its own
// subscribers of the release (redissonChannel).
func (r redissonRelease) run(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[1])
	if err != nil {
		return nil, err
	}
	req := quorum.Unlock{Op: quorum.OpHashRelease, Keys: keys[:1], Token: args[2], TTL: lease}
	if r.latched {
		req.Latch = keys[2]
		if req.LatchTTL, err = parseTTL([]byte(args[4]), false, "set"); err != nil {
			return nil, err
		}
	}
	res, err := l.Unlock(ctx, req)
	switch {
	case notHeld(err):
		return nil, nil
	case err != nil:
		return nil, redissonError(err)
	case res.Released:
		return int64(1), nil
	}
	return int64(0), nil
}

// runRedissonForceUnlock deletes the lock KEYS[1] whoever holds it: 1
// when a quorum had it, else 0. Its PUBLISH is not run, as for a release.
func runRedissonForceUnlock(ctx context.Context, l *keyspace, keys, _ []string) (any, error) {
	return deleteWhoever(ctx, l, keys[0])
}

// renewFields renews each lock keys[i], owner owners[i], to lease:
// renewed (1) or lost (0), each on its own votes; a 0 makes Redisson's
// watchdog stop renewing that lock. When any lock is undecided for want of
// votes the reply is that error, for all of them: Redisson from 3.44 then
// tries the whole batch again at its next round, where a 0 would have
// given up a lock that may still be held (before, it stops either way).
func renewFields(ctx context.Context, l Locker, lease string, keys, owners []string) ([]int64, error) {
	held := make([]quorum.Held, len(keys))
	for i := range keys {
		held[i] = quorum.Held{Key: keys[i], Token: owners[i]}
	}
	outcomes, err := renewals(ctx, l, lease, quorum.Renewal{Locks: held, Hash: true})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	for i, err := range outcomes {
		if err != nil && !notHeld(err) {
			return nil, err
		}
		out[i] = boolInt(err == nil)
	}
	return out, nil
}

// renewals renews req.Locks to the lease (ms), and returns each one's
// outcome: nil renewed, else its "not held" or "no quorum" error. Any
// other error is the reply for them all.
func renewals(ctx context.Context, l Locker, lease string, req quorum.Renewal) ([]error, error) {
	var err error
	if req.TTL, err = redissonLease(lease); err != nil {
		return nil, err
	}
	out := make([]error, len(req.Locks))
	if len(req.Locks) == 0 {
		return out, nil
	}
	for i, renewed := range l.Renew(ctx, req) {
		if err := renewed.Err; err != nil && !notHeld(err) && !errors.Is(err, quorum.ErrNoQuorum) {
			return nil, redissonError(err)
		}
		out[i] = renewed.Err
	}
	return out, nil
}

// runRedissonRenew is the watchdog to 3.43: KEYS[1] for the owner ARGV[2]
// to a lease of ARGV[1] ms; 1 or 0.
func runRedissonRenew(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	out, err := renewFields(ctx, l, args[0], keys[:1], args[1:2])
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// runRedissonRenewBatch is the watchdog from 3.44: each KEYS[i] for the
// owner ARGV[i+1] to a lease of ARGV[1] ms; an array of 1 or 0, each
// lock's own.
func runRedissonRenewBatch(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if len(args) < len(keys)+1 {
		return nil, errorf("ERR lockproxy runs Redisson's watchdog with a lease and an owner for each of its %d keys (got %d arguments)", len(keys), len(args))
	}
	out, err := renewFields(ctx, l, args[0], keys, args[1:len(keys)+1])
	if err != nil {
		return nil, err
	}
	reply := make([]any, len(out))
	for i, n := range out {
		reply[i] = n
	}
	return reply, nil
}

// redissonChannelPrefix starts the channel on which Redisson tells a
// lock's waiters of its release (RedissonLock.getChannelName).
const redissonChannelPrefix = "redisson_lock__channel:"

// redissonChannel is RedissonLock's unlock channel: for the lock name,
// redisson_lock__channel:{name}, or redisson_lock__channel:name when the
// name already has a "{" (Redisson's prefixName), and the payload "0"
// (LockPubSub.UNLOCK_MESSAGE: one waiter's permit).
var redissonChannel = redissonLockChannel("Redisson RLock", redissonChannelPrefix, "0")

// redissonLockChannel is a Redisson lock object's unlock channel: prefix,
// then the lock name braced as Redisson's prefixName braces it, with
// payload.
func redissonLockChannel(library, prefix, payload string) lockChannel {
	return lockChannel{
		library: library,
		keyOf: func(channel string) (string, bool) {
			name, braced, ok := redissonName(channel, prefix)
			switch {
			case !ok:
				return "", false
			case braced:
				// The lock "x" and the lock "{x}" share the channel
				// "...:{x}": a glob matching both, each release checked
				// against the channel (subscriber.released).
				return "*" + globEscape(name) + "*", true
			}
			return globEscape(name), true
		},
		keysOf: func(pattern string) (string, bool) {
			if !strings.HasPrefix(pattern, prefix) {
				return "", false
			}
			return "*", true
		},
		channels: func(key string) []string {
			if strings.Contains(key, "{") {
				return []string{prefix + key}
			}
			return []string{prefix + "{" + key + "}"}
		},
		payload: func(string) string { return payload },
	}
}

// redissonRefused are Redisson's other lock objects, by the SHA1s of the
// scripts they send (testdata/scripts), which lockproxy refuses by name,
// saying why: an application that uses one learns it at its first call,
// and which one.
var redissonRefused = func() map[string]*refusedObject {
	fair := redissonFairLock
	return map[string]*refusedObject{
		"762bfafa6be221431a0b668685dd15c926483619": fair, "aa0a28d2eb7cbeb50151315a58eb75302d8dfa40": fair,
		"ca303f8587d0942f8a0021f62338626ca4dd0118": fair, "8f6ed299ffd259f0539c20f89253998c0777ea75": fair,
		"d20501c26a30adf6fb0fe9883bbbcc497e6157e2": fair, "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6": fair,
		"d1ddef65ad80886b5d36e023c99930044ddd653a": fair, "047c11d7fec40d0102fe9903ff1e19e9a1dec610": fair,
		"71ed11d4e4818119ac560b3d670a7f08256afc46": fair,
	}
}()

// redissonFairLock is Redisson's lock object that lockproxy refuses, and
// why (docs/design/rwlock.md, §3).
var redissonFairLock = &refusedObject{name: "Redisson's RFairLock",
	why: "its waiters' FIFO queue (a list) and their timeouts (a sorted set scored by client clocks) would have to be one order agreed by the backends, which is consensus, not a Redlock quorum (docs/design/rwlock.md); use RLock, whose waiters lockproxy wakes by its unlock message"}

// refusedObject is a library's lock object that lockproxy does not serve.
type refusedObject struct{ name, why string }
