-- Add ARGV[2] ms to the TTL of a key ARGV[1] holds, up to ARGV[3] ms. The
-- new TTL, or {the new TTL, the lock's fencing token} with fencing, which a
-- top-up writes to a backend that lost the lock (topup.go); 0 when not
-- held or without a TTL; minus the TTL it would have had when that exceeds
-- the maximum (nothing is changed then).
local value = redis.call("get", KEYS[1])
if not holds(value, ARGV[1]) then
	return 0
end
local left = redis.call("pttl", KEYS[1])
if left < 0 then
	return 0
end
local ttl = left + tonumber(ARGV[2])
if ttl > tonumber(ARGV[3]) then
	return -ttl
end
redis.call("pexpire", KEYS[1], ttl)
horizon(KEYS[1])
local fence = fenceOf(value, ARGV[1])
if fence == "" then
	return ttl
end
return {ttl, fence}
