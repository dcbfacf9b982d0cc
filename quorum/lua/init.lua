-- lockproxy init on one fresh member (init.go): KEYS[1] the set record,
-- KEYS[2] the marker, KEYS[3] the horizon. Where the member carries no
-- record, no horizon, and no marker but the one that a greeting of this
-- process wrote on a data set that had none (reason "unmarked") or an
-- init of this process wrote ("init"), the record becomes ARGV[1] and the
-- marker names this process with no wait: "run_id:now:init". Checked here
-- again, atomically with the writes, since what init's greeting read may
-- have changed (a proxy started meanwhile). Replies "" when written, else
-- what it found.
local runid = string.match(redis.call("INFO", "server"), "run_id:(%x+)") or ""
if runid == "" then
	return "no run_id in INFO server"
end
local record = redis.call("GET", KEYS[1])
if record then
	return "a backend set record: " .. record
end
local horizon = redis.call("GET", KEYS[3])
if horizon then
	return "a lease horizon: " .. horizon
end
local marker = redis.call("GET", KEYS[2])
if marker then
	local owner, reason = string.match(marker, "^(%x+):%d+:?(%a*)$")
	if owner ~= runid or (reason ~= "unmarked" and reason ~= "init") then
		return "a marker: " .. marker
	end
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("SET", KEYS[2], runid .. ":" .. string.format("%d", now) .. ":init")
redis.call("SET", KEYS[1], ARGV[1])
return ""
