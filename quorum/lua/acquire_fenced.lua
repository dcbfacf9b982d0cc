-- SET NX PX, minting the lock's fencing token (fence.go): KEYS[2] is this
-- backend's fencing counter, KEYS[3] the token of KEYS[1]'s holder, and
-- ARGV[3] the proxy's clock in µs, the same for every backend, which the
-- token is at least: backends whose counters drifted apart (one missed
-- acquisitions while down) mint the same token again as soon as the clock
-- passes them. Tokens are integers below 2^53, exact in Lua's doubles;
-- "%.0f" writes them without an exponent.
--
-- Replies {expiry, token} when the key was set, the key's absolute expiry
-- (ms) being the stamp that lets a rollback delete this acquisition's key
-- and no later one made with the same token; {0, counter} when it was not.
local counter = tonumber(redis.call("get", KEYS[2]) or "0")
if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then
	local expiry = redis.call("pexpiretime", KEYS[1])
	local token = math.max(counter + 1, tonumber(ARGV[3]))
	local text = string.format("%.0f", token)
	redis.call("set", KEYS[2], text)
	redis.call("set", KEYS[3], text, "pxat", expiry)
	return {expiry, token}
end
return {0, counter}
