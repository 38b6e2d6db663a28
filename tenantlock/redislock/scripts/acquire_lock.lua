-- acquire_lock.lua: KEYS[1] lock key, KEYS[2] fence key; ARGV[1] lock value, ARGV[2] lease (ms),
-- ARGV[3] fence floor (unix ms) => returns the new fencing token (> 0) when the lock was free and
-- now holds ARGV[1] for ARGV[2] ms; 0 when another value holds it (nothing written); the token
-- again, the lock's TTL set to ARGV[2] ms again, when the lock already holds ARGV[1] (see below),
-- or -1 if the counter is gone then.
--
-- The token is taken only by the caller that gets the lock, in the same atomic step. The fence
-- counter never expires; the floor keeps tokens above every earlier one even when the counter was
-- lost (evicted, or Redis restarted from an old snapshot). A corrupt counter (not a string of
-- digits, or 2^53 or more, beyond what a Lua number counts exactly) is put back and the lock
-- released before the error (a fence key of another type is not overwritten: SET ... GET refuses
-- it first), so an error leaves the counter's value as it was and the lock free.
--
-- Every acquisition's value is unique (a random nonce), so a lock already holding ARGV[1] was taken
-- by an earlier run of this same call, retried by the client after its answer was lost. Nobody else
-- moved the counter since (only an acquirer or a force-release, which deletes the lock, does), so
-- it is still that run's token: answering it keeps the call idempotent, and 0 always means "held by
-- someone else, nothing written" (the caller skips the release then).
--
-- Cost: SET NX PX, then SET ... GET (Redis >= 6.2), which writes the floor and reads the old counter
-- in one command; a third command only when the old counter is not below the floor (two
-- acquisitions in one millisecond, or a clock stepped back).
local function corrupt()
  return redis.error_reply("ERR tenantlock: fence counter " .. KEYS[2] .. " is not an integer")
end
-- n when s is a counter (digits, below 2^53), else nil.
local function counter(s)
  if not string.match(s, "^%d+$") then
    return nil
  end
  local n = tonumber(s)
  if n >= 2^53 then
    return nil
  end
  return n
end

if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  if redis.call("GET", KEYS[1]) == ARGV[1] then
    local current = redis.call("GET", KEYS[2])
    if not current then
      return -1
    end
    local n = counter(current)
    if not n then
      return corrupt()
    end
    -- The caller counts its lease from this call's start: give the key a
    -- whole lease again, or it would end before the caller thinks.
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    return n
  end
  return 0
end
local floor = tonumber(ARGV[3])
local old = redis.pcall("SET", KEYS[2], ARGV[3], "GET")
if type(old) == "table" and old.err then
  -- WRONGTYPE: nothing was set.
  redis.call("DEL", KEYS[1])
  return old
end
if not old then
  if floor >= 1 then
    -- A new counter starts at the floor (what INCR to 1 and raising it to
    -- the floor would leave).
    return floor
  end
  redis.call("SET", KEYS[2], "1")
  return 1
end
local n = counter(old)
if not n then
  redis.call("SET", KEYS[2], old)
  redis.call("DEL", KEYS[1])
  return corrupt()
end
if n < floor then
  -- The counter holds the floor already.
  return floor
end
-- Not below the floor (two acquisitions in one millisecond, a clock stepped
-- back, or a floor below 1): one above the old value, as INCR would give.
n = n + 1
redis.call("SET", KEYS[2], string.format("%d", n))
return n
