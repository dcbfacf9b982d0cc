-- SET NX PX, minting the lock's fencing token (fence.go): KEYS[2] is this
-- backend's fencing counter, KEYS[3] the token of KEYS[1]'s holder, and
-- ARGV[3] the proxy's clock in µs, the same for every backend, which the
-- token is at least: backends whose counters drifted apart (one missed
-- acquisitions while down) mint the same token again as soon as the clock
-- passes them.
--
-- The token is max(counter + 1, clock). In the steady state the clock is
-- ahead, so one SET ... GET both reads the counter and raises it, and the
-- clock's own text is the token, with no number to format; only a counter
-- ahead of the clock (a proxy whose clock is behind another's) costs a
-- second SET. Tokens are integers below 2^53, exact in Lua's doubles;
-- "%.0f" writes them without an exponent.
--
-- Replies the token when the key was set, 0 when it was not. The token is
-- also what lets a rollback delete this acquisition's key and no later one
-- made with the same value (lua/release_fenced.lua): a later acquisition
-- here reads a counter at least this token, and mints more. The holder's
-- token expires with the lock: PX the same TTL, a little after the key
-- (the time the script took); FENCE reads it only for the key's holder.
if not redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then
	return 0
end
local text, token = ARGV[3], tonumber(ARGV[3])
local counter = tonumber(redis.call("set", KEYS[2], text, "get") or "0")
if counter >= token then
	token = counter + 1
	text = string.format("%.0f", token)
	redis.call("set", KEYS[2], text)
end
redis.call("set", KEYS[3], text, "px", ARGV[2])
return token
