-- Compare-and-delete one fenced acquisition (lua/acquire_fenced.lua): the
-- key goes only while ARGV[1] holds it with the fencing token that
-- acquisition left in KEYS[2], ARGV[2]. A later acquisition with the same
-- value mints a larger token here, so its key is left alone. The holder's
-- token is left to expire, as a release leaves it: only the key's holder
-- reads it, and the next acquisition overwrites it.
if redis.call("get", KEYS[1]) == ARGV[1] and redis.call("get", KEYS[2]) == ARGV[2] then
	return redis.call("del", KEYS[1])
end
return 0
