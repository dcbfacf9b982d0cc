-- Only the backend set recorded on this backend may take or extend locks
-- here: a proxy run with another set, or with an older epoch of it, is
-- refused, at once and atomically with what it asked. ARGV[#ARGV] is the
-- proxy's set, "epoch:N:fingerprint:", which the record {lockproxy}:set
-- starts with (members.go). Where no set is recorded (a backend that lost
-- its data set, or a server that cannot carry a record, as the embedded
-- ones) any may: the lock lands, and the proxies count the backend's vote
-- once its record names their set (admit.Allows says the same).
--
-- The same read fetches the lease horizon for lua/horizon.lua: one command
-- where two would double what these checks cost a lock cycle
-- (docs/cost.md).
local lease = redis.call("mget", "{lockproxy}:set", "{lockproxy}:horizon")
local recorded = lease[1]
if recorded and string.sub(recorded, 1, #ARGV[#ARGV]) ~= ARGV[#ARGV] then
	return redis.error_reply("LOCKPROXY_SET " .. recorded)
end
