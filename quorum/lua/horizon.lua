-- The lease horizon (docs/design/horizon.md): every script that sets or
-- raises a lock's expiry calls horizon(key) after it, so that while this
-- data set is intact no lease in it outlives {lockproxy}:horizon, the
-- latest expiry recorded (ms, this server's clock). A backend that lost
-- its data set then waits only until the horizons of enough others have
-- passed, not max_ttl. The key expires at its own value: once no recorded
-- lease can remain it goes, and absent means none. Returns key's expiry.
--
-- The record is rounded up to the next whole second: under steady load
-- each lease ends a little after the one before, and a record that moved
-- with every one would be written on nearly every grant. Rounded, it is
-- written about once a second, and a restarted backend waits at most a
-- second longer. lua/setcheck.lua read it (lease[2]).
local horizonAt = tonumber(lease[2]) or 0
local function horizon(key)
	local at = redis.call("pexpiretime", key)
	if at > horizonAt then
		horizonAt = math.ceil(at / 1000) * 1000
		redis.call("set", "{lockproxy}:horizon", horizonAt, "pxat", horizonAt)
	end
	return at
end
