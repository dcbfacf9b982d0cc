-- One atomic look at each of KEYS, as read.lua looks at one: for each,
-- {value or false, pttl}, or false when absent. A listing page reads all
-- of its keys in one round trip per backend.
local out = {}
for i, key in ipairs(KEYS) do
	local kind = redis.call("type", key)["ok"]
	if kind == "none" then
		out[i] = false
	else
		local value = false
		if kind == "string" then
			value = redis.call("get", key)
		end
		out[i] = {value, redis.call("pttl", key)}
	end
end
return out
