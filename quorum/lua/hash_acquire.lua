-- Redisson's RLock acquisition, on one backend: where the hash KEYS[1] is
-- absent or already has the owner's field ARGV[1], the field's count goes
-- up by one and the hash gets a TTL of ARGV[2] ms; {1, the count}.
-- Elsewhere (another owner's hash, or a key of another type) {0, the
-- key's PTTL}: how long its holder has left.
--
-- The field "\0attempt:" .. ARGV[1] records ARGV[3], this attempt's id, so
-- that a rollback undoes this attempt's increment and never an earlier
-- hold's, which the count alone cannot tell apart (hash_undo.lua). No
-- owner's field starts with a NUL byte, so no read of the owner's field
-- sees it.
local kind = redis.call("type", KEYS[1])["ok"]
if kind == "none" or (kind == "hash" and redis.call("hexists", KEYS[1], ARGV[1]) == 1) then
	local count = redis.call("hincrby", KEYS[1], ARGV[1], 1)
	redis.call("hset", KEYS[1], "\0attempt:" .. ARGV[1], ARGV[3])
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	return {1, count}
end
return {0, redis.call("pttl", KEYS[1])}
