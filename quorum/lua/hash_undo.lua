-- The rollback of one hash_acquire.lua attempt: while the hash KEYS[1]
-- still records ARGV[2] as the last attempt on the owner's field ARGV[1],
-- that attempt's increment is taken back, and the field goes when its
-- count reaches 0. A later attempt of the same owner has replaced the
-- record, and is left alone; so is anything else. 1 undone, 0 not.
--
-- Once no owner's field is left the hash goes whole: the engine's own
-- fields (a NUL byte first: the fencing token, other attempts' records)
-- would otherwise keep it, and refuse every owner, for the rest of its
-- lease.
local marker = "\0attempt:" .. ARGV[1]
if redis.call("type", KEYS[1])["ok"] ~= "hash" or redis.call("hget", KEYS[1], marker) ~= ARGV[2] then
	return 0
end
redis.call("hdel", KEYS[1], marker)
if redis.call("hincrby", KEYS[1], ARGV[1], -1) <= 0 then
	redis.call("hdel", KEYS[1], ARGV[1])
	for _, field in ipairs(redis.call("hkeys", KEYS[1])) do
		if string.byte(field) ~= 0 then
			return 1
		end
	end
	redis.call("del", KEYS[1])
end
return 1
