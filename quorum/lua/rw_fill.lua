-- A top-up of a read-write lock's hold (topup.go, rw.lua): the owner
-- ARGV[1]'s field in mode ARGV[4] gets the hold count ARGV[3] of the
-- quorum that granted it, valid ARGV[2] ms more, where the lock KEYS[1]
-- is absent (with that mode), or where the field counts fewer holds and
-- the lock's mode admits it: a reader's under "read" or under its own
-- writer's "write", a writer's under its own "write". A reader's missing
-- holds get their timeout keys (prefix ARGV[5]). Nothing is written into
-- another owner's lock, so no backend holds a writer beside another
-- owner. 1 done, 0 not.
local key, owner, left, want = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local reader = ARGV[4] == "read"
local field = fieldOf(ARGV[4], owner)
local kind = redis.call("type", key)["ok"]
local have = 0
if kind == "hash" then
	local mode = redis.call("hget", key, "mode")
	have = tonumber(redis.call("hget", key, field)) or 0
	local admits = mode == "write" and redis.call("hexists", key, owner .. ":write") == 1
		or reader and mode == "read"
	if not admits or have >= want then
		return 0
	end
elseif kind == "none" then
	redis.call("hset", key, "mode", ARGV[4])
else
	return 0
end
redis.call("hset", key, field, want)
if reader then
	for i = have + 1, want do
		redis.call("set", timeoutKey(ARGV[5], owner, i), 1, "px", left)
	end
end
if redis.call("pttl", key) < left then
	redis.call("pexpire", key, left)
end
horizon(key)
return 1
