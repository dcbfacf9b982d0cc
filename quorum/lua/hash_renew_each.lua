-- renew_each.lua for hash locks (Redisson's watchdog): KEYS[i] gets a TTL
-- of ARGV[1] ms while it has the owner's field ARGV[i + 1]. HGET is
-- pcalled: on a key of another type it fails, which reads as "not held"
-- rather than failing the script for the whole batch. Replies each key's
-- hold count where it was renewed (at least 1), 0 where not: a backend
-- that lost the lock is given it back with the count of the quorum
-- (topup.go).
local counts = {}
for i, key in ipairs(KEYS) do
	local count = redis.pcall("hget", key, ARGV[i + 1])
	if type(count) == "string" then
		redis.call("pexpire", key, ARGV[1])
		counts[i] = math.max(tonumber(count) or 1, 1)
	else
		counts[i] = 0
	end
end
return counts
