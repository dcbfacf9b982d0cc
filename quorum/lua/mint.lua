-- mint gives the lock being taken its fencing token on this backend
-- (fence.go): max(counter + 1, now), now being the proxy's clock in µs,
-- the same for every backend, as text of 19 digits (value_fenced.lua);
-- the counter becomes it. In the steady state the clock is ahead, so one
-- SET ... GET both reads the counter and raises it, the clock's own text
-- is the token, and two texts of 19 digits compare as their numbers do,
-- with nothing converted; only a counter ahead of the clock (a proxy whose
-- clock is behind another's), or one written in another width, costs a
-- conversion and a second SET. Tokens are integers below 2^53, exact in
-- Lua's doubles; "%019.0f" writes them without an exponent.
local function mint(counter, now)
	local text = now
	if #text ~= 19 then
		text = string.format("%019.0f", tonumber(now))
	end
	local before = redis.call("set", counter, text, "get")
	if before and (#before ~= 19 or before >= text) then
		local last = tonumber(before)
		if last >= tonumber(text) then
			text = string.format("%019.0f", last + 1)
			redis.call("set", counter, text)
		end
	end
	return text
end
