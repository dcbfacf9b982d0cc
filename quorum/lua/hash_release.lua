-- Redisson's RLock release, on one backend: KEYS[1] is the hash, KEYS[2]
-- (when given) the request's latch; ARGV[1] the owner's field, ARGV[2] the
-- lease (ms) to set while the count stays above 0, ARGV[3] the latch's TTL
-- (ms), ARGV[4] this release's id.
--
-- A latch this request wrote (a retry of it) answers as it did then,
-- without decrementing again. Otherwise the count goes down by one: above
-- 0 the hash gets the lease, else it goes, and the engines waiting for it
-- (waits.go) are told as release.lua tells them.
--
-- Replies {0, 0} when the field is absent (not the owner's, or a key of
-- another type), {1, count} when the owner still holds it with count, {2,
-- 0} when it was released. A latch's "still held" answers with the
-- count the field has now, 0 when it is gone.
local latch = KEYS[2]
if latch then
	local done = redis.pcall("get", latch)
	if done == "1" then
		return {2, 0}
	elseif done == "0" then
		local left = redis.pcall("hget", KEYS[1], ARGV[1])
		return {1, tonumber(type(left) == "string" and left) or 0}
	end
end
if redis.call("type", KEYS[1])["ok"] ~= "hash" or redis.call("hexists", KEYS[1], ARGV[1]) == 0 then
	return {0, 0}
end
local count = redis.call("hincrby", KEYS[1], ARGV[1], -1)
if count > 0 then
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	if latch then
		redis.call("set", latch, "0", "px", ARGV[3])
	end
	return {1, count}
end
redis.call("del", KEYS[1])
notify(KEYS[1], ARGV[4] .. ARGV[1])
if latch then
	redis.call("set", latch, "1", "px", ARGV[3])
end
return {2, 0}
