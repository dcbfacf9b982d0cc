-- acquire_all.lua, minting the lock's fencing token (mint.lua): KEYS are
-- the n lock keys, then their n fence keys, then the counter. Replies
-- {n, token} when every key was taken for ARGV[1] with TTL ARGV[2] ms,
-- {0, 0} when any exists. ARGV[3] is the proxy's clock in µs.
local n = (#KEYS - 1) / 2
for i = 1, n do
	if redis.call("exists", KEYS[i]) == 1 then
		return {0, 0}
	end
end
local fenceKeys = {}
for i = 1, n do
	redis.call("set", KEYS[i], ARGV[1], "px", ARGV[2])
	fenceKeys[i] = KEYS[n + i]
end
return {n, mint(KEYS[#KEYS], fenceKeys, ARGV[2], ARGV[3])}
