-- Who the server is, and whether its data set is the one lockproxy marked
-- on it: the marker KEYS[1] names the redis-server process (run_id) that
-- the data set was last known to belong to, and until when (ms, by this
-- server's clock) its votes do not count. A replica inherits its master's
-- marker, so a promoted replica carries a marker that names another
-- process, even for a proxy that never saw the failover; so does a server
-- restarted from its persistence files.
--
-- ARGV[1] is the quarantine (ms) of a data set new to the marker or last
-- written by another process; ARGV[2] that of a failover (this server was
-- a replica, promoted since it started), at least ARGV[1].
--
-- The record KEYS[2] names the backend set this server is a member of:
-- "epoch:N:fingerprint:since:previous epoch:previous N:previous
-- slots:slots", since (ms, by this clock) being when this epoch was recorded
-- here, slots a digest of the hash slots the set serves ("-": all of them).
-- ARGV[3], ARGV[4], ARGV[5] and ARGV[6] are the proxy's epoch, N,
-- fingerprint and slots: an absent record is written with them (previous
-- epoch 0), an older epoch's is replaced by them (which the set check of
-- every lock script then enforces: proxies of the older epoch can no
-- longer take locks here), any other is left as it is, for the proxy to
-- judge. A record of six fields (written before slots were recorded)
-- served all slots.
--
-- KEYS[3] names the redis-server process whose fencing counter lockproxy
-- last re-seeded from the other backends (seed.go): a data set that
-- another process wrote may have lost its counter.
--
-- Replies {role, run_id, previous owner ("" when unmarked), quarantined
-- until (ms), now (ms), promoted (0 or 1), record, eviction, seeded},
-- eviction being the maxmemory-policy when it may evict keys with a TTL (a
-- maxmemory is set and the policy is not noeviction), else "", and seeded
-- 1 when KEYS[3] names this process, else 0. Only a master's marker
-- and record are written; where the marker names another process it is
-- rewritten to name this one, quarantined from now, so that every proxy
-- agrees on when.
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
	return {role, runid, "", 0, now, promoted, "", eviction, 0}
end
local record = redis.call("GET", KEYS[2])
local epoch = record and tonumber(string.match(record, "^(%d+):"))
local ours = tonumber(ARGV[3])
if not epoch or epoch < ours then
	local previous = "0:0:-"
	if epoch then
		local f = {}
		for field in string.gmatch(record, "[^:]+") do
			f[#f + 1] = field
		end
		previous = epoch .. ":" .. f[2] .. ":" .. (f[8] or "-")
	end
	record = ARGV[3] .. ":" .. ARGV[4] .. ":" .. ARGV[5] .. ":" .. now .. ":" .. previous .. ":" .. ARGV[6]
	redis.call("SET", KEYS[2], record)
end
local seeded = 0
if redis.call("GET", KEYS[3]) == runid then
	seeded = 1
end
local owner, quarantined = "", 0
local marker = redis.call("GET", KEYS[1])
if marker then
	local o, u = string.match(marker, "^(%x+):(%d+)$")
	if o then
		owner, quarantined = o, tonumber(u)
	end
end
if owner == runid then
	return {role, runid, owner, quarantined, now, promoted, record, eviction, seeded}
end
local q = tonumber(ARGV[1])
if promoted == 1 then
	q = tonumber(ARGV[2])
end
quarantined = now + q
redis.call("SET", KEYS[1], runid .. ":" .. quarantined)
return {role, runid, owner, quarantined, now, promoted, record, eviction, seeded}
