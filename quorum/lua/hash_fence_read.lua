-- The fencing token of the hash lock KEYS[1] (hashlock.go) as the owner's
-- field ARGV[1] holds it, or, when ARGV[1] is "", as whichever owner holds
-- it (Redisson's getToken() asks without one): {1, token, owner}, the token
-- "" when the lock was taken without one; {0, "", ""} when the owner does
-- not hold it, or nobody does. The owner is answered so that backends
-- held by different owners are not counted as one lock, whatever tokens
-- they carry. A hash with two owners' fields, which no engine writes, has
-- no one holder: "" reads it as held without a token.
if redis.call("type", KEYS[1])["ok"] ~= "hash" then
	return {0, "", ""}
end
local owner = ARGV[1]
if owner == "" then
	owner = false
	for _, field in ipairs(redis.call("hkeys", KEYS[1])) do
		if string.byte(field) ~= 0 then
			if owner then
				return {1, "", ""}
			end
			owner = field
		end
	end
	if not owner then
		return {0, "", ""}
	end
elseif redis.call("hexists", KEYS[1], owner) == 0 then
	return {0, "", ""}
end
return {1, redis.call("hget", KEYS[1], "\0fence") or "", owner}
