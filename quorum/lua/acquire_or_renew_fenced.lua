-- acquire_or_renew.lua, with the lock's fencing token (mint.lua): KEYS[2]
-- is the counter, ARGV[4] the proxy's clock in µs. Take KEYS[1] for
-- ARGV[1] with TTL ARGV[3] ms: {2, the token minted}; or renew it with
-- ARGV[1], keeping the token its value carries, when the holder's token
-- starts with the same first ARGV[2] bytes: {1, that token, 0 when none};
-- else {0, 0}.
local current = redis.call("get", KEYS[1])
if current == false then
	local text = mint(KEYS[2], ARGV[4])
	redis.call("set", KEYS[1], ARGV[1] .. "\0" .. text, "px", ARGV[3])
	horizon(KEYS[1])
	return {2, tonumber(text)}
end
local prefix = tonumber(ARGV[2])
if prefix > 0 and string.sub(current, 1, prefix) == string.sub(ARGV[1], 1, prefix) then
	local held = plain(current)
	local fence = fenceOf(current, held)
	local value = ARGV[1]
	if fence ~= "" then
		value = value .. "\0" .. fence
	end
	redis.call("set", KEYS[1], value, "px", ARGV[3])
	horizon(KEYS[1])
	return {1, tonumber(fence) or 0}
end
return {0, 0}
