-- A read-write lock's acquisition (rw.lua), on one backend: ARGV[1] is
-- the mode asked, "read" or "write"; ARGV[2] the owner; ARGV[3] the lease
-- (ms); ARGV[4] this attempt's id; ARGV[5] the prefix of the read holds'
-- timeout keys; ARGV[6] max_ttl (ms).
--
-- A reader is granted where the lock is free, read-held, or write-held by
-- the owner itself; a writer where it is free or write-held by the owner.
-- So no backend ever holds a writer beside another owner, which is what
-- makes any two conflicting grants meet on a backend that refused one
-- (docs/design/rwlock.md). {1, the owner's count} granted; {0, the key's
-- PTTL} refused: how long its holder has left. A hash without a mode is
-- an RLock's, or another library's, and refuses both; so does a key of
-- another type.
--
-- A reader's hold i gets its timeout key with the lease, and the hash
-- lasts at least as long; a writer's re-entry adds its lease to the
-- hash's PTTL, as Redisson's does, but never past max_ttl, the bound a
-- restarted backend's wait relies on (docs/design/horizon.md). The field
-- "\0attempt:" .. field records the attempt, as hash_acquire.lua's does.
local key, owner, lease = KEYS[1], ARGV[2], tonumber(ARGV[3])
local writer = owner .. ":write"
local kind = redis.call("type", key)["ok"]
local mode = false
if kind == "hash" then
	mode = redis.call("hget", key, "mode")
	if not mode and next(holders(key)) ~= nil then
		return {0, redis.call("pttl", key)}
	end
elseif kind ~= "none" then
	return {0, redis.call("pttl", key)}
end
local own = mode == "write" and redis.call("hexists", key, writer) == 1
if ARGV[1] == "read" then
	if mode == "write" and not own then
		return {0, redis.call("pttl", key)}
	end
	if not mode then
		redis.call("hset", key, "mode", "read")
	end
	local count = redis.call("hincrby", key, owner, 1)
	redis.call("hset", key, "\0attempt:" .. owner, ARGV[4])
	redis.call("set", timeoutKey(ARGV[5], owner, count), 1, "px", lease)
	local pttl = redis.call("pttl", key)
	if pttl < lease then
		redis.call("pexpire", key, lease)
	end
	horizon(key)
	return {1, count}
end
if mode and not own then
	return {0, redis.call("pttl", key)}
end
if not mode then
	redis.call("hset", key, "mode", "write")
end
local count = redis.call("hincrby", key, writer, 1)
redis.call("hset", key, "\0attempt:" .. writer, ARGV[4])
local ttl = lease
if count > 1 then
	ttl = math.min(math.max(redis.call("pttl", key), 0) + lease, tonumber(ARGV[6]))
end
redis.call("pexpire", key, ttl)
horizon(key)
return {1, count}
