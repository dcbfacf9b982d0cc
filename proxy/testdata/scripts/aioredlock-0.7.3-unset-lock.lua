local identifier = redis.call('get', KEYS[1])
if not identifier then
return redis.status_reply('OK')
elseif identifier == ARGV[1] then
return redis.call("del", KEYS[1])
else
return redis.error_reply('ERROR')
end