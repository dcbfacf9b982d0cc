local lockClientId = redis.call('GET', KEYS[1])
if (lockClientId == ARGV[1] and redis.call('UNLINK', KEYS[1]) == 1) then
	redis.call('PUBLISH', KEYS[2], KEYS[1])
	return true
end
return false
