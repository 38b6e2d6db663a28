-- write_lock.lua: the prefix of write_task.lua for a write under a tenant
-- lock taken before (tenantlock/redislock's acquire_lock.lua, or a start's
-- start_lock.lua), or without one (ARGV[1] = "").
--
-- ARGV[7] -> "0": the write keeps the lock; otherwise the write is its run's
--            last and deletes the lock, and ARGV[7] is the lock's lease in
--            milliseconds
--
-- lock_held (check b): the lock holds ARGV[1]. A write that keeps the lock
-- reads it (GET); a write that deletes it GETDELs it — the check and the
-- release in one command — and puts back another value found (SET PX
-- ARGV[7], one lease: at most what its holder's next renewal gives it).
-- put_back, on a refusal after check b: the lock this write deleted is put
-- back (SET PX ARGV[7]), so a refused write leaves it held.
-- take_lock: nothing to take; nil lets the write go on.
local releases = ARGV[1] ~= '' and ARGV[7] ~= '0'
local released = false
local function lock_held()
  if ARGV[1] == '' then return true end
  if not releases then return redis.call('GET', KEYS[4]) == ARGV[1] end
  local held = redis.call('GETDEL', KEYS[4])
  if held == ARGV[1] then
    released = true
    return true
  end
  if held then redis.call('SET', KEYS[4], held, 'PX', ARGV[7]) end
  return false
end
local function put_back()
  if released then redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[7]) end
end
local function take_lock() return nil end
