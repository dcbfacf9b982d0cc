-- The release notice (waits.go): a release tells the engines that wait for
-- its key on the key's channel, with payload (the release's id, then the
-- token released), but only where one may be listening: an engine marks
-- {lockproxy}:waiting:<key> on every backend before its waiters first try
-- the key, and {lockproxy}:listening while it watches releases by pattern
-- (Releases), and renews the marks while they last (lua/mark.lua). A
-- release that finds neither publishes nothing, so that locks nobody waits
-- for pay nothing for waiting (docs/cost.md). release.lua, which runs in
-- every lock cycle, reads the marks with its key and publishes itself.
-- A notice the backend refuses (an ACL user without the channel: NOPERM)
-- is left out, not the release: waiters then wake at the holder's expiry.
local function notify(key, payload)
	if redis.call("exists", "{lockproxy}:waiting:" .. key, "{lockproxy}:listening") > 0 then
		redis.pcall("publish", "{lockproxy}:released:" .. key, payload)
	end
end
