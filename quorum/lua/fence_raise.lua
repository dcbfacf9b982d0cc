-- The write-back of a fencing token (fence.go): KEYS are the lock's n
-- keys, their n fence keys, then the backend's counter. Where ARGV[1]
-- still holds every key, the counter is raised to the token ARGV[2] if
-- below it, and each fence key becomes ARGV[2], expiring with its key.
-- 1 done, 0 a key is not held by ARGV[1].
local n = (#KEYS - 1) / 2
for i = 1, n do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
local token = tonumber(ARGV[2])
if tonumber(redis.call("get", KEYS[#KEYS]) or "0") < token then
	redis.call("set", KEYS[#KEYS], ARGV[2])
end
for i = 1, n do
	redis.call("set", KEYS[n + i], ARGV[2], "pxat", redis.call("pexpiretime", KEYS[i]))
end
return 1
