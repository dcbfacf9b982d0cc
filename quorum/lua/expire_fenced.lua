-- PEXPIRE KEYS[1] ARGV[1], whoever holds it, and the fencing token of its
-- holder KEYS[2] with it, so that the token lives as long as the lock.
-- 1 where the key exists, else 0.
local done = redis.call("pexpire", KEYS[1], ARGV[1])
if done == 1 then
	redis.call("pexpire", KEYS[2], ARGV[1])
end
return done
