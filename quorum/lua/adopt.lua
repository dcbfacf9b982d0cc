-- lockproxy adopt's second pass on one member (adopt.go): KEYS[1], the set
-- record, becomes the final record ARGV[2] if it is still ARGV[1] (the
-- first pass's, or "" where the member lost its data set since); and where
-- ARGV[3] (ms) is not 0, the member waits for the old epoch's locks: the
-- marker KEYS[2] ("run_id:until:reason", which this connection's greeting
-- made name this process) ends no sooner than ARGV[3] from now, with the
-- reason "epoch" where that moves its end (admit.Wait). Replies 1 when
-- written, 0 when the record was another.
local current = redis.call("GET", KEYS[1]) or ""
if current ~= ARGV[1] and current ~= "" then
	return 0
end
redis.call("SET", KEYS[1], ARGV[2])
local wait = tonumber(ARGV[3])
if wait > 0 then
	local server = redis.call("INFO", "server")
	local runid = string.match(server, "run_id:(%x+)") or ""
	local t = redis.call("TIME")
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
