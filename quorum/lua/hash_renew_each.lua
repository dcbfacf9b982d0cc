-- renew_each.lua for hash locks (Redisson's watchdog): KEYS[i] gets a TTL
-- of ARGV[1] ms while it has the owner's field ARGV[i + 1]. HMGET is
-- pcalled: on a key of another type it fails, which reads as "not held"
-- rather than failing the script for the whole batch. Replies each key's
-- hold count where it was renewed (at least 1), or {count, token} where
-- the lock carries a fencing token (the field "\0fence"), 0 where not
-- renewed: a backend that lost the lock is given it back with the count
-- and token of the quorum (topup.go).
local counts = {}
local last -- one TTL for the batch: the horizon is recorded once
for i, key in ipairs(KEYS) do
	local held = redis.pcall("hmget", key, ARGV[i + 1], "\0fence")
	if type(held) == "table" and held[1] then
		redis.call("pexpire", key, ARGV[1])
		last = key
		local count = math.max(tonumber(held[1]) or 1, 1)
		counts[i] = held[2] and {count, held[2]} or count
	else
		counts[i] = 0
	end
end
if last then
	horizon(last)
end
return counts
