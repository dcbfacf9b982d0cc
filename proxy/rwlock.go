package proxy

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// Redisson's RReadWriteLock (docs/design/rwlock.md). The lock is a hash,
// name, whose field "mode" says "read" or "write", with one field per
// owner counting its holds: a reader's "<uuid>:<thread id>", a writer's
// that and ":write". Each read hold i of an owner has its own key,
// {name}:<owner>:rwlock_timeout:<i>, whose TTL is that hold's lease.
// Each script below runs as one engine operation (quorum/rwlock.go); as
// for RLock, their PUBLISH is not run: every proxy tells the waiters of
// redisson_rwlock:{name} of each release (redissonRWChannel). The write
// lock's watchdog is RLock's (scripts_library.go), its isLocked() an
// HGET of "mode" (keys.go).

// The script bodies, as Redisson 3.10.0 to 4.7.0 send them (testdata/scripts
// has each byte for byte, named by the releases that send it).
const (
	// Read lock and tryLock. KEYS name, timeout prefix; ARGV lease,
	// reader field, the same thread's writer field.
	redissonReadAcquire = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then
			redis.call('hset', KEYS[1], 'mode', 'read'); redis.call('hset', KEYS[1], ARGV[2], 1);
			redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
			redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
			local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
			local key = KEYS[2] .. ':' .. ind;
			redis.call('set', key, 1); redis.call('pexpire', key, ARGV[1]);
			local remainTime = redis.call('pttl', KEYS[1]);
			redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); return nil;
		end;
		return redis.call('pttl', KEYS[1]);`
	// Read lock and tryLock, 3.10.0 to 3.11.0: a re-entry sets the lock's
	// TTL to the lease, even below another reader's hold (3.11.1 keeps
	// the longer of the two, as the engine does).
	redissonReadAcquireLease = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then
			redis.call('hset', KEYS[1], 'mode', 'read'); redis.call('hset', KEYS[1], ARGV[2], 1);
			redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
			redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
			local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
			local key = KEYS[2] .. ':' .. ind;
			redis.call('set', key, 1); redis.call('pexpire', key, ARGV[1]);
			redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		return redis.call('pttl', KEYS[1]);`
	// Read unlock before 3.24, without the latch; %s publishes: 'publish'
	// to 3.21.3, ARGV[3] in 3.22 and 3.23. A free lock answers 1. KEYS
	// name, channel, timeout prefix, key prefix; ARGV message, reader
	// field (, publish command).
	redissonReadReleaseUnlatchedBody = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then redis.call(%[1]s, KEYS[2], ARGV[1]); return 1; end;
		local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
		if (lockExists == 0) then return nil; end;
		local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
		if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;
		redis.call('del', KEYS[3] .. ':' .. (counter+1));
		if (redis.call('hlen', KEYS[1]) > 1) then
			local maxRemainTime = -3;
			local keys = redis.call('hkeys', KEYS[1]);
			for n, key in ipairs(keys) do
				counter = tonumber(redis.call('hget', KEYS[1], key));
				if type(counter) == 'number' then
					for i=counter, 1, -1 do
						local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
						maxRemainTime = math.max(remainTime, maxRemainTime);
					end;
				end;
			end;
			if maxRemainTime > 0 then redis.call('pexpire', KEYS[1], maxRemainTime); return 0; end;
			if mode == 'write' then return 0; end;
		end;
		redis.call('del', KEYS[1]); redis.call(%[1]s, KEYS[2], ARGV[1]); return 1;`
	// Read unlock; %s is what a free lock answers: 1 (3.27) or nil (4.7).
	// KEYS name, channel, timeout prefix, key prefix, latch; ARGV message,
	// reader field, publish command, latch TTL.
	redissonReadReleaseBody = `
		local val = redis.call('get', KEYS[5]); if val ~= false then return tonumber(val); end;
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then
			redis.call(ARGV[3], KEYS[2], ARGV[1]); redis.call('set', KEYS[5], 1, 'px', ARGV[4]); return %s;
		end;
		local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
		if (lockExists == 0) then return nil; end;
		local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
		if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;
		redis.call('del', KEYS[3] .. ':' .. (counter+1));
		if (redis.call('hlen', KEYS[1]) > 1) then
			local maxRemainTime = -3;
			local keys = redis.call('hkeys', KEYS[1]);
			for n, key in ipairs(keys) do
				counter = tonumber(redis.call('hget', KEYS[1], key));
				if type(counter) == 'number' then
					for i=counter, 1, -1 do
						local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
						maxRemainTime = math.max(remainTime, maxRemainTime);
					end;
				end;
			end;
			if maxRemainTime > 0 then
				redis.call('pexpire', KEYS[1], maxRemainTime); redis.call('set', KEYS[5], 0, 'px', ARGV[4]); return 0;
			end;
			if mode == 'write' then redis.call('set', KEYS[5], 0, 'px', ARGV[4]); return 0; end;
		end;
		redis.call('del', KEYS[1]); redis.call(ARGV[3], KEYS[2], ARGV[1]); redis.call('set', KEYS[5], 1, 'px', ARGV[4]); return 1;`
	// Write lock and tryLock. KEYS name; ARGV lease, writer field.
	redissonWriteAcquire = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then
			redis.call('hset', KEYS[1], 'mode', 'write'); redis.call('hset', KEYS[1], ARGV[2], 1);
			redis.call('pexpire', KEYS[1], ARGV[1]); return nil;
		end;
		if (mode == 'write') then
			if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
				redis.call('hincrby', KEYS[1], ARGV[2], 1);
				local currentExpire = redis.call('pttl', KEYS[1]);
				redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); return nil;
			end;
		end;
		return redis.call('pttl', KEYS[1]);`
	// Write unlock; %s as in the read unlock. KEYS name, channel, latch;
	// ARGV message, lease, writer field, publish command, latch TTL.
	redissonWriteReleaseBody = `
		local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end;
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then
			redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return %s;
		end;
		if (mode == 'write') then
			local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
			if (lockExists == 0) then return nil;
			else
				local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
				if (counter > 0) then
					redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0;
				else
					redis.call('hdel', KEYS[1], ARGV[3]);
					if (redis.call('hlen', KEYS[1]) == 1) then
						redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]);
					else
						redis.call('hset', KEYS[1], 'mode', 'read');
					end;
					redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1;
				end;
			end;
		end;
		return nil;`
	// Write unlock before 3.24, without the latch; %s publishes as in the
	// read unlock before 3.24. KEYS name, channel; ARGV message, lease,
	// writer field (, publish command).
	redissonWriteReleaseUnlatchedBody = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == false) then redis.call(%[1]s, KEYS[2], ARGV[1]); return 1; end;
		if (mode == 'write') then
			local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
			if (lockExists == 0) then return nil;
			else
				local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
				if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0;
				else
					redis.call('hdel', KEYS[1], ARGV[3]);
					if (redis.call('hlen', KEYS[1]) == 1) then
						redis.call('del', KEYS[1]); redis.call(%[1]s, KEYS[2], ARGV[1]);
					else
						redis.call('hset', KEYS[1], 'mode', 'read');
					end;
					return 1;
				end;
			end;
		end;
		return nil;`
	// The read lock's watchdog, 3.27: KEYS name, key prefix; ARGV lease,
	// reader field.
	redissonReadRenew = `
		local counter = redis.call('hget', KEYS[1], ARGV[2]);
		if (counter ~= false) then
			redis.call('pexpire', KEYS[1], ARGV[1]);
			if (redis.call('hlen', KEYS[1]) > 1) then
				local keys = redis.call('hkeys', KEYS[1]);
				for n, key in ipairs(keys) do
					counter = tonumber(redis.call('hget', KEYS[1], key));
					if type(counter) == 'number' then
						for i=counter, 1, -1 do
							redis.call('pexpire', KEYS[2] .. ':' .. key .. ':rwlock_timeout:' .. i, ARGV[1]);
						end;
					end;
				end;
			end;
			return 1;
		end;
		return 0;`
	// The read lock's watchdog, 4.7 (ReadLockTask): KEYS pairs of a name
	// and its key prefix; ARGV the lease, then per pair a count m and m
	// reader fields.
	redissonReadRenewBatch = `
		local result = {}
		local argIdx = 2
		for i = 1, #KEYS, 2 do
			local anyAlive = false;
			local lockNamesCount = tonumber(ARGV[argIdx]);
			argIdx = argIdx + 1;
			for k = 1, lockNamesCount do
				local counter = redis.call('hget', KEYS[i], ARGV[argIdx]);
				if (counter ~= false) then
					anyAlive = true;
					for c=counter, 1, -1 do
						redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]);
					end;
				end;
				argIdx = argIdx + 1;
			end;
			if (anyAlive) then redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1);
			else table.insert(result, 0); end;
		end;
		return result;`
	// The read lock's watchdog from 3.44.0 to 4.3.1 (ReadLockTask): KEYS
	// pairs of a name and its key prefix; ARGV the lease, then one reader
	// field per pair. It is 3.27's script per pair; %s counts the holds of
	// the inner loop, which names KEYS[i+1]: "c" from 4.0.0, while 3.44.0
	// to 3.52.0 use "i", whose inner i hides the pair's, so that a hold
	// count above 1 names another key, or none (a Lua error).
	redissonReadRenewPairsBody = `
		local result = {}
		local j = 1
		for i = 1, #KEYS, 2 do
			j = j + 1;
			local counter = redis.call('hget', KEYS[i], ARGV[j]);
			if (counter ~= false) then
				redis.call('pexpire', KEYS[i], ARGV[1]);
				if (redis.call('hlen', KEYS[i]) > 1) then
					local keys = redis.call('hkeys', KEYS[i]);
					for n, key in ipairs(keys) do
						counter = tonumber(redis.call('hget', KEYS[i], key));
						if type(counter) == 'number' then
							for %[1]s=counter, 1, -1 do
								redis.call('pexpire', KEYS[i+1] .. ':' .. key .. ':rwlock_timeout:' .. %[1]s, ARGV[1]);
							end;
						end;
					end;
				end;
				table.insert(result, 1);
			else table.insert(result, 0); end;
		end;
		return result;`
	// forceUnlock of the lock whose mode is %[1]s; %[2]s publishes:
	// 'publish' to 3.21.3, ARGV[2] from 3.22.0. KEYS name, channel; ARGV
	// message (, publish command).
	redissonRWForceUnlockBody = `
		if (redis.call('hget', KEYS[1], 'mode') == '%[1]s') then
			redis.call('del', KEYS[1]); redis.call(%[2]s, KEYS[2], ARGV[1]); return 1;
		end;
		return 0;`
	// The read lock's isLocked(): KEYS name.
	redissonReadLocked = `
		local mode = redis.call('hget', KEYS[1], 'mode');
		if (mode == 'read') or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then return 1; end;
		return 0;`
)

// rwModeField is the read-write lock's field that holds its mode.
const rwModeField = "mode"

// timeoutSuffix ends a read hold's timeout prefix, after the key prefix
// and the owner (RedissonReadLock.getReadWriteTimeoutNamePrefix).
const timeoutSuffix = ":rwlock_timeout"

// readKeyPrefix checks that timeoutPrefix is Redisson's for the reader,
// "<key prefix>:<reader>:rwlock_timeout", and returns the key prefix,
// which the engine puts the timeout keys under as Redisson does.
func readKeyPrefix(timeoutPrefix, reader string) (string, error) {
	prefix, ok := strings.CutSuffix(timeoutPrefix, ":"+reader+timeoutSuffix)
	if !ok || prefix == "" {
		return "", errorf("ERR lockproxy runs Redisson's read lock with a timeout prefix of <key prefix>:<reader>%s, the reader being %q (got %q)",
			timeoutSuffix, reader, timeoutPrefix)
	}
	return prefix, nil
}

// writeOwner is the owner of Redisson's writer field: the field without
// ":write".
func writeOwner(writer string) (string, error) {
	owner, ok := strings.CutSuffix(writer, quorum.WriterSuffix)
	if !ok || owner == "" {
		return "", errorf("ERR lockproxy runs Redisson's write lock with a writer field of <owner>%s (got %q)", quorum.WriterSuffix, writer)
	}
	return owner, nil
}

// runRedissonReadAcquire takes or re-enters the read lock KEYS[1] for the
// reader ARGV[2] with a lease of ARGV[1] ms: null, or how long to wait. A
// reader enters beside other readers, or beside its own thread's writer
// ARGV[3].
func runRedissonReadAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[0])
	if err != nil {
		return nil, err
	}
	reader := args[1]
	if args[2] != reader+quorum.WriterSuffix {
		return nil, errorf("ERR lockproxy runs Redisson's read lock with the writer field of the reader's own thread, %q (got %q)", reader+quorum.WriterSuffix, args[2])
	}
	prefix, err := readKeyPrefix(keys[1], reader)
	if err != nil {
		return nil, err
	}
	res, err := l.Lock(ctx, quorum.Lock{Op: quorum.OpReadAcquire, Keys: []string{keys[0], prefix}, Token: reader, TTL: lease})
	if err == nil {
		return nil, nil
	}
	return redissonRefusal(res, err)
}

// runRedissonWriteAcquire takes or re-enters the write lock KEYS[1] for
// the writer ARGV[2] with a lease of ARGV[1] ms: null, or how long to
// wait.
func runRedissonWriteAcquire(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[0])
	if err != nil {
		return nil, err
	}
	owner, err := writeOwner(args[1])
	if err != nil {
		return nil, err
	}
	res, err := l.Lock(ctx, quorum.Lock{Op: quorum.OpWriteAcquire, Keys: keys[:1], Token: owner, TTL: lease})
	if err == nil {
		return nil, nil
	}
	return redissonRefusal(res, err)
}

// redissonRWRelease is one of the read-write lock's release scripts:
// whether it has the unlock latch (from 3.24), and what it answers for a
// lock a quorum had no trace of, null from 3.44, else 1.
type redissonRWRelease struct{ latched, freeIsNull bool }

// latch is the release's latch and its TTL, the key at and the argument
// ttlAt, or none before 3.24.
func (r redissonRWRelease) latch(keys, args []string, at, ttlAt int) (string, time.Duration, error) {
	if !r.latched {
		return "", 0, nil
	}
	ttl, err := parseTTL([]byte(args[ttlAt]), false, "set")
	return keys[at], ttl, err
}

// free is the answer for a lock absent on a quorum.
func (r redissonRWRelease) free() any {
	if r.freeIsNull {
		return nil
	}
	return int64(1)
}

// answer maps a release's outcome: null when the owner did not hold it
// (IllegalMonitorStateException), 1 when released and gone (for a read
// release, only when nothing else was left), 0 otherwise.
func (r redissonRWRelease) answer(res quorum.Result, err error, gone bool) (any, error) {
	switch {
	case errors.Is(err, quorum.ErrAbsent):
		return r.free(), nil
	case notHeld(err):
		return nil, nil
	case err != nil:
		return nil, redissonError(err)
	case gone:
		return int64(1), nil
	}
	return int64(0), nil
}

// runRead leaves the read lock KEYS[1] once for the reader ARGV[2]: 1
// when the lock went with it, 0 when other holds are left, null when the
// reader did not hold it. Its PUBLISH is not run (redissonRWChannel).
func (r redissonRWRelease) runRead(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	reader := args[1]
	if keys[2] != keys[3]+":"+reader+timeoutSuffix {
		return nil, errorf("ERR lockproxy runs Redisson's read unlock with a timeout prefix of the key prefix %q, then :<reader>%s, the reader being %q (got %q)",
			keys[3], timeoutSuffix, reader, keys[2])
	}
	latch, latchTTL, err := r.latch(keys, args, 4, 3)
	if err != nil {
		return nil, err
	}
	res, err := l.Unlock(ctx, quorum.Unlock{Op: quorum.OpReadRelease, Keys: []string{keys[0], keys[3]}, Token: reader,
		Latch: latch, LatchTTL: latchTTL})
	return r.answer(res, err, res.Released && res.Emptied)
}

// runWrite leaves the write lock KEYS[1] once for the writer ARGV[3],
// setting the lease ARGV[2] ms while write holds are left: 0 still held,
// 1 released (the lock gone, or downgraded to the writer's read holds),
// null when the writer did not hold it.
func (r redissonRWRelease) runWrite(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	lease, err := redissonLease(args[1])
	if err != nil {
		return nil, err
	}
	owner, err := writeOwner(args[2])
	if err != nil {
		return nil, err
	}
	latch, latchTTL, err := r.latch(keys, args, 2, 4)
	if err != nil {
		return nil, err
	}
	res, err := l.Unlock(ctx, quorum.Unlock{Op: quorum.OpWriteRelease, Keys: keys[:1], Token: owner, TTL: lease,
		Latch: latch, LatchTTL: latchTTL})
	return r.answer(res, err, res.Released)
}

// runRedissonReadRenew is the read lock's watchdog in 3.27: the reader
// ARGV[2]'s hold of KEYS[1], with its timeout keys under the key prefix
// KEYS[2], to a lease of ARGV[1] ms; 1 or 0, or the error when undecided.
// Redisson's renews every reader's timeout keys and sets the lock's TTL to
// the lease; the engine renews the owner's own and never shortens the
// lock (docs/design/rwlock.md, the watchdog).
func runRedissonReadRenew(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	outcomes, err := renewals(ctx, l, args[0], quorum.Renewal{Read: true, Locks: []quorum.Held{{Key: keys[0], Token: args[1], Prefix: keys[1]}}})
	if err != nil {
		return nil, err
	}
	if err := outcomes[0]; err != nil && !notHeld(err) {
		return nil, err
	}
	return boolInt(outcomes[0] == nil), nil
}

// runRedissonReadRenewBatch is the read lock's watchdog in 4.7: for each
// pair of KEYS, a lock and its key prefix, the readers ARGV lists for it
// (a count, then as many fields), to a lease of ARGV[1] ms; per lock 1
// when any of its readers was renewed, else 0. A lock none of whose
// readers was renewed, and one of them undecided, makes the reply that
// error, as renewFields does: Redisson tries the batch again next round.
func runRedissonReadRenewBatch(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if len(keys)%2 != 0 {
		return nil, errorf("ERR lockproxy runs Redisson's read lock watchdog with pairs of keys, a lock and its key prefix (got %d keys)", len(keys))
	}
	var held []quorum.Held
	var lockOf []int // the pair each of held is a reader of
	next := 1
	for i := 0; i < len(keys); i += 2 {
		m, ok := parseInt([]byte(arg(args, next)))
		if left := len(args) - next - 1; !ok || m < 0 || int64(left) < m {
			return nil, errorf("ERR lockproxy runs Redisson's read lock watchdog with, for each lock, a count of readers and as many reader fields (lock %d: count %q, %d arguments left)",
				i/2+1, arg(args, next), max(left, 0))
		}
		for _, reader := range args[next+1 : next+1+int(m)] {
			held = append(held, quorum.Held{Key: keys[i], Token: reader, Prefix: keys[i+1]})
			lockOf = append(lockOf, i/2)
		}
		next += 1 + int(m)
	}
	return renewReaders(ctx, l, args[0], held, lockOf, len(keys)/2)
}

// runRedissonReadRenewPairs is the read lock's watchdog from 3.44.0 to
// 4.3.1: for each pair of KEYS, a lock and its key prefix, the one reader
// ARGV names for it, to a lease of ARGV[1] ms; per lock 1 or 0, as
// runRedissonReadRenewBatch. 3.44.0 to 3.52.0 send a script that, for a
// reader with more than one hold, renews keys of other names or fails
// (redissonReadRenewPairsBody); the engine renews that reader's holds.
func runRedissonReadRenewPairs(ctx context.Context, l *keyspace, keys, args []string) (any, error) {
	if len(keys)%2 != 0 || len(args) != 1+len(keys)/2 {
		return nil, errorf("ERR lockproxy runs Redisson's read lock watchdog with pairs of keys, a lock and its key prefix, and a lease and a reader for each pair (got %d keys, %d arguments)",
			len(keys), len(args))
	}
	held := make([]quorum.Held, len(keys)/2)
	lockOf := make([]int, len(keys)/2)
	for j := range held {
		held[j] = quorum.Held{Key: keys[2*j], Token: args[1+j], Prefix: keys[2*j+1]}
		lockOf[j] = j
	}
	return renewReaders(ctx, l, args[0], held, lockOf, len(held))
}

// renewReaders renews the read holds held, each of the lock lockOf says
// among locks, to lease: per lock 1 when any of its readers was renewed,
// else 0; a lock none of whose readers was renewed, and one of them
// undecided, makes the reply that error.
func renewReaders(ctx context.Context, l *keyspace, lease string, held []quorum.Held, lockOf []int, locks int) (any, error) {
	outcomes, err := renewals(ctx, l, lease, quorum.Renewal{Read: true, Locks: held})
	if err != nil {
		return nil, err
	}
	renewed := make([]bool, locks)
	undecided := make([]error, locks)
	for i, err := range outcomes {
		switch j := lockOf[i]; {
		case err == nil:
			renewed[j] = true
		case !notHeld(err):
			undecided[j] = cmp.Or(undecided[j], err)
		}
	}
	reply := make([]any, len(renewed))
	for j := range renewed {
		if !renewed[j] && undecided[j] != nil {
			return nil, undecided[j]
		}
		reply[j] = boolInt(renewed[j])
	}
	return reply, nil
}

// boolInt is 1 for true, 0 for false, as a script's reply.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// arg is args[i], or "" past its end.
func arg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

// redissonRWForceUnlock is forceUnlock() of the read or the write lock:
// the lock deleted where a quorum has it in that mode, 1; else 0. Its
// PUBLISH is not run, as for a release.
type redissonRWForceUnlock struct{ mode string }

func (f redissonRWForceUnlock) run(ctx context.Context, l *keyspace, keys, _ []string) (any, error) {
	return deletedReply(l.Write(ctx, quorum.Write{Op: quorum.OpRWDelete, Key: keys[0], Mode: f.mode}))
}

// runRedissonReadLocked is the read lock's isLocked(): 1 when a quorum
// has it read-locked (by a reader, or by a writer that also reads), else 0.
func runRedissonReadLocked(ctx context.Context, l *keyspace, keys, _ []string) (any, error) {
	r, err := l.Read(ctx, quorum.Read{Op: quorum.OpReadLocked, Key: keys[0]})
	switch {
	case errors.Is(err, quorum.ErrNotFound):
		return int64(0), nil
	case err != nil:
		return nil, err
	case r.Exists:
		return int64(1), nil
	}
	return int64(0), nil
}

// redissonRWChannelPrefix starts the channel on which Redisson tells a
// read-write lock's waiters, readers and writers alike, of its release
// (RedissonReadLock and RedissonWriteLock.getChannelName).
const redissonRWChannelPrefix = "redisson_rwlock:"

// redissonRWChannel is RReadWriteLock's unlock channel,
// redisson_rwlock:{name}, braced as redissonChannel's, with the payload
// "1" (LockPubSub.READ_UNLOCK_MESSAGE: every waiting thread tries again).
// The proxy hears a release, not who waits: waking every waiter costs a
// writer that lost the race one more try, where waking one could leave
// readers, who would all have entered, asleep until their wait ends.
var redissonRWChannel = redissonLockChannel("Redisson RReadWriteLock", redissonRWChannelPrefix, "1")
