-- start_lock.lua: the prefix of write_task.lua for a task's start that takes
-- the tenant lock in the same atomic step as the PENDING -> RUNNING write
-- (the lock and the fence counter are in the tenant's slot, as the task's
-- keys are).
--
-- KEYS[6] -> {p}fence:tenant:{tenantId}   the tenant's fencing counter
-- ARGV[1] -> the lock value (a fresh one: tenantlock/redislock's layout)
-- ARGV[2] -> the fence the start takes: the caller's choice (its clock in
--            Unix ms, above the task's stored fence)
-- ARGV[7] -> the lease in milliseconds
--
-- lock_held: the check is deferred to take_lock (the lock is taken, not held).
-- put_back: nothing was taken before the checks.
-- take_lock, after every check of write_task.lua passed: SET NX PX the
-- lock, then SET ... GET the counter to ARGV[2]. It answers {3, 'locked'}
-- when another value holds the lock, and {3, 'fence'} when the counter
-- is not below ARGV[2] (an acquisition in the same millisecond, a clock
-- behind another instance's) or is not a counter (put back as it was, or
-- of another type: untouched); the lock is deleted again then, so a
-- refusal writes nothing. The caller takes the lock the usual way then
-- (acquire_lock.lua), which reports the holder or the error.
local function lock_held() return true end
local function put_back() end
local function take_lock()
  if not redis.call('SET', KEYS[4], ARGV[1], 'NX', 'PX', ARGV[7]) then
    return {3, 'locked'}
  end
  local old = redis.pcall('SET', KEYS[6], ARGV[2], 'GET')
  if type(old) == 'table' and old.err then
    redis.call('DEL', KEYS[4])
    return {3, 'fence'}
  end
  if old and (not string.match(old, '^%d+$') or tonumber(old) >= tonumber(ARGV[2])) then
    redis.call('SET', KEYS[6], old)
    redis.call('DEL', KEYS[4])
    return {3, 'fence'}
  end
  return nil
end
