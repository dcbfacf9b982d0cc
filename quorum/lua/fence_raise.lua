-- The write-back of a fencing token (fence.go): where ARGV[1] still holds
-- KEYS[1], the backend's counter KEYS[2] is raised to the token ARGV[2]
-- if below it, and the holder's token KEYS[3] becomes ARGV[2], expiring
-- with the lock. 1 done, 0 the key is not held by ARGV[1].
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return 0
end
local token = tonumber(ARGV[2])
if tonumber(redis.call("get", KEYS[2]) or "0") < token then
	redis.call("set", KEYS[2], ARGV[2])
end
redis.call("set", KEYS[3], ARGV[2], "pxat", redis.call("pexpiretime", KEYS[1]))
return 1
