-- mint gives the lock being taken its fencing token on this backend
-- (fence.go): max(counter + 1, now), now being the proxy's clock in µs,
-- the same for every backend. The counter becomes the token, and so does
-- each of the lock's fence keys, expiring with the lock (ttl ms: a
-- script's clock stands still while it runs, so PX gives the lock's
-- expiry). Tokens are integers below 2^53, exact in Lua's doubles;
-- "%.0f" writes them without an exponent.
local function mint(counter, fenceKeys, ttl, now)
	local token = math.max(tonumber(redis.call("get", counter) or "0") + 1, tonumber(now))
	local text = string.format("%.0f", token)
	redis.call("set", counter, text)
	for _, key in ipairs(fenceKeys) do
		redis.call("set", key, text, "px", ttl)
	end
	return token
end
