-- The rollback of one hash_acquire.lua attempt: while the hash KEYS[1]
-- still records ARGV[2] as the last attempt on the owner's field ARGV[1],
-- that attempt's increment is taken back, and the field goes when its
-- count reaches 0 (Redis deletes an empty hash). A later attempt of the
-- same owner has replaced the record, and is left alone; so is anything
-- else. 1 undone, 0 not.
local marker = "\0attempt:" .. ARGV[1]
if redis.call("type", KEYS[1])["ok"] ~= "hash" or redis.call("hget", KEYS[1], marker) ~= ARGV[2] then
	return 0
end
redis.call("hdel", KEYS[1], marker)
if redis.call("hincrby", KEYS[1], ARGV[1], -1) <= 0 then
	redis.call("hdel", KEYS[1], ARGV[1])
end
return 1
