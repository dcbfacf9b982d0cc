-- The re-seed of a fencing counter (seed.go): KEYS[1], this backend's
-- counter, is raised to ARGV[1] if below it, and KEYS[2] records that the
-- process ARGV[2] was re-seeded, so that every proxy (one started later
-- too) knows it need not be again. Only when this server is that process:
-- a request that reaches the next process, after a restart, must leave it
-- unseeded. 1 done, 0 another process.
local server = redis.call("INFO", "server")
if string.match(server, "run_id:(%x+)") ~= ARGV[2] then
	return 0
end
if tonumber(redis.call("GET", KEYS[1]) or "0") < tonumber(ARGV[1]) then
	redis.call("SET", KEYS[1], ARGV[1])
end
redis.call("SET", KEYS[2], ARGV[2])
return 1
