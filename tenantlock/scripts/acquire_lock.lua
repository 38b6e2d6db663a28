-- acquire_lock.lua: KEYS[1] lock key, KEYS[2] fence key; ARGV[1] lock value, ARGV[2] lease (ms),
-- ARGV[3] fence floor (unix ms) => returns the new fencing token (> 0) when the lock was free and
-- now holds ARGV[1] for ARGV[2] ms, else 0 (nothing written).
--
-- The token is taken only by the caller that gets the lock, in the same atomic step. The fence
-- counter never expires; the floor keeps tokens above every earlier one even when the counter was
-- lost (evicted, or Redis restarted from an old snapshot). Every check runs before the first write.
local current = redis.call("GET", KEYS[2])
if current and not string.match(current, "^%d+$") then
  return redis.error_reply("ERR tenantlock: fence counter " .. KEYS[2] .. " is not an integer")
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 0
end
local n = redis.call("INCR", KEYS[2])
local floor = tonumber(ARGV[3])
if n < floor then
  redis.call("SET", KEYS[2], ARGV[3])
  n = floor
end
return n
