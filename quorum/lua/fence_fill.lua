-- A top-up of a fenced lock (topup.go): where KEYS[1] is free, the holder
-- ARGV[1] takes it with the lock's fencing token ARGV[3] (19 digits) in its
-- value and a TTL of ARGV[2] ms, the validity the lock has left; and this
-- backend's counter KEYS[2] is raised to the token if below it, so that a
-- later acquisition here, once the copy is gone, mints more (fence.go).
-- Nothing where the key is taken, by anyone. 1 done, 0 not.
if not redis.call("set", KEYS[1], ARGV[1] .. "\0" .. ARGV[3], "nx", "px", ARGV[2]) then
	return 0
end
horizon(KEYS[1])
if tonumber(redis.call("get", KEYS[2]) or "0") < tonumber(ARGV[3]) then
	redis.call("set", KEYS[2], ARGV[3])
end
return 1
