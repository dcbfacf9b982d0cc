-- DEL, whoever holds the key, telling the engines waiting for it
-- (waits.go) when there was one, with the delete's id ARGV[1] and no
-- token: 1 deleted, 0 absent.
local deleted = redis.call("del", KEYS[1])
if deleted == 1 then
	notify(KEYS[1], ARGV[1])
end
return deleted
