-- Set the TTL of every key to ARGV[2] ms when ARGV[1] holds all of them.
-- The number of keys extended, or 0.
for _, key in ipairs(KEYS) do
	local value = redis.call("get", key)
	if not holds(value, ARGV[1]) then
		return 0
	end
end
for _, key in ipairs(KEYS) do
	redis.call("pexpire", key, ARGV[2])
end
horizon(KEYS[#KEYS])
return #KEYS
