-- Take every key for ARGV[1] with TTL ARGV[2] ms, or none when any exists.
-- The number of keys taken, or 0.
for _, key in ipairs(KEYS) do
	if redis.call("exists", key) == 1 then
		return 0
	end
end
for _, key in ipairs(KEYS) do
	redis.call("set", key, ARGV[1], "px", ARGV[2])
end
horizon(KEYS[#KEYS])
return #KEYS
