-- What the scripts of read-write locks (Redisson's RReadWriteLock,
-- rwlock.go) share. The lock is a hash: the field "mode" ("read" or
-- "write"), one field per owner with its hold count (a writer's ends in
-- ":write"), and the engine's own fields, which start with a NUL byte. A
-- read hold i of owner o has the key <prefix>:<o>:rwlock_timeout:<i>,
-- whose TTL is that hold's lease: when a reader leaves, the hash lasts as
-- long as the longest hold left.

-- holders is the lock's owner fields and their counts.
local function holders(key)
	local out = {}
	local all = redis.call("hgetall", key)
	for i = 1, #all, 2 do
		local field = all[i]
		if field ~= "mode" and string.byte(field) ~= 0 then
			out[field] = tonumber(all[i + 1]) or 0
		end
	end
	return out
end

local function timeoutKey(prefix, owner, i)
	return prefix .. ":" .. owner .. ":rwlock_timeout:" .. i
end

local function isWriter(field)
	return string.sub(field, -6) == ":write"
end

-- fieldOf is owner's field in the lock for mode: the reader's is the
-- owner, the writer's the owner and ":write".
local function fieldOf(mode, owner)
	if mode == "read" then
		return owner
	end
	return owner .. ":write"
end

-- takeOne takes one hold off the owner's field (the field goes at 0), and
-- a reader's with its timeout key; it returns the count left.
local function takeOne(key, field, owner, prefix)
	local count = redis.call("hincrby", key, field, -1)
	if count <= 0 then
		redis.call("hdel", key, field)
	end
	if not isWriter(field) then
		redis.call("del", timeoutKey(prefix, owner, count + 1))
	end
	return count
end

-- longestHold is the longest PTTL of the read holds' timeout keys left.
local function longestHold(prefix, owners)
	local longest = -2
	for field, count in pairs(owners) do
		if not isWriter(field) then
			for i = count, 1, -1 do
				longest = math.max(longest, redis.call("pttl", timeoutKey(prefix, field, i)))
			end
		end
	end
	return longest
end

-- gone deletes the lock and tells the engines waiting for it, as
-- release.lua does (id and field name the release); a rollback, whose id
-- is "", tells nobody, as hash_undo.lua does not: nobody waited for a
-- lock that was never granted.
local function gone(key, id, field)
	redis.call("del", key)
	if id ~= "" then
		notify(key, id .. field)
	end
	return true
end

-- settleRead tidies the lock after a read hold was taken off, as
-- Redisson's read release does: it lasts as its longest hold left, or,
-- where every read hold left has lapsed, goes, unless a writer holds it
-- (the same owner's). It never raises the hash's TTL (a lease raised must
-- be recorded: horizon.lua). Returns true when the lock went.
local function settleRead(key, prefix, id, field)
	local owners = holders(key)
	if next(owners) ~= nil then
		local longest = longestHold(prefix, owners)
		if longest > 0 then
			local pttl = redis.call("pttl", key)
			if pttl < 0 or longest < pttl then
				redis.call("pexpire", key, longest)
			end
			return false
		end
		if redis.call("hget", key, "mode") == "write" then
			return false
		end
	end
	return gone(key, id, field)
end

-- settleWrite tidies the lock after a writer's field went, as Redisson's
-- write release does: with no owner left it goes; with the same owner's
-- read holds left they stay, under "read" (the downgrade). Returns true
-- when the lock went.
local function settleWrite(key, id, field)
	local owners = holders(key)
	if next(owners) == nil then
		return gone(key, id, field)
	end
	for f in pairs(owners) do
		if isWriter(f) then
			return false
		end
	end
	redis.call("hset", key, "mode", "read")
	return false
end
