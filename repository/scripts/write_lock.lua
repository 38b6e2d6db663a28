-- write_lock.lua: the prefix of write_task.lua for a write under a tenant
-- lock taken before (tenantlock/redislock's acquire_lock.lua), or without
-- one (ARGV[1] = "").
--
-- lock_held: the lock holds the writer's value ARGV[1] (or none is given).
-- take_lock: nothing to take; nil lets the write go on.
-- release_lock: ARGV[7] = "1" with a value: the lock is deleted after the
-- write (its value matched: lock_held ran before).
local function lock_held()
  return ARGV[1] == '' or redis.call('GET', KEYS[4]) == ARGV[1]
end
local function take_lock() return nil end
local function release_lock() return ARGV[7] == '1' and ARGV[1] ~= '' end
