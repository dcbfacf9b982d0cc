-- Compare-and-delete each key, telling the engines waiting for it
-- (waits.go) as release.lua does (ARGV[2] is the release's id): the number
-- of keys ARGV[1] held and lost.
local deleted = 0
for _, key in ipairs(KEYS) do
	local value = redis.call("get", key)
	if holds(value, ARGV[1]) then
		deleted = deleted + redis.call("del", key)
		notify(key, ARGV[2] .. ARGV[1])
	end
end
return deleted
