-- Marks the change of the backend set over on this member: KEYS[1], the
-- set record, becomes ARGV[2] if it still is ARGV[1] (members.go,
-- membership.settle). Replies 1 when it was rewritten, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("SET", KEYS[1], ARGV[2])
	return 1
end
return 0
