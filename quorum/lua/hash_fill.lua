-- A top-up of a Redisson lock (topup.go): the owner's field ARGV[1] gets
-- the hold count ARGV[3] of the quorum that granted it, where the hash
-- KEYS[1] is absent (with a TTL of ARGV[2] ms, the validity the lock has
-- left, and, where ARGV[4] is not "", the lock's fencing token ARGV[4] in
-- the field "\0fence", with this backend's counter KEYS[2] raised to it
-- so that a later lock here mints more), or where the owner's field
-- counts fewer holds (the backend missed one; its TTL and token are the
-- owner's already). Nothing anywhere else: another owner's hash, or a
-- key of another type. 1 done, 0 not.
local kind = redis.call("type", KEYS[1])["ok"]
if kind == "none" then
	redis.call("hset", KEYS[1], ARGV[1], ARGV[3])
	if string.sub(ARGV[1], -6) == ":write" then
		-- A read-write lock's writer (rwlock.go), renewed by RLock's
		-- watchdog: without its mode a reader would be let in beside it.
		redis.call("hset", KEYS[1], "mode", "write")
	end
	if ARGV[4] ~= "" then
		redis.call("hset", KEYS[1], "\0fence", ARGV[4])
		if tonumber(redis.call("get", KEYS[2]) or "0") < tonumber(ARGV[4]) then
			redis.call("set", KEYS[2], ARGV[4])
		end
	end
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	return 1
end
if kind == "hash" then
	local have = tonumber(redis.call("hget", KEYS[1], ARGV[1]))
	if have and have < tonumber(ARGV[3]) then
		redis.call("hset", KEYS[1], ARGV[1], ARGV[3])
		return 1
	end
end
return 0
