-- extend_all.lua, with the lock's fencing token: KEYS are the n lock keys,
-- then their n fence keys, which get the same TTL, ARGV[2] ms, when
-- ARGV[1] holds every key. The number of keys extended, or 0.
local n = #KEYS / 2
for i = 1, n do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
for i = 1, n do
	redis.call("pexpire", KEYS[i], ARGV[2])
	redis.call("pexpire", KEYS[n + i], ARGV[2])
end
return n
