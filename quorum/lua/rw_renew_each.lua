-- The read lock's watchdog (rw.lua): KEYS[i] is a lock, ARGV[2i] an owner
-- and ARGV[2i + 1] its timeout keys' prefix; ARGV[1] the lease (ms).
-- Where the owner's field is, each of its holds' timeout keys is set
-- anew with the lease (one that lapsed here is given back: a release
-- would otherwise sweep the hold away while the quorum counts it), and
-- the hash lasts at least the lease: never less, which would end another
-- reader's longer lease before the validity it was told of. Replies each
-- lock's hold count where renewed, 0 where not.
local counts = {}
local lease = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
	local owner, prefix = ARGV[2 * i], ARGV[2 * i + 1]
	local held = redis.pcall("hget", key, owner)
	local count = type(held) == "string" and tonumber(held) or 0
	if count > 0 then
		for n = 1, count do
			redis.call("set", timeoutKey(prefix, owner, n), 1, "px", lease)
		end
		if redis.call("pttl", key) < lease then
			redis.call("pexpire", key, lease)
			horizon(key)
		end
	end
	counts[i] = count
end
return counts
