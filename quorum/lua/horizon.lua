-- The lease horizon (docs/design/horizon.md): every script that sets or
-- raises a lock's expiry calls horizon(key) after it, so that while this
-- data set is intact no lease in it outlives {lockproxy}:horizon, the
-- latest expiry recorded (ms, this server's clock). A backend that lost
-- its data set then waits only until the horizons of enough others have
-- passed, not max_ttl. The key expires at its own value: once no recorded
-- lease can remain it goes, and absent means none. Returns key's expiry.
local function horizon(key)
	local at = redis.call("pexpiretime", key)
	if at > (tonumber(redis.call("get", "{lockproxy}:horizon")) or 0) then
		redis.call("set", "{lockproxy}:horizon", at, "pxat", at)
	end
	return at
end
