-- Compare-and-pexpire for each of KEYS: KEYS[i] gets a TTL of ARGV[1] ms
-- while ARGV[i + 1] still holds it. With fencing the lock's fencing token
-- is in its value, and keeps it. A key of another type is not held; its
-- GET is pcalled, since a failed call would fail the whole script and
-- leave every lock of the batch undecided.
--
-- Replies one byte per key, in the order of KEYS: "1" renewed, "0" not;
-- with fencing, a renewed lock's is "f" and the fencing token it carries
-- (19 digits), which a top-up writes to a backend that lost the lock
-- (topup.go). The backend spends the same on it as on an array of n
-- integers (about 1 µs a key either way, measured at 100 keys), but the
-- proxy reads one string rather than n replies of four.
local renewed = {}
local last -- one TTL for the batch: the horizon is recorded once
for i, key in ipairs(KEYS) do
	local token = ARGV[i + 1]
	local value = redis.pcall("get", key)
	if type(value) == "string" and holds(value, token) then
		redis.call("pexpire", key, ARGV[1])
		last = key
		local fence = fenceOf(value, token)
		renewed[i] = fence == "" and "1" or "f" .. fence
	else
		renewed[i] = "0"
	end
end
if last then
	horizon(last)
end
return table.concat(renewed)
