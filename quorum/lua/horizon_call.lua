-- What horizon(KEY) is written out as (lua/horizon.lua). The record is
-- rounded up to the next whole second: under steady load each lease ends a
-- little after the one before, and a record that moved with every one would
-- be written on nearly every grant. Rounded, it is written about once a
-- second, and a restarted backend waits at most a second longer.
leaseEnd = redis.call("pexpiretime", KEY)
if leaseEnd > horizonAt then
	horizonAt = math.ceil(leaseEnd / 1000) * 1000
	redis.call("set", "{lockproxy}:horizon", horizonAt, "pxat", horizonAt)
end
