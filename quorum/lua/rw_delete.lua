-- Redisson's forceUnlock() of a read or write lock, on one backend: the
-- lock KEYS[1] goes where its mode is ARGV[1], and the engines waiting
-- for it are told (ARGV[2] is the delete's id). Its read holds' timeout
-- keys are left to expire, as Redisson leaves them. 1 deleted, 0 not.
if redis.call("type", KEYS[1])["ok"] ~= "hash" or redis.call("hget", KEYS[1], "mode") ~= ARGV[1] then
	return 0
end
gone(KEYS[1], ARGV[2], "")
return 1
