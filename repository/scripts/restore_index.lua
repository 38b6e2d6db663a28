-- restore_index.lua: removes a task from its tenant's history and, if the
-- tenant's index points to it, points the index at the newest task left (or
-- deletes it). Used to roll back a plan creation that failed midway, in the
-- tenant's slot.
--
-- KEYS[1] -> {p}index:tenant:{tenantId}            tenant's current task (STRING)
-- KEYS[2] -> {p}index:tenant:{tenantId}:history    tenant's tasks (ZSET)
-- ARGV[1] -> task id
-- Returns 1 when the index was changed, else 0.

redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local newest = redis.call('ZREVRANGE', KEYS[2], 0, 0)
if #newest == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], newest[1], 'KEEPTTL')
end
return 1
