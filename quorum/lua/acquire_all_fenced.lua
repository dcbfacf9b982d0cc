-- acquire_all.lua, minting the lock's fencing token (mint.lua): KEYS are
-- the n lock keys, then the counter. Replies {n, token} when every key was
-- taken for ARGV[1] with TTL ARGV[2] ms, each carrying the token in its
-- value, {0, 0} when any exists. ARGV[3] is the proxy's clock in µs.
local n = #KEYS - 1
for i = 1, n do
	if redis.call("exists", KEYS[i]) == 1 then
		return {0, 0}
	end
end
local text = mint(KEYS[#KEYS], ARGV[3])
local value = ARGV[1] .. "\0" .. text
for i = 1, n do
	redis.call("set", KEYS[i], value, "px", ARGV[2])
end
horizon(KEYS[n])
return {n, tonumber(text)}
