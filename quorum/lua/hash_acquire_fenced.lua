-- hash_acquire.lua minting the lock's fencing token (mint.lua): KEYS[2] is
-- this backend's fencing counter, ARGV[4] the proxy's clock in µs as 19
-- digits (fence.go). The token is kept in the hash's field "\0fence", so
-- that it goes and expires with the lock, as a string lock's goes with
-- its value; no owner's field starts with a NUL byte.
--
-- A first hold (the hash was free here) mints. A re-entry answers the
-- token the lock already has here: the owner still holds the grant that
-- token fenced, so no other holder came between, and the owner's code
-- keeps one token for the whole nested hold. Only a lock taken before
-- fencing was on, without one, gets one minted.
--
-- Replies {1, the count, the token as the counter's text} when counted,
-- {0, the key's PTTL} when not (hash_acquire.lua's refusal).
local kind = redis.call("type", KEYS[1])["ok"]
if kind == "none" or (kind == "hash" and redis.call("hexists", KEYS[1], ARGV[1]) == 1) then
	local count = redis.call("hincrby", KEYS[1], ARGV[1], 1)
	redis.call("hset", KEYS[1], "\0attempt:" .. ARGV[1], ARGV[3])
	redis.call("pexpire", KEYS[1], ARGV[2])
	horizon(KEYS[1])
	local text = count > 1 and redis.call("hget", KEYS[1], "\0fence")
	if not text then
		text = mint(KEYS[2], ARGV[4])
		redis.call("hset", KEYS[1], "\0fence", text)
	end
	return {1, count, text}
end
return {0, redis.call("pttl", KEYS[1])}
