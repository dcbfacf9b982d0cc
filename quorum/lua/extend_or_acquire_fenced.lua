-- extend_or_acquire.lua, with the lock's fencing token (mint.lua): KEYS[2]
-- is the lock's fence key, KEYS[3] the counter, ARGV[3] the proxy's clock
-- in µs. Where ARGV[1] holds KEYS[1] its TTL, and the fence key's, become
-- ARGV[2] ms: {1, the token the fence key carries, 0 when none}; where
-- KEYS[1] is free it is taken: {2, the token minted}; else {0, 0}.
local value = redis.call("get", KEYS[1])
if value == ARGV[1] then
	redis.call("pexpire", KEYS[1], ARGV[2])
	redis.call("pexpire", KEYS[2], ARGV[2])
	return {1, tonumber(redis.call("get", KEYS[2]) or "0")}
end
if value == false then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2])
	return {2, mint(KEYS[3], {KEYS[2]}, ARGV[2], ARGV[3])}
end
return {0, 0}
