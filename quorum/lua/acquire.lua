-- SET NX PX, answering the key's absolute expiry (ms) when it was set: the
-- stamp that lets a rollback delete this acquisition's key and no later one
-- made with the same token.
if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then
	return horizon(KEYS[1])
end
return 0
