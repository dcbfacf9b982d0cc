-- Only the backend set recorded on this backend may take or extend locks
-- here: a proxy run with another set, or with an older epoch of it, is
-- refused, at once and atomically with what it asked. ARGV[#ARGV] is the
-- proxy's set, "epoch:N:fingerprint:", which the record {lockproxy}:set
-- starts with (lua/identity.lua writes it). Where no set is recorded (a
-- server that cannot run the greeting's script, as the embedded ones) any
-- may.
local recorded = redis.call("get", "{lockproxy}:set")
if recorded and string.sub(recorded, 1, #ARGV[#ARGV]) ~= ARGV[#ARGV] then
	return redis.error_reply("LOCKPROXY_SET " .. recorded)
end
