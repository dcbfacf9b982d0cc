-- Which of KEYS exist: one byte per key, "1" or "0", so that a listing
-- learns whether an earlier backend holds a page's keys for a few bytes.
local out = {}
for i, key in ipairs(KEYS) do
	out[i] = redis.call("exists", key) == 1 and "1" or "0"
end
return table.concat(out)
