-- push_plan_tasks.lua: appends one batch of task ids to a plan's task list
-- and their ledger entries to its counts hash, in the plan's slot. The list
-- must hold exactly the given number of entries, so a replayed batch (a
-- client retry) pushes nothing twice.
--
-- KEYS[1] -> {p}plan:{planId}:tasks     task ids in plan order (LIST)
-- KEYS[2] -> {p}plan:{planId}:counts    counts and ledger (HASH)
-- ARGV[1] -> length the list must have before the batch
-- ARGV[2] -> TTL in milliseconds
-- ARGV[3 ..] -> task id, ledger entry, task id, ledger entry, ...
-- Returns the list's length after the batch, or -1 when its length was
-- neither the expected one nor the one after the batch.

local want = tonumber(ARGV[1])
local n = (#ARGV - 2) / 2
local len = redis.call('LLEN', KEYS[1])
if len == want + n then return len end
if len ~= want then return -1 end
local ids, ledger = {}, {}
for i = 3, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  ledger[#ledger + 1] = 't:' .. ARGV[i]
  ledger[#ledger + 1] = ARGV[i + 1]
  if #ids >= 1000 then
    redis.call('RPUSH', KEYS[1], unpack(ids))
    redis.call('HSET', KEYS[2], unpack(ledger))
    ids, ledger = {}, {}
  end
end
if #ids > 0 then
  redis.call('RPUSH', KEYS[1], unpack(ids))
  redis.call('HSET', KEYS[2], unpack(ledger))
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('LLEN', KEYS[1])
