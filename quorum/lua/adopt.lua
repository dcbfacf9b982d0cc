-- lockproxy adopt's second pass on one member (adopt.go): KEYS[1], the set
-- record, becomes the final record ARGV[2] if it is still ARGV[1] (the
-- first pass's, or "" where the member lost its data set since); and where
-- ARGV[3] (ms) is not 0, the member waits for the old epoch's locks: the
-- marker KEYS[2] ("run_id:until:reason", which this connection's greeting
-- made name this process) ends no sooner than ARGV[3] from now, with the
-- reason "epoch" where that moves its end (admit.Wait). Where ARGV[4]
-- (ms) is given and not 0, the floor KEYS[3] (ms, this server's clock: the
-- old epochs' locks are gone by then, adopt.go) is raised to ARGV[4] from
-- now, and expires then. Replies 1 when written, 0 when the record was
-- another.
local current = redis.call("GET", KEYS[1]) or ""
if current ~= ARGV[1] and current ~= "" then
	return 0
end
redis.call("SET", KEYS[1], ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local floor = tonumber(ARGV[4] or "0")
if floor > 0 and now + floor > tonumber(redis.call("GET", KEYS[3]) or "0") then
	local at = string.format("%d", now + floor)
	redis.call("SET", KEYS[3], at, "PXAT", at)
end
local wait = tonumber(ARGV[3])
if wait > 0 then
	local server = redis.call("INFO", "server")
	local runid = string.match(server, "run_id:(%x+)") or ""
	local owner, ends, reason = runid, 0, "epoch"
	local marker = redis.call("GET", KEYS[2])
	if marker then
		local o, u, r = string.match(marker, "^(%x+):(%d+):?(%a*)$")
		if o == runid then
			ends, reason = tonumber(u), r
		end
	end
	if now + wait > ends then
		ends, reason = now + wait, "epoch"
	end
	redis.call("SET", KEYS[2], owner .. ":" .. string.format("%d", ends) .. ":" .. reason)
end
return 1
