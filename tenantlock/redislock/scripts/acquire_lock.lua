-- acquire_lock.lua: KEYS[1] lock key, KEYS[2] fence key; ARGV[1] lock value, ARGV[2] lease (ms),
-- ARGV[3] fence floor (unix ms) => returns the new fencing token (> 0) when the lock was free and
-- now holds ARGV[1] for ARGV[2] ms; 0 when another value holds it (nothing written); the token
-- again, the lock's TTL set to ARGV[2] ms again, when the lock already holds ARGV[1] (see below),
-- or -1 if the counter is gone then.
--
-- The token is taken only by the caller that gets the lock, in the same atomic step. The fence
-- counter never expires; the floor keeps tokens above every earlier one even when the counter was
-- lost (evicted, or Redis restarted from an old snapshot). Every check runs before the first write.
--
-- Every acquisition's value is unique (a random nonce), so a lock already holding ARGV[1] was taken
-- by an earlier run of this same call, retried by the client after its answer was lost. Nobody else
-- moved the counter since (only an acquirer or a force-release, which deletes the lock, does), so
-- it is still that run's token: answering it keeps the call idempotent, and 0 always means "held by
-- someone else, nothing written" (the caller skips the release then).
local current = redis.call("GET", KEYS[2])
if current and not string.match(current, "^%d+$") then
  return redis.error_reply("ERR tenantlock: fence counter " .. KEYS[2] .. " is not an integer")
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  if redis.call("GET", KEYS[1]) == ARGV[1] then
    if current then
      -- The caller counts its lease from this call's start: give the key a
      -- whole lease again, or it would end before the caller thinks.
      redis.call("PEXPIRE", KEYS[1], ARGV[2])
      return tonumber(current)
    end
    return -1
  end
  return 0
end
local floor = tonumber(ARGV[3])
if not current and floor >= 1 then
  -- A new counter starts at the floor (what INCR to 1 and raising it to
  -- the floor would leave, in one command).
  redis.call("SET", KEYS[2], ARGV[3])
  return floor
end
local n = redis.call("INCR", KEYS[2])
if n < floor then
  redis.call("SET", KEYS[2], ARGV[3])
  n = floor
end
return n
