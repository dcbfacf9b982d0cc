-- One atomic look at a key: {value or false, pttl}, or false when absent.
-- A key of another type reads as present with no value.
local kind = redis.call("type", KEYS[1])["ok"]
if kind == "none" then
	return false
end
local value = false
if kind == "string" then
	value = redis.call("get", KEYS[1])
	value = plain(value)
end
return {value, redis.call("pttl", KEYS[1])}
