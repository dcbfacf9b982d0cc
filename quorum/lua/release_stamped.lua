-- Compare-and-delete one acquisition: the key goes only while it holds
-- ARGV[1] with the expiry that acquisition gave it (ARGV[2], ms). A retry
-- with the same token has a later expiry and is left alone (unless it came
-- within the same millisecond with the same TTL; the engine's rollback
-- barrier keeps a retry through the same proxy from starting that soon).
if redis.call("get", KEYS[1]) == ARGV[1] and redis.call("pexpiretime", KEYS[1]) == tonumber(ARGV[2]) then
	return redis.call("del", KEYS[1])
end
return 0
