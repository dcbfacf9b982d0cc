package proxy

import (
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/quorum"
)

// The lock scripts of client libraries, by what they do. Each kind lists
// the texts it is recognised by (compared by their canonical form, see
// internal/luaform: layout, quotes, local names and the case of command
// names do not count), the SHA1s of the
// published bodies (answered without normalising), and the one Locker
// operation that does on a quorum what the script does on one Redis. The
// reply is what the script returns on one Redis: libraries tell outcomes
// apart by it (1/0, a count, OK/null, -1, a PTTL).
//
// Which library sends which body, byte for byte, is in
// testdata/scripts and the table of scripts_library_test.go; the scripts
// that are deliberately not recognised (hashes, pub/sub, sorted sets, list
// signals) are listed there too, with the reason, for docs/compatibility.md.

// scriptKinds lists the recognised scripts.
var scriptKinds = []*scriptKind{
	{
		// redis.io's release, redis-py, bsm/redislock 0.9, node-redlock 3,
		// redis-semaphore, pottery, redlock-rb, Laravel, RedLock.net,
		// ShedLock, redsync <= 4.11, Symfony <= 5.3.
		name: "compare-and-delete", keys: 1, args: 1, run: runCompareAndDelete,
		bodies: ownerGuarded(`redis.call("del", KEYS[1])`, `redis.call("unlink", KEYS[1])`),
		digests: []string{
			"194f3902b2dd08557818d09fc2e7682d91480e53", "647c65a442733a1aa440f99908d249d13b4d6c4a",
			"b70c2384248f88e6b75b9f89241a180f856ad852", "cf0e94b2e9ffc7e04395cf88f7583fc309985910",
			"c3f8721cbb97f72bc19e972846bd7aaf91901658", "7157921a7cc7cfba979acf6d63f073151df17d12",
			"a4aada0b36710970eedaaaeec4a6b7d8c78c4f80", "8e4905cee18e7c3188d10f2b8b170e403baed34f",
			"18b2a577dbe847b16bebde190d69a1613d68e60e", "cb0427378f700ddb2f0e9394dbb0a40bd6dba04a", "7726c7be95e2a0ed082ec1da1e26b562f5c8903f", "9eb62214c9af87ae5f9a9f12bb4520281c0d2ae1",
			"00583931c4e4d483f6233879c133c71ed5393f9d", "bec85b1c518b7ba0348a49c79b24adbb1ca95d3b",
		},
	},
	{
		// bsm/redislock 0.9 refresh, node-redlock 3 extend, redsync extend,
		// redis-py reacquire, redis-semaphore refresh, pottery extend,
		// ShedLock, Symfony <= 5.3.
		name: "compare-and-pexpire", keys: 1, args: 2, run: runCompareAndPExpire,
		bodies: ownerGuarded(`redis.call("pexpire", KEYS[1], ARGV[2])`),
		digests: []string{
			"a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", "d75bb8b5bd13532ddedd17762e772346e39b321e",
			"1cac51482acf5858da00f6d685d68f886cd6b6b2", "594683e49a64ebaf975caf5f8079a1d097c438f1",
			"ba015a80261b616e7a62d35df0b8e3edbe6c9414", "67256370c2d1c87e2250898075542b1a7fa5b917",
			"ae948f48c8da9feb2e215c474a412c605d33ff30",
		},
	},
	{
		// rueidislock and valkeylock extend, to a Unix time in ms; since
		// 1.0.5x reading the key again, so that Redis tracks it for the
		// holder, who waits for its own extension's invalidation.
		name: "compare-and-pexpireat", keys: 1, args: 2, run: runCompareAndPExpireAt,
		bodies: append(ownerGuarded(`redis.call("pexpireat", KEYS[1], ARGV[2])`),
			`if redis.call("get", KEYS[1]) == ARGV[1] then local r = redis.call("pexpireat", KEYS[1], ARGV[2]) redis.call("get", KEYS[1]) return r end return 0`),
		digests: []string{"8c2dd3ce05f3aace5fa1002a403139a7fbab3226", "852ba6ec6104340ced36643283c856d4698569e4"},
	},
	{
		// rueidislock and valkeylock acquire (SET NX PXAT, then a GET that
		// has the key tracked).
		name: "acquire-at", keys: 1, args: 2, run: runAcquireAt,
		bodies: []string{
			`return redis.call("set", KEYS[1], ARGV[1], "NX", "PXAT", ARGV[2])`,
			`local r = redis.call("set", KEYS[1], ARGV[1], "NX", "PXAT", ARGV[2]) redis.call("get", KEYS[1]) return r`,
		},
		digests: []string{"3875d208d9e377969d2022550302cc83ad17b584"},
	},
	{
		// go-redsync >= 4.12: -1 tells "already expired" (ErrLockAlreadyExpired).
		name: "compare-and-delete-or-absent", keys: 1, args: 1, run: runCompareAndDeleteOrAbsent,
		bodies: []string{
			`local val = redis.call("GET", KEYS[1]) if val == ARGV[1] then return redis.call("DEL", KEYS[1]) elseif val == false then return -1 else return 0 end`,
			`local val = redis.call("GET", KEYS[1]) if val == ARGV[1] then return redis.call("DEL", KEYS[1]) elseif not val then return -1 else return 0 end`,
		},
		digests: []string{"e950836ed1e694540c503ef9972b8de518044d3b"},
	},
	{
		// Spring Integration SPIN_LOCK unlock (UNLINK, or DEL before 7.0).
		name: "compare-and-delete-or-null", keys: 1, args: 1, run: runCompareAndDeleteOrNull,
		bodies:  nullGuarded(`redis.call("del", KEYS[1])`, `redis.call("unlink", KEYS[1])`),
		digests: []string{"f0f9038aa2b6d6c3436c72d147573ea2a58f0ef2", "356d97191f2b63031781ccc0e8e82f02e1995a90"},
	},
	{
		// Spring Integration PUB_SUB_LOCK unlock (6.0.7 on; DEL in the
		// fallback of 6.x). Its PUBLISH to the channel in ARGV[2] is not
		// run on the backends: every proxy hears the quorum release and
		// tells its own subscribers of the channel (pubsub.go), once.
		name: "compare-and-delete-publish-or-null", keys: 1, args: 2, run: runCompareAndDeleteOrNull,
		bodies:  springPubSubUnlocks("ARGV[2]"),
		digests: []string{"7a71e9443a2a41539fb115a5a27d5a748a871aed", "b2dedc0ab01c17f9f20e3e6ddb62dcb6afbed0bd"},
	},
	{
		// The same, about 6.4.8 to 7.0.0-RC2: the channel is KEYS[2], and
		// is no lock key.
		name: "compare-and-delete-publish-key-or-null", keys: 2, args: 1, run: runCompareAndDeleteOrNull,
		bodies:  springPubSubUnlocks("KEYS[2]"),
		digests: []string{"67aebbcba76d9674162e8906de1f669866f48e07", "4d7192f70618a620282e427698f9cde890151e58"},
	},
	{
		// Spring Integration renew.
		name: "compare-and-pexpire-or-null", keys: 1, args: 2, run: runCompareAndPExpireOrNull,
		bodies:  nullGuarded(`redis.call("pexpire", KEYS[1], ARGV[2])`),
		digests: []string{"879e0f7b8d83c3266d4e996627438c05dbda0b89"},
	},
	{
		// redis-py Lock.extend: ARGV[3] "0" adds ARGV[2] ms to the TTL left,
		// anything else sets it to ARGV[2] ms.
		name: "compare-and-add-or-set-pttl", keys: 1, args: 3, run: runCompareAndAddOrSetPTTL,
		bodies: []string{`
			local token = redis.call('get', KEYS[1])
			if not token or token ~= ARGV[1] then return 0 end
			local expiration = redis.call('pttl', KEYS[1])
			if not expiration then expiration = 0 end
			if expiration < 0 then return 0 end
			local newttl = ARGV[2]
			if ARGV[3] == "0" then newttl = ARGV[2] + expiration end
			redis.call('pexpire', KEYS[1], newttl)
			return 1`,
		},
		digests: []string{"a4e8783852e6b949f9ef3a97212805108459a890"},
	},
	{
		// redsync WithSetNXOnExtend, Symfony <= 5.3 save.
		name: "extend-or-acquire", keys: 1, args: 2, run: runExtendOrAcquire,
		bodies: []string{
			`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) elseif redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then return 1 else return 0 end`,
			`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) elseif redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 else return 0 end`,
		},
		digests: []string{"b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", "81523960da32c1f15ecab9f1f0fae74f7e943d07"},
	},
	{
		// Spring Integration obtain (the registry's clientId re-enters).
		name: "extend-or-acquire-or-null", keys: 1, args: 2, run: runExtendOrAcquireOrNull,
		bodies: []string{`
			local lockClientId = redis.call('GET', KEYS[1])
			if lockClientId == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return true
			elseif not lockClientId then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return true end
			return false`,
		},
		digests: []string{"175897a4e379e99e79a54937be09226f76cdcfe5", "8426c8df41c64d8177dce3ecbbe9146ef3759cd2"},
	},
	{
		// RedLock.net auto-extend: re-creates a vanished key, -1 when another
		// lockId holds it (its 0, a SET or PEXPIRE failing inside the
		// script, cannot happen).
		name: "extend-or-acquire-or-conflict", keys: 1, args: 2, run: runExtendOrAcquireOrConflict,
		bodies: []string{`
			local currentVal = redis.call('get', KEYS[1])
			if (currentVal == false) then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0
			elseif (currentVal == ARGV[1]) then return redis.call('pexpire', KEYS[1], ARGV[2])
			else return -1 end`,
		},
		digests: []string{"9f614a785a5f9ae8c6396c6b4bf94d2087342603", "3e7c6bf3e080bb97a92e77362149c26252b98212"},
	},
	{
		// redlock-rb lock and extend: ARGV[3] "yes" also takes a free key.
		name: "set-if-owner-or-free", keys: 1, args: 3, run: runSetIfOwnerOrFree,
		bodies: []string{
			`if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`,
		},
		digests: []string{"ceb2b2062e40c51a2b3963fd078bc71f11bdc65c"},
	},
	{
		// aioredlock 0.7 lock and extend: SET PX when free or held by
		// ARGV[1], redis.error_reply('ERROR') when another id holds it.
		name: "extend-or-acquire-or-error", keys: 1, args: 2, run: runExtendOrAcquireOrError,
		bodies: []string{`
			local identifier = redis.call('get', KEYS[1])
			if not identifier or identifier == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], 'PX', ARGV[2])
			else return redis.error_reply('ERROR') end`,
		},
		digests: []string{"c75a9bf1538efcdb1f383acc3e273c5089d57e58"},
	},
	{
		// aioredlock 0.7 unlock: OK for a free key, 1 when deleted, the
		// error reply when another id holds it.
		name: "compare-and-delete-or-free-or-error", keys: 1, args: 1, run: runCompareAndDeleteOrFreeOrError,
		bodies: []string{`
			local identifier = redis.call('get', KEYS[1])
			if not identifier then return redis.status_reply('OK')
			elseif identifier == ARGV[1] then return redis.call("del", KEYS[1])
			else return redis.error_reply('ERROR') end`,
		},
		digests: []string{"241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5"},
	},
	{
		// aioredlock 0.7 get_lock: TTL in seconds, the error reply when the
		// key is free or another id holds it.
		name: "owner-ttl-seconds-or-error", keys: 1, args: 1, run: runOwnerTTLSecondsOrError,
		bodies: []string{`
			local identifier = redis.call('get', KEYS[1])
			if not identifier then return redis.error_reply('ERROR')
			elseif identifier == ARGV[1] then return redis.call("TTL", KEYS[1])
			else return redis.error_reply('ERROR') end`,
		},
		digests: []string{"f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a"},
	},
	{
		// node-redlock 3 acquire.
		name: "acquire", keys: 1, args: 2, run: runAcquire,
		bodies: []string{
			`return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`,
			`return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2], "NX")`,
			// rueidislock and valkeylock with FallbackSETPX.
			`local r = redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) redis.call("get", KEYS[1]) return r`,
		},
		digests: []string{"862f31bf38e9b63ce28d6e9e5143551bb34ef981", "fa3d1aaa7e4145457755016a3d5daf72fa7a11bf"},
	},
	{
		// bsm/redislock 0.9 obtain: value is token+metadata, ARGV[2] the
		// token's length; the same token re-obtains.
		name: "acquire-or-renew", keys: 1, args: 3, run: runAcquireOrRenew,
		bodies: []string{`
			if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end
			local offset = tonumber(ARGV[2])
			if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end`,
		},
		digests: []string{"80a1b5f2cfccec3b7119ba7721d2127682b691a7"},
	},
	{
		// bsm/redislock 0.9 TTL: -3 when not the owner.
		name: "owner-pttl", keys: 1, args: 1, run: runOwnerPTTL,
		bodies: []string{
			`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pttl", KEYS[1]) else return -3 end`,
		},
		digests: []string{"6484da7d58920897fdc22b7f9afd1a3d47524ea8"},
	},
	{
		// pottery Redlock.locked(): 0 when not the owner.
		name: "owner-pttl-or-zero", keys: 1, args: 1, run: runOwnerPTTLOrZero,
		bodies: []string{`
			if redis.call('get', KEYS[1]) == ARGV[1] then
				local pttl = redis.call('pttl', KEYS[1])
				return (pttl > 0) and pttl or 0
			else return 0 end`,
		},
		digests: []string{"f5f7bd3a3aa4a63c507c1155c5ea1219b350d992"},
	},
	{
		// redlock-rb get_remaining_ttl: [value, pttl], or [null, -2] for a
		// free key (GET's false is a null inside the array).
		name: "value-and-pttl", keys: 1, args: 0, run: runValueAndPTTL,
		bodies:  []string{`return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }`},
		digests: []string{"78d2ca48a6dc9ef6892059792a3a0c5237733d64"},
	},
	{
		// python-redis-lock extend: EXPIRE in seconds; 0 done, 1 not owner
		// (2, no TTL, cannot happen: every lock through lockproxy has one).
		name: "compare-and-expire-seconds", keys: 1, args: 2, run: runCompareAndExpireSeconds,
		bodies: []string{`
			if redis.call("get", KEYS[1]) ~= ARGV[1] then return 1
			elseif redis.call("ttl", KEYS[1]) < 0 then return 2
			else redis.call("expire", KEYS[1], ARGV[2]) return 0 end`,
		},
		digests: []string{"fed16109024d968d9496e4140fe1355bac05ebff"},
	},
	{
		// python-redis-lock release: 0 released, 1 not owner (inverted).
		// The signal list KEYS[2] is not written: its waiters BLPOP through
		// lockproxy, which wakes them from the release itself (blpop.go).
		name: "compare-and-delete-and-signal", keys: 2, args: 2, run: runCompareAndDeleteAndSignal,
		bodies: []string{`
			if redis.call("get", KEYS[1]) ~= ARGV[1] then return 1
			else
				redis.call("del", KEYS[2]) redis.call("lpush", KEYS[2], 1) redis.call("pexpire", KEYS[2], ARGV[2])
				redis.call("del", KEYS[1]) return 0
			end`,
		},
		digests: []string{"90da91872223f85eb1376a17e3c4df21ace8c54b"},
	},
	{
		// python-redis-lock reset: a forced delete that signals the
		// waiters (as above), answering DEL's count.
		name: "delete-and-signal", keys: 2, args: 2, run: runDeleteAndSignal,
		bodies: []string{`
			redis.call('del', KEYS[2]) redis.call('lpush', KEYS[2], 1) redis.call('pexpire', KEYS[2], ARGV[2])
			return redis.call('del', KEYS[1])`,
		},
		digests: []string{"afbc8014508f92e446b56567e8ba600e811c1bd5"},
	},
	{
		// python-redis-lock reset_all: every lock:* key of the caller's
		// key space deleted (its waiters woken by the releases, as above),
		// answering how many there were.
		name: "delete-all-locks-and-signal", keys: 0, args: 0, run: runDeleteAllLocks,
		bodies: []string{`
			local locks = redis.call('keys', 'lock:*')
			local signal
			for _, lock in pairs(locks) do
				signal = 'lock-signal:' .. string.sub(lock, 6)
				redis.call('del', signal)
				redis.call('lpush', signal, 1)
				redis.call('expire', signal, 1)
				redis.call('del', lock)
			end
			return #locks`,
		},
		digests: []string{"b121d3548d693116c3851b63befe947e49f28c7c"},
	},
	{
		// node-redlock 4 and 5 acquire: every key or none; a backend votes
		// only when the reply is #KEYS.
		name: "multi-acquire", keys: 1, args: 2, run: runMultiAcquire,
		bodies: withCount(multiAcquireBody),
		digests: []string{
			"e5a322e2634ef59a516e8ea150cb085afafee684", "d01fb69e6ecc8bad3ca9bacba9f4f9e96862313f",
			"96da70f7716f27d278a5218544df37fd8b0a5e4c",
		},
	},
	{
		// node-redlock 4 and 5 release. On one Redis the reply counts the
		// keys deleted; a backend votes only when it is #KEYS, so a
		// release that did not free every key on a quorum replies 0.
		name: "multi-release-count", keys: 1, args: 1, run: runMultiReleaseCount,
		bodies: []string{multiReleaseBody},
		digests: []string{
			"0f0f23b9048b36752b5be114f357ba083449f908", "517e7ed95f00c0c4a209c6a7afcc6ab797d30b85",
			"e4612211c9f8f51c257e26e056b0a654b3187242",
		},
	},
	{
		// node-redlock 4 and 5 extend (a SET PX of the same value per key).
		name: "multi-extend", keys: 1, args: 2, run: runMultiExtend,
		bodies: withCount(multiExtendBody),
		digests: []string{
			"ce46f80993d5dac20dd066eb301a4e37994bdbed", "acaf90b4697bb48bb5f603e9e613a54df7536c70",
			"1d48b4c6fea2cdadc46b3346de5c2eaf121c7bb3", "aed6f382e410db8ba7926d4e5e9aab410bf2a78a",
		},
	},
	{
		// @sesamecare-oss/redlock: node-redlock's scripts after a SELECT of
		// ARGV[1], the rest of ARGV shifted by one.
		name: "db-multi-acquire", keys: 1, args: 3, run: inDB0(runMultiAcquire),
		bodies:  withDB(withCount(multiAcquireBody)...),
		digests: []string{"1b77b94aa78451d55dfa97e18819bfbfc596cb5b"},
	},
	{
		name: "db-multi-release-count", keys: 1, args: 2, run: inDB0(runMultiReleaseCount),
		bodies:  withDB(multiReleaseBody),
		digests: []string{"df51f6837dcfe303d334e6abea9aeae192bab216"},
	},
	{
		name: "db-multi-extend", keys: 1, args: 3, run: inDB0(runMultiExtend),
		bodies:  withDB(withCount(multiExtendBody)...),
		digests: []string{"820e9778d2b6733e9ed771e4be90ae73a95a6f3b"},
	},
	{
		// bsm/redislock 0.10 obtain: MSETNX, or, when every key holds a
		// value with the same token prefix, MSET; then PEXPIRE each key.
		name: "multi-acquire-or-renew", keys: 1, args: 3, run: runMultiAcquireOrRenew,
		bodies: []string{`
			local function pexpire(ttl) for _, key in ipairs(KEYS) do redis.call("pexpire", key, ttl) end end
			local function canOverrideKeys()
				local offset = tonumber(ARGV[2])
				for _, key in ipairs(KEYS) do
					if redis.call("getrange", key, 0, offset-1) ~= string.sub(ARGV[1], 1, offset) then return false end
				end
				return true
			end
			local setArgs = {}
			for _, key in ipairs(KEYS) do table.insert(setArgs, key) table.insert(setArgs, ARGV[1]) end
			if redis.call("msetnx", unpack(setArgs)) ~= 1 then
				if canOverrideKeys() == false then return false end
				redis.call("mset", unpack(setArgs))
			end
			pexpire(ARGV[3])
			return redis.status_reply("OK")`,
		},
		digests: []string{"eb0c00d98f6f33b4262419a509002884540f30be"},
	},
	{
		// bsm/redislock 0.10 release: all keys held, then DEL; OK or null.
		name: "multi-release-all", keys: 1, args: 1, run: runMultiReleaseAll,
		bodies:  []string{bsmHeldAll + `redis.call("del", unpack(KEYS)) return redis.status_reply("OK")`},
		digests: []string{"9470c810040e272ee6c579d8d4331aaf6332a7b1"},
	},
	{
		// bsm/redislock 0.10 refresh: all keys held, then PEXPIRE; OK or null.
		name: "multi-pexpire-all", keys: 1, args: 2, run: runMultiPExpireAll,
		bodies: []string{bsmHeldAll +
			`for _, key in ipairs(KEYS) do redis.call("pexpire", key, ARGV[2]) end return redis.status_reply("OK")`},
		digests: []string{"5a22d7e8431313862816d4416b5e46dd70fc340d"},
	},
	{
		// bsm/redislock 0.10 TTL: all keys held, then the least positive
		// PTTL (0 if none); null when not held.
		name: "multi-owner-pttl", keys: 1, args: 1, run: runMultiOwnerPTTL,
		bodies: []string{bsmHeldAll + `
			local minTTL = 0
			for _, key in ipairs(KEYS) do
				local ttl = redis.call("pttl", key)
				if ttl > 0 and (minTTL == 0 or ttl < minTTL) then minTTL = ttl end
			end
			return minTTL`,
		},
		digests: []string{"66e1084c2d842a7e8c271925aae90219fac4e129"},
	},
	{
		// Redisson RLock acquire (redisson.go): null, or how long to wait.
		name: "redisson-acquire", keys: 1, args: 2, run: runRedissonAcquire,
		bodies:  []string{redissonAcquire, redissonAcquireTwoBranches},
		digests: []string{"149c5a8bf18676fd99e9e6e24923bd64d9b62f94", "dad0f8d619e548e04f21fb48d50be5034df3adae"},
	},
	{
		// Redisson RFencedLock lock and tryLock (redisson.go): RLock's
		// acquisition; the lock's token is lockproxy's fencing token.
		name: "redisson-fenced-acquire", keys: 2, args: 2, run: runRedissonAcquire,
		fencing: true, refusal: redissonFencing,
		bodies:  []string{redissonFencedAcquire},
		digests: []string{"46b5551ba403d6152a7a6eca122e08728d6c8c66"},
	},
	{
		// Redisson RFencedLock lockAndGetToken: {-1, token} or {wait, -1}.
		name: "redisson-fenced-acquire-token", keys: 2, args: 2, run: runRedissonFencedAcquireToken,
		fencing: true, refusal: redissonFencing,
		bodies:  []string{redissonFencedAcquireToken},
		digests: []string{"49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45"},
	},
	{
		// Redisson RLock release from 3.24, with its latch: 0, 1 or null.
		name: "redisson-release-latched", keys: 3, args: 5, run: redissonRelease{latched: true}.run,
		bodies:  []string{redissonReleaseLatched},
		digests: []string{"6866459238a13a701d42f4971f12d9f3a50e2442"},
	},
	{
		// Redisson RLock release, 3.10.6 to 3.21.3.
		name: "redisson-release", keys: 2, args: 3, run: redissonRelease{}.run,
		bodies:  []string{fmt.Sprintf(redissonReleaseBody, "'publish'")},
		digests: []string{"3ffe249c16dee540ac8ab32e39bd408626b9aff7"},
	},
	{
		// Redisson RLock release, 3.22.0 to 3.23.5: ARGV[4] publishes.
		name: "redisson-release-command", keys: 2, args: 4, run: redissonRelease{}.run,
		bodies:  []string{fmt.Sprintf(redissonReleaseBody, "ARGV[4]")},
		digests: []string{"778cea8aada230ae060b432fc333adaec85f2f4c"},
	},
	{
		// Redisson forceUnlock to 3.21.3: 1 or 0.
		name: "redisson-force-unlock", keys: 2, args: 1, run: runRedissonForceUnlock,
		bodies:  []string{fmt.Sprintf(redissonForceUnlock, "'publish'")},
		digests: []string{"7e9c80b3d786b95d5d4aaf8fd73adb9775fa6fb1"},
	},
	{
		// Redisson forceUnlock from 3.22.0: ARGV[2] publishes.
		name: "redisson-force-unlock-command", keys: 2, args: 2, run: runRedissonForceUnlock,
		bodies:  []string{fmt.Sprintf(redissonForceUnlock, "ARGV[2]")},
		digests: []string{"605e338249a7a1d40df83b04f7658354f883b41b"},
	},
	{
		// Redisson's lock watchdog to 3.43.0: 1 or 0.
		name: "redisson-renew", keys: 1, args: 2, run: runRedissonRenew,
		bodies:  []string{redissonRenew},
		digests: []string{"8e19a1ddbdee9138df9f32a480c57addab4353d1"},
	},
	{
		// Redisson's lock watchdog from 3.44.0: 1 or 0 per key.
		name: "redisson-renew-batch", keys: 1, args: 2, run: runRedissonRenewBatch,
		bodies:  []string{redissonRenewBatch},
		digests: []string{"6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"},
	},
	{
		// Redisson RReadWriteLock read lock and tryLock (rwlock.go): null,
		// or how long to wait.
		name: "redisson-read-acquire", keys: 2, args: 3, run: runRedissonReadAcquire,
		bodies:  []string{redissonReadAcquire},
		digests: []string{"95553a6ff11176c18e71344e89d116b06fd6f753"},
	},
	{
		// The same, 3.10.0 to 3.11.0: a re-entry sets the lease as the
		// lock's TTL, where the engine keeps the longer.
		name: "redisson-read-acquire-lease", keys: 2, args: 3, run: runRedissonReadAcquire,
		bodies:  []string{redissonReadAcquireLease},
		digests: []string{"3e6597e1d1157c59ac0d6efa2ba7e92ef418c41e"},
	},
	{
		// Redisson RReadWriteLock read unlock, 3.27: 1, 0 or null; 1 for a
		// free lock.
		name: "redisson-read-release", keys: 5, args: 4, run: redissonRWRelease{latched: true}.runRead,
		bodies:  []string{fmt.Sprintf(redissonReadReleaseBody, "1")},
		digests: []string{"5947c0fee6ca25ae094ec1b3e7a2559a9273d29f"},
	},
	{
		// Redisson RReadWriteLock read unlock, 4.7: null for a free lock.
		name: "redisson-read-release-free-null", keys: 5, args: 4, run: redissonRWRelease{latched: true, freeIsNull: true}.runRead,
		bodies:  []string{fmt.Sprintf(redissonReadReleaseBody, "nil")},
		digests: []string{"6e1b10e11ac0a3ed8e902562ecd32ce01b553039"},
	},
	{
		// Redisson RReadWriteLock read unlock, 3.22.0 to 3.23.5: no latch;
		// ARGV[3] publishes.
		name: "redisson-read-release-command", keys: 4, args: 3, run: redissonRWRelease{}.runRead,
		bodies:  []string{fmt.Sprintf(redissonReadReleaseUnlatchedBody, "ARGV[3]")},
		digests: []string{"92a54c31a4dc3b46f81e24a6dd5bb7d677c6f882"},
	},
	{
		// Redisson RReadWriteLock read unlock, 3.10.0 to 3.21.3.
		name: "redisson-read-release-publish", keys: 4, args: 2, run: redissonRWRelease{}.runRead,
		bodies:  []string{fmt.Sprintf(redissonReadReleaseUnlatchedBody, "'publish'")},
		digests: []string{"f5469be4bfe5232d519471092634b3ee84e5ee6f"},
	},
	{
		// Redisson RReadWriteLock write lock and tryLock: null, or how long
		// to wait.
		name: "redisson-write-acquire", keys: 1, args: 2, run: runRedissonWriteAcquire,
		bodies:  []string{redissonWriteAcquire},
		digests: []string{"6306ba3bf1f563b284bed52d305fce615c6664d9"},
	},
	{
		// Redisson RReadWriteLock write unlock, 3.27: 1, 0 or null; 1 for a
		// free lock.
		name: "redisson-write-release", keys: 3, args: 5, run: redissonRWRelease{latched: true}.runWrite,
		bodies:  []string{fmt.Sprintf(redissonWriteReleaseBody, "1")},
		digests: []string{"d29c5559782035515d32e926762830b3304b49be"},
	},
	{
		// Redisson RReadWriteLock write unlock, 4.7: null for a free lock.
		name: "redisson-write-release-free-null", keys: 3, args: 5, run: redissonRWRelease{latched: true, freeIsNull: true}.runWrite,
		bodies:  []string{fmt.Sprintf(redissonWriteReleaseBody, "nil")},
		digests: []string{"21f5fb0f8ddfa9be5c3e0c9757c128796add75c6"},
	},
	{
		// Redisson RReadWriteLock write unlock, 3.22.0 to 3.23.5: no latch;
		// ARGV[4] publishes.
		name: "redisson-write-release-command", keys: 2, args: 4, run: redissonRWRelease{}.runWrite,
		bodies:  []string{fmt.Sprintf(redissonWriteReleaseUnlatchedBody, "ARGV[4]")},
		digests: []string{"319a1cdf1b56c767a0a9adf2224250bf811f110c"},
	},
	{
		// Redisson RReadWriteLock write unlock, 3.10.0 to 3.21.3.
		name: "redisson-write-release-publish", keys: 2, args: 3, run: redissonRWRelease{}.runWrite,
		bodies:  []string{fmt.Sprintf(redissonWriteReleaseUnlatchedBody, "'publish'")},
		digests: []string{"baa634f6184acc1b8f145e810a0e0e00967a3cbe"},
	},
	{
		// Redisson RReadWriteLock read lock watchdog, 3.27: 1 or 0.
		name: "redisson-read-renew", keys: 2, args: 2, run: runRedissonReadRenew,
		bodies:  []string{redissonReadRenew},
		digests: []string{"6563941ff57e01b8cf61e86907b80686438a2f74"},
	},
	{
		// Redisson RReadWriteLock read lock watchdog, 4.7: 1 or 0 per lock.
		name: "redisson-read-renew-batch", keys: 2, args: 2, run: runRedissonReadRenewBatch,
		bodies:  []string{redissonReadRenewBatch},
		digests: []string{"38d2b478dfbe264ab67c221b7e4be62245f00ba0"},
	},
	{
		// Redisson RReadWriteLock read lock watchdog, 4.0.0 to 4.3.1: one
		// reader per lock; 1 or 0 per lock.
		name: "redisson-read-renew-pairs", keys: 2, args: 2, run: runRedissonReadRenewPairs,
		bodies:  []string{fmt.Sprintf(redissonReadRenewPairsBody, "c")},
		digests: []string{"d6564f42b98d6eece0e940a478ee248f80b8a90a"},
	},
	{
		// The same, 3.44.0 to 3.52.0, whose inner loop hides the pair's
		// index: the engine renews what the script meant to.
		name: "redisson-read-renew-pairs-hidden", keys: 2, args: 2, run: runRedissonReadRenewPairs,
		bodies:  []string{fmt.Sprintf(redissonReadRenewPairsBody, "i")},
		digests: []string{"1affef780a01e1406cb1968c62918f618d10d6a3"},
	},
	{
		// Redisson RReadWriteLock forceUnlock of the read lock: 1 or 0.
		name: "redisson-read-force-unlock", keys: 2, args: 2, run: redissonRWForceUnlock{quorum.ReadMode}.run,
		bodies:  []string{fmt.Sprintf(redissonRWForceUnlockBody, quorum.ReadMode, "ARGV[2]")},
		digests: []string{"27dbe744e95c1d854a7f556cc6817030de2d0d01"},
	},
	{
		// The same, 3.10.0 to 3.21.3.
		name: "redisson-read-force-unlock-publish", keys: 2, args: 1, run: redissonRWForceUnlock{quorum.ReadMode}.run,
		bodies:  []string{fmt.Sprintf(redissonRWForceUnlockBody, quorum.ReadMode, "'publish'")},
		digests: []string{"23f9bc91439172625235ce2ee06d6647f08a7e27"},
	},
	{
		// Redisson RReadWriteLock forceUnlock of the write lock: 1 or 0.
		name: "redisson-write-force-unlock", keys: 2, args: 2, run: redissonRWForceUnlock{quorum.WriteMode}.run,
		bodies:  []string{fmt.Sprintf(redissonRWForceUnlockBody, quorum.WriteMode, "ARGV[2]")},
		digests: []string{"2e2cb2a3b13e2e80e4236ef6a25beaf365dba608"},
	},
	{
		// The same, 3.10.0 to 3.21.3.
		name: "redisson-write-force-unlock-publish", keys: 2, args: 1, run: redissonRWForceUnlock{quorum.WriteMode}.run,
		bodies:  []string{fmt.Sprintf(redissonRWForceUnlockBody, quorum.WriteMode, "'publish'")},
		digests: []string{"23639b0b2d18d26ce352e148ff4ac5b8e984b696"},
	},
	{
		// Redisson RReadWriteLock read lock isLocked(): 1 or 0.
		name: "redisson-read-locked", keys: 1, args: 0, run: runRedissonReadLocked,
		bodies:  []string{redissonReadLocked},
		digests: []string{"8ad44f1ba014938c20da38206b6d496c85ec1aed"},
	},
	{
		// Redisson RedissonMultiLock/RedLock with a lease time: PEXPIRE
		// every key, 1 when any was set. ARGV[2] is a PEXPIRE condition
		// (NX, XX, GT, LT), which lockproxy does not take.
		name: "pexpire-any", keys: 1, args: 2, run: runPExpireAny,
		bodies: []string{`
			local result = 0
			for j = 1, #KEYS, 1 do
				local expireSet
				if ARGV[2] ~= '' then expireSet = redis.call('pexpire', KEYS[j], ARGV[1], ARGV[2])
				else expireSet = redis.call('pexpire', KEYS[j], ARGV[1]) end
				if expireSet == 1 then result = expireSet end
			end
			return result`,
		},
		digests: []string{"3fd750e0b43af99dbd223e5523718f18cded3664"},
	},
}

// ownerGuards are the shapes in which libraries write "when KEYS[1] holds
// ARGV[1], do %s and return 1 (or its result), else return 0". A local
// bound to KEYS[1] or ARGV[1], or read once right away, is the same as its
// value (internal/luaform).
var ownerGuards = []string{
	`if redis.call("get", KEYS[1]) == ARGV[1] then return %s else return 0 end`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then return %s end return 0`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then return %s else return 0 end`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then return %s end return 0`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return 1 else return 0 end`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return 1 end return 0`,
	`local token = redis.call("get", KEYS[1]) if not token or token ~= ARGV[1] then return 0 end %s return 1`,
}

// nullGuards are the shapes of "do %s and return true (1), else return
// false (null)".
var nullGuards = []string{
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return true end return false`,
	`if redis.call("get", KEYS[1]) == ARGV[1] then %s return true else return false end`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then %s return true end return false`,
	`if ARGV[1] == redis.call("get", KEYS[1]) then %s return true else return false end`,
}

func ownerGuarded(actions ...string) []string { return guarded(ownerGuards, actions) }

func nullGuarded(actions ...string) []string { return guarded(nullGuards, actions) }

// springPubSubUnlocks are Spring's PUB_SUB_LOCK unlock, with UNLINK or
// DEL, publishing on channel.
func springPubSubUnlocks(channel string) []string {
	var bodies []string
	for _, del := range []string{"unlink", "del"} {
		bodies = append(bodies, fmt.Sprintf(`
			if redis.call("get", KEYS[1]) == ARGV[1] and redis.call(%q, KEYS[1]) == 1 then
				redis.call("publish", %s, KEYS[1]) return true end
			return false`, del, channel))
	}
	return bodies
}

func guarded(shapes, actions []string) []string {
	var bodies []string
	for _, g := range shapes {
		for _, a := range actions {
			bodies = append(bodies, fmt.Sprintf(g, a))
		}
	}
	return bodies
}

// node-redlock's multi-key scripts (4.0.0 counted KEYS with table.getn).
const (
	multiAcquireBody = `
		for i, key in ipairs(KEYS) do if redis.call("exists", key) == 1 then return 0 end end
		for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end
		return %s`
	multiExtendBody = `
		for i, key in ipairs(KEYS) do if redis.call("get", key) ~= ARGV[1] then return 0 end end
		for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end
		return %s`
	multiReleaseBody = `
		local count = 0
		for i, key in ipairs(KEYS) do
			if redis.call("get", key) == ARGV[1] then redis.pcall("del", key) count = count + 1 end
		end
		return count`
	// bsmHeldAll starts bsm/redislock 0.10's release, refresh and pttl.
	bsmHeldAll = `
		local values = redis.call("mget", unpack(KEYS))
		for i, _ in ipairs(KEYS) do if values[i] ~= ARGV[1] then return false end end `
)

func withCount(body string) []string {
	return []string{fmt.Sprintf(body, "#KEYS"), fmt.Sprintf(body, "table.getn(KEYS)")}
}

// withDB puts sesamecare's SELECT first and shifts ARGV by one.
func withDB(bodies ...string) []string {
	shift := strings.NewReplacer("ARGV[1]", "ARGV[2]", "ARGV[2]", "ARGV[3]")
	out := make([]string, len(bodies))
	for i, b := range bodies {
		out[i] = `redis.pcall("SELECT", tonumber(ARGV[1])) ` + shift.Replace(b)
	}
	return out
}
