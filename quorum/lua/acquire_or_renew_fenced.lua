-- acquire_or_renew.lua, with the lock's fencing token (mint.lua): KEYS[2]
-- is the lock's fence key, KEYS[3] the counter, ARGV[4] the proxy's clock
-- in µs. Take KEYS[1] for ARGV[1] with TTL ARGV[3] ms: {2, the token
-- minted}; or renew it with ARGV[1], and the fence key's TTL with it, when
-- the value held starts with the same first ARGV[2] bytes: {1, the token
-- the fence key carries, 0 when none}; else {0, 0}.
if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[3]) then
	return {2, mint(KEYS[3], {KEYS[2]}, ARGV[3], ARGV[4])}
end
local prefix = tonumber(ARGV[2])
if prefix > 0 and redis.call("getrange", KEYS[1], 0, prefix - 1) == string.sub(ARGV[1], 1, prefix) then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[3])
	redis.call("pexpire", KEYS[2], ARGV[3])
	return {1, tonumber(redis.call("get", KEYS[2]) or "0")}
end
return {0, 0}
