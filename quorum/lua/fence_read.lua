-- The fencing token of the lock KEYS[1] as ARGV[1] holds it: {1, token}
-- ("" when the lock was taken without one), or {0, ""} when ARGV[1] does
-- not hold KEYS[1].
local value = redis.call("get", KEYS[1])
if not holds(value, ARGV[1]) then
	return {0, ""}
end
return {1, fenceOf(value, ARGV[1])}
