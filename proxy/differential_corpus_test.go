package proxy

import (
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/quorum"
)

// nearMiss is a script of the differential corpus: what it is, the kind
// whose arguments it is called with, and whether lockproxy serves it.
type nearMiss struct {
	name, script, argsOf string
	served               bool
}

// The corpus's bases: published library scripts.
const (
	baseRelease = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
	baseExtend  = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`
	baseAcquire = `return redis.call("set",KEYS[1],ARGV[1],"NX","PX",ARGV[2])`
	baseRedsync = `local val = redis.call("GET", KEYS[1])
if val == ARGV[1] then return redis.call("DEL", KEYS[1]) elseif val == false then return -1 else return 0 end`
	basePyExtend = `local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then return 0 end
local expiration = redis.call('pttl', KEYS[1])
if not expiration then expiration = 0 end
if expiration < 0 then return 0 end
local newttl = ARGV[2]
if ARGV[3] == "0" then newttl = ARGV[2] + expiration end
redis.call('pexpire', KEYS[1], newttl)
return 1`
	baseMultiRelease = `local count = 0
for i, key in ipairs(KEYS) do
	if redis.call("get", key) == ARGV[1] then redis.pcall("del", key) count = count + 1 end
end
return count`
	baseMultiAcquire = `for i, key in ipairs(KEYS) do if redis.call("exists", key) == 1 then return 0 end end
for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end
return #KEYS`
	baseObtain = `if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end
local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end`
	baseSpring = `local lockClientId = redis.call('GET', KEYS[1])
if lockClientId == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return true
elseif not lockClientId then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return true end
return false`
	baseSesame = `redis.pcall("SELECT", tonumber(ARGV[1]))
for i, key in ipairs(KEYS) do if redis.call("exists", key) == 1 then return 0 end end
for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[2], "PX", ARGV[3]) end
return #KEYS`
	baseRedlockRb    = `if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`
	baseRedlockRbTTL = `return { redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1]) }`
	baseBsmRelease   = `local values = redis.call("mget", unpack(KEYS))
for i, _ in ipairs(KEYS) do if values[i] ~= ARGV[1] then return false end end
redis.call("del", unpack(KEYS)) return redis.status_reply("OK")`
)

// one replaces the first old in s by new.
func one(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("corpus: " + old + " is not in " + s)
	}
	return strings.Replace(s, old, new, 1)
}

// nearMisses is the corpus: scripts one trick away from a library's, by
// family (operators, indices, extra effects, comment and string tricks,
// reassignments, tonumber's arities, case, ';', pcall, wrappers).
func nearMisses() []nearMiss {
	const (
		del, pexp, acq = "compare-and-delete", "compare-and-pexpire", "acquire"
		absent, addSet = "compare-and-delete-or-absent", "compare-and-add-or-set-pttl"
		mrel, macq     = "multi-release-count", "multi-acquire"
		obtain, spring = "acquire-or-renew", "extend-or-acquire-or-null"
		sesame, rb     = "db-multi-acquire", "set-if-owner-or-free"
		rbTTL, bsmRel  = "value-and-pttl", "multi-release-all"
	)
	return []nearMiss{
		// Operators.
		{"not equal", one(baseRelease, "==", "~="), del, false},
		{"less or equal", one(baseRelease, "==", "<="), del, false},
		{"greater or equal", one(baseRelease, "==", ">="), del, false},
		{"sides swapped", `if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end`, del, true},
		{"negated", one(baseRelease, `if redis.call("get",KEYS[1]) == ARGV[1] then`, `if not (redis.call("get",KEYS[1]) == ARGV[1]) then`), del, false},
		{"and true", one(baseRelease, " then", " and true then"), del, false},
		{"or false", one(baseRelease, " then", " or false then"), del, false},
		{"concatenated token", one(baseRelease, "ARGV[1]", `ARGV[1] .. ""`), del, false},
		{"sum in the reply", one(baseRelease, "return 0", "return 0 + 0"), del, false},
		{"ttl plus one", one(baseExtend, "ARGV[2]", "ARGV[2] + 1"), pexp, false},
		{"ttl times one", one(baseExtend, "ARGV[2]", "ARGV[2] * 1"), pexp, false},
		{"redis-py adds minus", one(basePyExtend, "+ expiration", "- expiration"), addSet, false},
		{"redis-py flag inverted", one(basePyExtend, `ARGV[3] == "0"`, `ARGV[3] ~= "0"`), addSet, false},
		{"XX for NX", one(baseAcquire, `"NX"`, `"XX"`), acq, false},
		{"nil for false", one(baseRedsync, "val == false", "val == nil"), absent, false},
		{"minus zero", one(baseRelease, "return 0", "return -0"), del, false},
		{"not not", one(baseRelease, "if redis", "if not not redis"), del, false},

		// Indices.
		{"second key deleted", one(baseRelease, `"del",KEYS[1]`, `"del",KEYS[2]`), del, false},
		{"second argument compared", one(baseRelease, "ARGV[1]", "ARGV[2]"), del, false},
		{"key zero", one(baseRelease, `"get",KEYS[1]`, `"get",KEYS[0]`), del, false},
		{"index 1.0", one(baseRelease, `"get",KEYS[1]`, `"get",KEYS[1.0]`), del, true},
		{"index 0x1", one(baseRelease, "ARGV[1]", "ARGV[0x1]"), del, true},
		{"index 1e0", one(baseRelease, "ARGV[1]", "ARGV[1e0]"), del, true},
		{"index by string", one(baseRelease, `"get",KEYS[1]`, `"get",KEYS["1"]`), del, false},
		{"last key", one(baseRelease, `"get",KEYS[1]`, `"get",KEYS[#KEYS]`), del, false},
		{"index of the key", one(baseRelease, `"get",KEYS[1]`, `"get",KEYS[1][1]`), del, false},
		{"third argument as ttl", one(baseExtend, "ARGV[2]", "ARGV[3]"), pexp, false},
		{"multi release compares ARGV[2]", one(baseMultiRelease, "ARGV[1]", "ARGV[2]"), mrel, false},

		// Extra effects.
		{"a write first", `redis.call("set", "lockproxy:x", "1") ` + baseRelease, del, false},
		{"another key deleted", `redis.call("del", KEYS[2]) ` + baseRelease, del, false},
		{"a log line", `redis.log(redis.LOG_WARNING, "x") ` + baseRelease, del, false},
		{"RESP3 replies", `redis.setresp(3) ` + baseRelease, del, false},
		{"KEYS shortened", `table.remove(KEYS) ` + baseRelease, del, false},
		{"KEYS rewritten", `KEYS[1] = ARGV[1] ` + baseRelease, del, false},
		{"a global", `x = 1 ` + baseRelease, del, false},
		{"a publish", one(baseRelease, `return redis.call("del",KEYS[1])`, `redis.call("publish", KEYS[1], "x") return redis.call("del",KEYS[1])`), del, false},
		{"ttl cut to 1 ms", one(baseExtend, "return redis.call", `redis.call("pexpire", KEYS[1], 1) return redis.call`), pexp, false},
		{"a counter", `redis.call("incr", "lockproxy:n") ` + baseAcquire, acq, false},
		{"two results", one(baseRelease, `return redis.call("del",KEYS[1])`, `return redis.call("del",KEYS[1]), 1`), del, false},
		{"a read first", `redis.call("get", KEYS[1]) ` + baseRelease, del, false},
		{"spring obtain publishes", one(baseSpring, "return true\nelseif", `redis.call('PUBLISH', KEYS[1], ARGV[1]) return true
elseif`), spring, false},
		{"bsm release deletes one key", one(baseBsmRelease, `"del", unpack(KEYS))`, `"del", KEYS[1])`), bsmRel, false},

		// Comment and string tricks.
		{"comment ended by a lone CR", "--\r" + one(baseRelease, "==", "~=") + "\n" + baseRelease, del, false},
		{"comment ended by LF", "-- release\n" + baseRelease, del, true},
		{"long comment hides a write", `--[[ redis.call("del", KEYS[1]) ]]` + baseRelease, del, true},
		{"level-2 comment with ]] inside", "--[==[\n]]" + `return redis.call("del",KEYS[1])` + "\n]==]" + baseRelease, del, true},
		{"short comment to CR, then code", "-- note\r" + `return redis.call("del",KEYS[1])` + "\n" + baseRelease, del, false},
		{"long string command", one(baseRelease, `"get"`, `[[get]]`), del, true},
		{"level-1 long string", one(baseRelease, `"del"`, `[=[del]=]`), del, true},
		{"long string's first newline", one(baseRelease, `"del"`, "[[\ndel]]"), del, true},
		{"long string's second newline", one(baseRelease, `"del"`, "[[\n\ndel]]"), del, false},
		{"decimal escape", one(baseRelease, `"del"`, `"\100el"`), del, true},
		{"no hex escapes in 5.1", one(baseRelease, `"del"`, `"\x64el"`), del, false},
		{"unknown escape", one(baseRelease, `"del"`, `"de\l"`), del, true},
		{"NUL in the command", one(baseRelease, `"del"`, `"del\0"`), del, false},
		{"single quotes", one(baseRelease, `"del"`, `'del'`), del, true},
		{"unbalanced quotes", one(baseRelease, `"del"`, `"del'`), del, false},
		{"escaped newline in a command", one(baseRelease, `"del"`, "\"d\\\nel\""), del, false},
		{"comment at the end", baseRelease + " -- done", del, true},
		{"unfinished long comment", baseRelease + " --[[", del, false},
		{"nested long string", one(baseRelease, `"get"`, `[[g[[et]]`), del, false},
		{"CR line ends", strings.ReplaceAll(baseRedsync, "\n", "\r"), absent, true},
		{"LF CR line ends", strings.ReplaceAll(baseRedsync, "\n", "\n\r"), absent, true},
		{"form feed and vertical tab", strings.ReplaceAll(baseRelease, " ", "\f\v"), del, true},
		{"byte above 127", baseRelease + " \xa0", del, false},

		// Reassignments.
		{"value replaced before the compare", one(baseRedsync, "\nif", "\nval = ARGV[1]\nif"), absent, false},
		{"key local reassigned", "local key = KEYS[1]\nkey = KEYS[2]\n" + `if redis.call("get", key) == ARGV[1] then return redis.call("del", key) else return 0 end`, del, false},
		{"redis-py newttl swapped", one(one(basePyExtend, "local newttl = ARGV[2]", "local newttl = ARGV[2] + expiration"), "newttl = ARGV[2] + expiration end", "newttl = ARGV[2] end"), addSet, false},
		{"redis-py expiration 1", one(basePyExtend, "expiration = 0", "expiration = 1"), addSet, false},
		{"token local set to itself", "local t = ARGV[1]\nt = ARGV[1]\n" + `if redis.call("get",KEYS[1]) == t then return redis.call("del",KEYS[1]) else return 0 end`, del, false},
		{"loop key reassigned", one(baseMultiRelease, "redis.pcall(\"del\", key)", "key = KEYS[1] redis.pcall(\"del\", key)"), mrel, false},
		{"count by two", one(baseMultiRelease, "count + 1", "count + 2"), mrel, false},
		{"value local read once", "local v = redis.call('get', KEYS[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", del, true},
		{"value local read after a write", "local v = redis.call('get', KEYS[1])\nredis.call('set', KEYS[1], ARGV[1])\nif v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", del, false},

		// tonumber's arities.
		{"tonumber ttl", one(baseExtend, "ARGV[2])", "tonumber(ARGV[2]))"), pexp, false},
		{"tonumber ttl base 10", one(baseExtend, "ARGV[2])", "tonumber(ARGV[2], 10))"), pexp, false},
		{"select with a base", one(baseSesame, "tonumber(ARGV[1])", "tonumber(ARGV[1], 16)"), sesame, false},
		{"offset in octal", one(baseObtain, "tonumber(ARGV[2])", "tonumber(ARGV[2], 8)"), obtain, false},
		{"sub from tonumber(1, offset)", one(baseObtain, "string.sub(ARGV[1], 1, offset)", "string.sub(ARGV[1], tonumber(1, offset))"), obtain, false},
		{"key from tonumber with a base", one(baseMultiAcquire, `redis.call("set", key,`, `redis.call("set", tonumber(key, ARGV[1]),`), macq, false},
		{"tonumber of nothing", one(baseSesame, "tonumber(ARGV[1])", "tonumber()"), sesame, false},
		{"select without tonumber", one(baseSesame, "tonumber(ARGV[1])", "ARGV[1]"), sesame, false},

		// Case.
		{"keys", strings.ReplaceAll(baseRelease, "KEYS", "keys"), del, false},
		{"REDIS.CALL", strings.ReplaceAll(baseRelease, "redis.call", "REDIS.CALL"), del, false},
		{"redis.CALL", strings.ReplaceAll(baseRelease, "redis.call", "redis.CALL"), del, false},
		{"Redis.call", strings.ReplaceAll(baseRelease, "redis.call", "Redis.call"), del, false},
		{"GET", one(baseRelease, `"get"`, `"GET"`), del, true},
		{"Del", one(baseRelease, `"del"`, `"Del"`), del, true},
		{"argv", strings.ReplaceAll(baseRelease, "ARGV", "argv"), del, false},
		{"keywords in upper case", `IF redis.call("get",KEYS[1]) == ARGV[1] THEN return redis.call("del",KEYS[1]) ELSE return 0 END`, del, false},
		{"status ok", one(baseBsmRelease, `("OK")`, `("ok")`), bsmRel, false},
		{"YES", one(baseRedlockRb, `"yes"`, `"YES"`), rb, false},
		{"nx px in lower case", one(one(baseAcquire, `"NX"`, `"nx"`), `"PX"`, `"px"`), acq, true},
		{"Px", one(baseAcquire, `"PX"`, `"Px"`), acq, true},
		{"option word as the value", one(baseAcquire, `ARGV[1],"NX"`, `"PX","NX"`), acq, false},
		{"Return", one(baseRelease, "return 0", "Return 0"), del, false},

		// Semicolons.
		{"empty statement after then", one(baseRelease, "then", "then ;"), del, false},
		{"two at the end", baseRelease + ";;", del, false},
		{"one first", ";" + baseRelease, del, false},
		{"after end", baseRelease + ";", del, true},
		{"after return", one(baseRelease, "return 0", "return 0;"), del, true},
		{"after a local", one(baseRedsync, `KEYS[1])`, `KEYS[1]);`), absent, true},
		{"table separator", one(baseRedlockRbTTL, "KEYS[1]),", "KEYS[1]);"), rbTTL, true},
		{"statement after return", one(baseRelease, "return 0", "return 0; return 1"), del, false},

		// pcall.
		{"read by pcall", one(baseRelease, `redis.call("get"`, `redis.pcall("get"`), del, false},
		{"delete by pcall", one(baseRelease, `redis.call("del"`, `redis.pcall("del"`), del, false},
		{"multi release by call", one(baseMultiRelease, "redis.pcall", "redis.call"), mrel, false},
		{"pcall of redis.call", one(baseRelease, `redis.call("del",KEYS[1])`, `pcall(redis.call, "del", KEYS[1])`), del, false},
		{"select by call", one(baseSesame, "redis.pcall", "redis.call"), sesame, false},

		// Wrappers.
		{"function called at once", "return (function() " + baseRelease + " end)()", del, false},
		{"do block", "do " + baseRelease + " end", del, false},
		{"local function", "local function f() " + baseRelease + " end return f()", del, false},
		{"if true", "if true then " + baseRelease + " end", del, false},
		{"while true", "while true do " + baseRelease + " end", del, false},
		{"repeat until true", "repeat " + baseRelease + " until true", del, false},
		{"parenthesised reply", one(baseAcquire, "return redis.call(", "return (redis.call(") + ")", acq, false},
		{"parenthesised arguments", one(baseAcquire, `"set"`, `("set")`), acq, true},
		{"shebang", "#!lua\n" + baseRelease, del, false},
		{"redis aliased", "local redis = redis " + baseRelease, del, false},
		{"call aliased", "local call = redis.call\n" + strings.ReplaceAll(baseRelease, "redis.call", "call"), del, false},

		// Redisson's read-write lock before 3.24 and its watchdogs of 3.44
		// to 4.3: one step from a layout that is served, and served only
		// where it still means that layout.
		{"rw read unlock: a free lock answers 0", one(rwReadReleasePublish, "return 1; end;", "return 0; end;"), "redisson-read-release-publish", false},
		{"rw read unlock: one publish as an argument", one(rwReadReleasePublish, "redis.call('publish'", "redis.call(ARGV[3]"), "redisson-read-release-command", false},
		{"rw read unlock: the other key prefix", one(rwReadReleasePublish, "KEYS[4] .. ':'", "KEYS[3] .. ':'"), "redisson-read-release-publish", false},
		{"rw write unlock: no downgrade", one(rwWriteReleasePublish, "'mode', 'read'", "'mode', 'write'"), "redisson-write-release-publish", false},
		{"rw write unlock: ';' after return", one(rwWriteReleasePublish, "return 0;", "return 0;;"), "redisson-write-release-publish", false},
		{"rw read re-entry: the shorter TTL", one(redissonReadAcquire, "math.max", "math.min"), "redisson-read-acquire", false},
		{"rw read re-entry: the lease, reindented", strings.ReplaceAll(redissonReadAcquireLease, "\t", "  "), "redisson-read-acquire-lease", true},
		{"rw forceUnlock: another mode", one(fmt.Sprintf(redissonRWForceUnlockBody, quorum.ReadMode, "'publish'"), "'read'", "'write' or true"), "redisson-read-force-unlock-publish", false},
		{"rw watchdog: the lock's own key as prefix", one(fmt.Sprintf(redissonReadRenewPairsBody, "c"), "KEYS[i+1] ..", "KEYS[i] .."), "redisson-read-renew-pairs", false},
		{"rw watchdog: the field by the pair's index", one(fmt.Sprintf(redissonReadRenewPairsBody, "c"), "ARGV[j]", "ARGV[i]"), "redisson-read-renew-pairs", false},
	}
}

// Redisson's read-write unlocks to 3.21.3, the bases of the corpus's rw
// near misses.
var (
	rwReadReleasePublish  = fmt.Sprintf(redissonReadReleaseUnlatchedBody, "'publish'")
	rwWriteReleasePublish = fmt.Sprintf(redissonWriteReleaseUnlatchedBody, "'publish'")
)
