-- Writes a backend set record over the one read: KEYS[1], the record,
-- becomes ARGV[2] if it still is ARGV[1] ("" for none), so that a write
-- made since the read (lockproxy adopt's, another proxy's) stands
-- (members.go, adopt.go). Replies 1 when it was written, else 0.
if (redis.call("GET", KEYS[1]) or "") ~= ARGV[1] then
	return 0
end
redis.call("SET", KEYS[1], ARGV[2])
return 1
