-- The end of a hash lock that a quorum released (hashlock.go,
-- hashRelease) on a backend that still holds the owner's field ARGV[1]
-- with the count ARGV[2] it answered the release with: it had missed a
-- re-entry. The hash goes, and the engines waiting for it are told as
-- release.lua tells them (ARGV[3] is the release's id); the request's
-- latch KEYS[2], when given, records the release as hash_release.lua's
-- does, for ARGV[4] ms, so that a retry of the request answers "released"
-- here too. A count that changed since is a later acquisition's, and is
-- left alone. 1 deleted, 0 not.
local count = redis.pcall("hget", KEYS[1], ARGV[1])
if count ~= ARGV[2] then
	return 0
end
redis.call("del", KEYS[1])
notify(KEYS[1], ARGV[3] .. ARGV[1])
if KEYS[2] then
	redis.call("set", KEYS[2], "1", "px", ARGV[4])
end
return 1
