-- The fencing token of the lock KEYS[1] as ARGV[1] holds it: {1, token}
-- ("" when the lock was taken without one), or {0, ""} when ARGV[1] does
-- not hold KEYS[1].
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return {0, ""}
end
return {1, redis.call("get", KEYS[2]) or ""}
