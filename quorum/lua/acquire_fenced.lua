-- SET NX PX, minting the lock's fencing token (mint.lua): KEYS[2] is this
-- backend's fencing counter, ARGV[3] the proxy's clock in µs as 19 digits
-- (fence.go). The token goes into the lock's value (value_fenced.lua), so
-- the lock is one key that expires and goes whole, as without fencing.
--
-- The key is set first, with the clock as its token: that is the token
-- mint gives in the steady state, where the clock is ahead of the counter,
-- so a taken key costs three commands and a held one two, as without
-- fencing, and nothing is written for a held key. Only where the counter
-- was ahead is the value written again, within the script, so that no
-- reader sees the clock's token. A key of another type is refused by the
-- SET NX.
--
-- Replies the token, as the counter's text (converting it to a number
-- costs the backend more than the proxy), when the key was set; 0 when it
-- was not. The token is also what lets a rollback delete this
-- acquisition's key and no later one made with the same holder's token
-- (lua/release_fenced.lua): a later acquisition here reads a counter at
-- least this token, and mints more.
if not redis.call("set", KEYS[1], ARGV[1] .. "\0" .. ARGV[3], "nx", "px", ARGV[2]) then
	return 0
end
horizon(KEYS[1])
local text = mint(KEYS[2], ARGV[3])
if text ~= ARGV[3] then
	redis.call("set", KEYS[1], ARGV[1] .. "\0" .. text, "xx", "keepttl")
end
return text
