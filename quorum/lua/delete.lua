-- DEL, whoever holds the key, telling the engines waiting for it
-- (waits.go) when there was one: 1 deleted, 0 absent.
local deleted = redis.call("del", KEYS[1])
if deleted == 1 then
	redis.call("publish", "{lockproxy}:released:" .. KEYS[1], "")
end
return deleted
