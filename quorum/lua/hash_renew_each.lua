-- renew_each.lua for hash locks (Redisson's watchdog): KEYS[i] gets a TTL
-- of ARGV[1] ms while it has the owner's field ARGV[i + 1]. HEXISTS is
-- pcalled: on a key of another type it fails, which reads as "not held"
-- rather than failing the script for the whole batch. Replies one byte
-- per key, "1" renewed, "0" not.
local renewed = {}
for i, key in ipairs(KEYS) do
	if redis.pcall("hexists", key, ARGV[i + 1]) == 1 then
		redis.call("pexpire", key, ARGV[1])
		renewed[i] = "1"
	else
		renewed[i] = "0"
	end
end
return table.concat(renewed)
