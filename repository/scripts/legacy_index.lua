-- legacy_index.lua: the tenant index STRING of storage layout 1 (written
-- while Config.LegacyKeys asks, see legacy.go), in the tenant's slot. Two
-- uses:
--   rollback (ARGV[1] = the task id), after the history's ZREM of a task
--     whose creation is rolled back: if the index names the task, it names
--     the tenant's newest task left (the history's newest entry), or goes
--     when none is left;
--   backfill (ARGV[1] = ""): the index names the history's newest entry,
--     with the TTL ARGV[2] (ms) — for the tasks created while the store did
--     not write it.
--
-- KEYS[1] -> {p}index:tenant:{tenantId}            tenant's current task (STRING)
-- KEYS[2] -> {p}index:tenant:{tenantId}:history    tenant's tasks (ZSET)
-- ARGV[1] -> task id, or "" to backfill
-- ARGV[2] -> TTL in milliseconds (backfill)
-- Returns 1 when the index was written or deleted, else 0.

local newest
if ARGV[1] == '' then
  newest = redis.call('ZREVRANGE', KEYS[2], 0, 0)
  if #newest == 0 or redis.call('GET', KEYS[1]) == newest[1] then return 0 end
  redis.call('SET', KEYS[1], newest[1], 'PX', ARGV[2])
  return 1
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
newest = redis.call('ZREVRANGE', KEYS[2], 0, 0)
if #newest == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], newest[1], 'KEEPTTL')
end
return 1
