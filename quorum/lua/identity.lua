-- Who the server is, and whether its data set is the one lockproxy marked
-- on it: the marker KEYS[1], "run_id:until:reason", names the redis-server
-- process (run_id) that the data set was last known to belong to, and
-- until when (ms, by this server's clock) its votes do not count, and why.
-- A replica inherits its master's marker, so a promoted replica carries a
-- marker that names another process, even for a proxy that never saw the
-- failover; so does a server restarted from its persistence files.
--
-- Where the marker names another process (or there is none), it is
-- rewritten to name this one, quarantined from now for ARGV[1] (ms), or
-- ARGV[2] for a replica promoted since it started, or until the old
-- marker's end if that is later (an epoch wait that lockproxy adopt wrote):
-- so every proxy agrees on when, and a restart never cuts a wait short.
-- admit.Mark decides the same, and quorum's tests compare the two.
--
-- KEYS[2] is the backend set record, read and never written here
-- (members.go). KEYS[3] names the redis-server process whose fencing
-- counter lockproxy last re-seeded from the other backends (seed.go).
--
-- Replies {role, run_id, previous owner ("" when unmarked), quarantined
-- until (ms), now (ms), promoted (0 or 1), record, eviction, seeded,
-- reason}, eviction being the maxmemory-policy when it may evict keys with
-- a TTL (a maxmemory is set and the policy is not noeviction), else "",
-- and seeded 1 when KEYS[3] names this process, else 0, and horizon how
-- long (ms) the longest lease recorded on it has left ({lockproxy}:horizon,
-- lua/horizon.lua; 0 when none), and floor how long (ms) until the locks of
-- the epochs before the last adopt are gone ({lockproxy}:floor, adopt.go;
-- 0 when none). Only a master's marker is written.
local server = redis.call("INFO", "server")
local repl = redis.call("INFO", "replication")
local runid = string.match(server, "run_id:(%x+)") or ""
local role = string.match(repl, "role:(%a+)") or ""
local promoted = 0
if (string.match(repl, "second_repl_offset:(%-?%d+)") or "-1") ~= "-1" then
	promoted = 1
end
local memory = redis.call("INFO", "memory")
local eviction = string.match(memory, "maxmemory_policy:([%w%-]+)") or ""
if eviction == "noeviction" or (string.match(memory, "maxmemory:(%d+)") or "0") == "0" then
	eviction = ""
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if role ~= "master" or runid == "" then
	return {role, runid, "", 0, now, promoted, "", eviction, 0, "", 0, 0}
end
local horizon = math.max(0, tonumber(redis.call("GET", "{lockproxy}:horizon") or "0") - now)
local floor = math.max(0, tonumber(redis.call("GET", "{lockproxy}:floor") or "0") - now)
local record = redis.call("GET", KEYS[2]) or ""
local seeded = 0
if redis.call("GET", KEYS[3]) == runid then
	seeded = 1
end
local owner, ends, reason = "", 0, ""
local marker = redis.call("GET", KEYS[1])
if marker then
	local o, u, r = string.match(marker, "^(%x+):(%d+):?(%a*)$")
	if o then
		owner, ends, reason = o, tonumber(u), r
	end
end
if owner == runid then
	return {role, runid, owner, ends, now, promoted, record, eviction, seeded, reason, horizon, floor}
end
local next, why = now + tonumber(ARGV[1]), "restart"
if promoted == 1 then
	next, why = now + tonumber(ARGV[2]), "failover"
elseif owner == "" then
	why = "unmarked"
end
if owner ~= "" and ends > next then
	next, why = ends, reason
end
redis.call("SET", KEYS[1], runid .. ":" .. string.format("%d", next) .. ":" .. why)
return {role, runid, owner, next, now, promoted, record, eviction, seeded, why, horizon, floor}
