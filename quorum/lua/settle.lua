-- A proof that every lease this backend may have lost is gone by ARGV[2]
-- ms from now (settle.go): the marker KEYS[1] ("run_id:until:reason")
-- ends then instead, where it is still ARGV[1], the marker that the
-- proof's read found, ends later, and is a loss's wait (restart,
-- unmarked, failover: an epoch wait is decided by lockproxy adopt).
-- Written into the marker, so that every proxy, one started later
-- included, ends the wait together. admit.Settled decides the same.
--
-- The marker read, not only its process: the proof lands a round trip
-- after its read, and meanwhile the wait may have ended, the backend
-- counted, lost its data set again without a restart (FLUSHALL) and been
-- marked anew by the same process; a proof of the earlier loss would cut
-- the new wait short (admit's model checker finds two holders so).
--
-- Replies how long the wait has left (ms), or -1 where the marker was
-- left as it was.
local marker = redis.call("GET", KEYS[1])
if not marker or marker ~= ARGV[1] then
	return -1
end
local owner, ends, reason = string.match(marker, "^(%x+):(%d+):?(%a*)$")
if not owner or (reason ~= "restart" and reason ~= "unmarked" and reason ~= "failover") then
	return -1
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = now + tonumber(ARGV[2])
if at >= tonumber(ends) then
	return -1
end
redis.call("SET", KEYS[1], owner .. ":" .. string.format("%d", at) .. ":" .. reason)
return tonumber(ARGV[2])
