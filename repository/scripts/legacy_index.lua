-- legacy_index.lua: the rollback of a task's creation for the tenant index
-- STRING of storage layout 1 (written while Config.LegacyKeys asks, see
-- legacy.go), run after the history's ZREM of the task, in the tenant's
-- slot: if the index names the task, it names the tenant's newest task left
-- (the history's newest entry), or goes when none is left.
--
-- KEYS[1] -> {p}index:tenant:{tenantId}            tenant's current task (STRING)
-- KEYS[2] -> {p}index:tenant:{tenantId}:history    tenant's tasks (ZSET)
-- ARGV[1] -> task id
-- Returns 1 when the index was changed, else 0.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local newest = redis.call('ZREVRANGE', KEYS[2], 0, 0)
if #newest == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], newest[1], 'KEEPTTL')
end
return 1
