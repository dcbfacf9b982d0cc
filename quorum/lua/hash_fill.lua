-- A top-up of a Redisson lock granted on a bare quorum (topup.go): where
-- the hash KEYS[1] is absent, the owner's field ARGV[1] with one hold and a
-- TTL of ARGV[2] ms, the validity its lock has left. Nothing where the key
-- is there: another owner's, or a key of another type. 1 taken, 0 not.
if redis.call("exists", KEYS[1]) == 1 then
	return 0
end
redis.call("hset", KEYS[1], ARGV[1], 1)
redis.call("pexpire", KEYS[1], ARGV[2])
return 1
