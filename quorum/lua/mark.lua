-- Marks KEYS (waiting and listening marks, lua/notice.lua) for ARGV[1] ms:
-- while they last, the releases they cover publish their notices.
for _, key in ipairs(KEYS) do
	redis.call("set", key, "1", "px", ARGV[1])
end
return #KEYS
