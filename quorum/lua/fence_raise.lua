-- The write-back of a fencing token (fence.go): KEYS are the lock's n
-- keys, then the backend's counter. Where ARGV[1] still holds every key,
-- the counter is raised to the token ARGV[2] if below it, and each key's
-- value carries ARGV[2] (19 digits), its TTL kept. 1 done, 0 a key is not held by
-- ARGV[1].
local n = #KEYS - 1
for i = 1, n do
	local value = redis.call("get", KEYS[i])
	if not holds(value, ARGV[1]) then
		return 0
	end
end
if tonumber(redis.call("get", KEYS[#KEYS]) or "0") < tonumber(ARGV[2]) then
	redis.call("set", KEYS[#KEYS], ARGV[2])
end
for i = 1, n do
	redis.call("set", KEYS[i], ARGV[1] .. "\0" .. ARGV[2], "keepttl")
end
return 1
