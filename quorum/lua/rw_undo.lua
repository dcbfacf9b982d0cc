-- The rollback of one rw_acquire.lua attempt (rw.lua): ARGV[1] the mode
-- asked, ARGV[2] the owner, ARGV[3] the attempt's id, ARGV[4] the timeout
-- keys' prefix. While the lock
-- still records ARGV[3] as the field's last attempt, that attempt's hold
-- comes off, with the timeout key it set (no later attempt of the owner's
-- ran here, or the record would be its own), and the lock is tidied as a
-- release tidies it; other owners' holds are never touched. 1 undone, 0
-- not.
local key, owner = KEYS[1], ARGV[2]
local reader = ARGV[1] == "read"
local field = fieldOf(ARGV[1], owner)
local marker = "\0attempt:" .. field
if redis.call("type", key)["ok"] ~= "hash" or redis.call("hget", key, marker) ~= ARGV[3] then
	return 0
end
redis.call("hdel", key, marker)
local count = takeOne(key, field, owner, ARGV[4])
if reader then
	settleRead(key, ARGV[4], "", field)
elseif count <= 0 then
	settleWrite(key, "", field)
end
return 1
