-- SET NX PX, minting the lock's fencing token (mint.lua): KEYS[2] is this
-- backend's fencing counter, ARGV[3] the proxy's clock in µs. The token
-- goes into the lock's value (value_fenced.lua), so the lock is one key
-- that expires and goes whole, as without fencing.
--
-- It makes lua/setcheck.lua's check itself, with one MGET that also tells
-- whether the key is held: a held key is refused before anything is
-- written, as most attempts under contention are, and a taken one costs
-- three commands, as without fencing. A key of another type reads as nil
-- there, and the SET NX refuses it.
--
-- Replies the token when the key was set, 0 when it was not. The token is
-- also what lets a rollback delete this acquisition's key and no later one
-- made with the same holder's token (lua/release_fenced.lua): a later
-- acquisition here reads a counter at least this token, and mints more.
local found = redis.call("mget", "{lockproxy}:set", KEYS[1])
if found[1] and string.sub(found[1], 1, #ARGV[#ARGV]) ~= ARGV[#ARGV] then
	return redis.error_reply("LOCKPROXY_SET " .. found[1])
end
if found[2] then
	return 0
end
local text = mint(KEYS[2], ARGV[3])
if not redis.call("set", KEYS[1], ARGV[1] .. "\0" .. text, "nx", "px", ARGV[2]) then
	return 0
end
return tonumber(text)
