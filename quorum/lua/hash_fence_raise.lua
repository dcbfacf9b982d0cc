-- fence_raise.lua for a hash lock (hashlock.go): KEYS[1] is the hash,
-- KEYS[2] the backend's counter. Where the owner's field ARGV[1] is still
-- in the hash, the counter is raised to the token ARGV[2] (19 digits) if
-- below it, and so is the lock's token in the field "\0fence". Raised,
-- never lowered: the write-back of an earlier grant to the same owner,
-- arriving late (its lock released and taken again here since), carries
-- a smaller token than the lock's now. HEXISTS is pcalled: on a key of
-- another type it fails, which reads as "not held". 1 done, 0 the owner
-- does not hold the lock here.
if redis.pcall("hexists", KEYS[1], ARGV[1]) ~= 1 then
	return 0
end
local token = tonumber(ARGV[2])
if tonumber(redis.call("get", KEYS[2]) or "0") < token then
	redis.call("set", KEYS[2], ARGV[2])
end
if tonumber(redis.call("hget", KEYS[1], "\0fence") or "0") < token then
	redis.call("hset", KEYS[1], "\0fence", ARGV[2])
end
return 1
