-- One atomic look at each of KEYS, as read.lua looks at one: for each,
-- {value or false, pttl}, or false when absent. A key of another type has
-- no value. A listing page reads all of its keys in one round trip per
-- backend; two calls per key, not read.lua's three, as pages are large.
local out = {}
for i, key in ipairs(KEYS) do
	local pttl = redis.call("pttl", key)
	if pttl == -2 then
		out[i] = false
	else
		local value = redis.pcall("get", key)
		if type(value) ~= "string" then
			value = false -- WRONGTYPE: not a string
		end
		out[i] = {plain(value), pttl}
	end
end
return out
