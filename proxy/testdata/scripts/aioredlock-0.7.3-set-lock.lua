local identifier = redis.call('get', KEYS[1])
if not identifier or identifier == ARGV[1] then
return redis.call("set", KEYS[1], ARGV[1], 'PX', ARGV[2])
else
return redis.error_reply('ERROR')
end