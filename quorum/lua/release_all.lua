-- Compare-and-delete each key, telling the engines waiting for it
-- (waits.go): the number of keys ARGV[1] held and lost.
local deleted = 0
for _, key in ipairs(KEYS) do
	if redis.call("get", key) == ARGV[1] then
		deleted = deleted + redis.call("del", key)
		redis.call("publish", "{lockproxy}:released:" .. key, ARGV[1])
	end
end
return deleted
