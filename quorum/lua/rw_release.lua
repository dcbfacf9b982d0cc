-- A read-write lock's release (rw.lua), on one backend: KEYS[1] is the
-- lock, KEYS[2] (when given) the request's latch; ARGV[1] the mode
-- released, "read" or "write"; ARGV[2] the owner; ARGV[3] the lease (ms)
-- a writer's lock gets while write holds are left; ARGV[4] the timeout
-- keys' prefix ("" for a writer); ARGV[5] the latch's TTL (ms); ARGV[6]
-- this release's id.
--
-- One hold of the owner's comes off, as Redisson's scripts take it: a
-- reader's with its timeout key, the lock then lasting as its longest
-- hold left; a writer's last leaving the owner's read holds under "read"
-- (the downgrade). Replies {1, count} the owner still holds it; {2, 0}
-- released, others' or the owner's read holds left; {3, 0} released and
-- the lock went (the engines waiting are told); {0, 0} not the owner's;
-- {4, 0} no read-write lock here at all. A latch this request wrote (a
-- retry) answers as the release did: "0" held, "2" released, "1" went.
local key, latch, owner = KEYS[1], KEYS[2], ARGV[2]
local reader = ARGV[1] == "read"
local field = fieldOf(ARGV[1], owner)
local function done(kind, count)
	if latch then
		redis.call("set", latch, kind == 1 and "0" or kind == 2 and "2" or "1", "px", ARGV[5])
	end
	return {kind, count}
end
if latch then
	local was = redis.pcall("get", latch)
	if was == "1" then
		return {3, 0}
	elseif was == "2" then
		return {2, 0}
	elseif was == "0" then
		local left = redis.pcall("hget", key, field)
		return {1, tonumber(type(left) == "string" and left) or 0}
	end
end
if redis.call("type", key)["ok"] ~= "hash" then
	return {4, 0}
end
local mode = redis.call("hget", key, "mode")
if not mode then
	return {4, 0}
end
if not reader and mode ~= "write" or not redis.call("hget", key, field) then
	return {0, 0}
end
local count = takeOne(key, field, owner, ARGV[4])
if reader then
	if settleRead(key, ARGV[4], ARGV[6], field) then
		return done(3, 0)
	end
	return done(count > 0 and 1 or 2, math.max(count, 0))
end
if count > 0 then
	redis.call("pexpire", key, ARGV[3])
	horizon(key)
	return done(1, count)
end
if settleWrite(key, ARGV[6], field) then
	return done(3, 0)
end
return done(2, 0)
