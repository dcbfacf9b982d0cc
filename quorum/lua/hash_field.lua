-- The owner's field ARGV[1] of the hash KEYS[1]: its count, as text, or
-- false when absent (a key of another type has none: HGET is pcalled).
local count = redis.pcall("hget", KEYS[1], ARGV[1])
if type(count) ~= "string" then
	return false
end
return count
