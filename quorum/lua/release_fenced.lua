-- Compare-and-delete one fenced acquisition (lua/acquire_fenced.lua): the
-- key goes only while ARGV[1] holds it with the fencing token ARGV[2] (19
-- digits, as the value carries it). A
-- later acquisition with the same holder's token mints a larger token
-- here, so its key is left alone.
if redis.call("get", KEYS[1]) == ARGV[1] .. "\0" .. ARGV[2] then
	return redis.call("del", KEYS[1])
end
return 0
