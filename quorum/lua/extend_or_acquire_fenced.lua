-- extend_or_acquire.lua, with the lock's fencing token (mint.lua): KEYS[2]
-- is the counter, ARGV[3] the proxy's clock in µs. Where ARGV[1] holds
-- KEYS[1] its TTL becomes ARGV[2] ms: {1, the token its value carries, 0
-- when none}; where KEYS[1] is free it is taken: {2, the token minted};
-- else {0, 0}.
local value = redis.call("get", KEYS[1])
if holds(value, ARGV[1]) then
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	return {1, tonumber(fenceOf(value, ARGV[1])) or 0}
end
if value == false then
	local text = mint(KEYS[2], ARGV[3])
	redis.call("set", KEYS[1], ARGV[1] .. "\0" .. text, "px", ARGV[2])
	horizon(KEYS[1])
	return {2, tonumber(text)}
end
return {0, 0}
