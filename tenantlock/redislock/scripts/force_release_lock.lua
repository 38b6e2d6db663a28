-- force_release_lock.lua: KEYS[1] lock key, KEYS[2] fence key; ARGV[1] expected fence
-- => returns {code, lock value, lock PTTL (ms), fence}, as they were before the call:
-- code 0 = lock not held (nothing done), 1 = the fence is not ARGV[1] (nothing done),
-- 2 = the lock was deleted and the fence counter moved on by one.
--
-- The fence counter is the token of the current holder (only a lock holder takes one), so
-- comparing it tells whether the lock changed hands since the operator looked. Moving the
-- counter on after the release makes the released holder's Reacquire fail (it checks that
-- the counter is still its token), so a break-glass release cannot be undone by a holder
-- that was merely cut off from Redis.
local value = redis.call("GET", KEYS[1])
local fence = redis.call("GET", KEYS[2]) or "0"
if not value then
  return {0, "", -2, fence}
end
local ttl = redis.call("PTTL", KEYS[1])
if fence ~= ARGV[1] then
  return {1, value, ttl, fence}
end
redis.call("DEL", KEYS[1])
redis.call("INCR", KEYS[2])
return {2, value, ttl, fence}
