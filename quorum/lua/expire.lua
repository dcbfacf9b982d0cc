-- EXPIRE and PEXPIRE by anyone (an administrative TTL, write.go): KEYS[1]
-- gets a TTL of ARGV[1] ms where it exists, recorded in the horizon as any
-- lease is; run after the set check, so an old epoch's proxy cannot
-- lengthen a lease behind the epoch wait's back. Replies 1 where set, 0
-- where the key is absent, as PEXPIRE does.
if redis.call("pexpire", KEYS[1], ARGV[1]) == 1 then
	horizon(KEYS[1])
	return 1
end
return 0
