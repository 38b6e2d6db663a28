-- reacquire_lock.lua: KEYS[1] lock key, KEYS[2] fence key; ARGV[1] lock value, ARGV[2] lease (ms),
-- ARGV[3] the lease's fencing token => returns {code, lock value, lock PTTL (ms), fence}, the
-- value, PTTL and fence as found before the call:
-- code 1 = the lock still holds ARGV[1]: its expiry was pushed out to ARGV[2] ms;
-- code 2 = the lock was free and the fence counter is still ARGV[3] (nobody took the tenant since
--          the lease lapsed): the lock holds ARGV[1] again for ARGV[2] ms;
-- code 0 = refused (another value, or the counter moved): nothing written.
--
-- Only an acquirer moves the counter, so an unchanged counter means no other holder took a
-- token, and so wrote nothing with a newer one, while the lock was free.
local value = redis.call("GET", KEYS[1])
local fence = redis.call("GET", KEYS[2]) or "0"
if value == ARGV[1] then
  local ttl = redis.call("PTTL", KEYS[1])
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return {1, value, ttl, fence}
end
if not value then
  if fence ~= ARGV[3] then
    return {0, "", -2, fence}
  end
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  return {2, "", -2, fence}
end
return {0, value, redis.call("PTTL", KEYS[1]), fence}
