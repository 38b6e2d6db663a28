-- push_plan_tasks.lua: appends one batch of task ids to a plan's task list
-- and their ledger entries to its counts hash, in the plan's slot. The list
-- must hold exactly the given number of entries, so a replayed batch (a
-- client retry) pushes nothing twice. The tasks also go into the plan's
-- index of PENDING tasks (see move_plan_counts.lua), scored by the plan's
-- creation in Unix microseconds plus their position in the plan (so that
-- every score is distinct and later tasks are newer).
--
-- KEYS[1] -> {p}plan:{planId}:tasks     task ids in plan order (LIST)
-- KEYS[2] -> {p}plan:{planId}:counts    counts and ledger (HASH)
-- KEYS[3] -> {p}plan:{planId}:status:PENDING   index of PENDING tasks (ZSET)
-- ARGV[1] -> length the list must have before the batch
-- ARGV[2] -> TTL in milliseconds
-- ARGV[3] -> the plan's creation in Unix microseconds
-- ARGV[4 ..] -> task id, ledger entry, task id, ledger entry, ...
-- Returns the list's length after the batch, or -1 when its length was
-- neither the expected one nor the one after the batch.

local want = tonumber(ARGV[1])
local n = (#ARGV - 3) / 2
local base = tonumber(ARGV[3])
local len = redis.call('LLEN', KEYS[1])
if len == want + n then return len end
if len ~= want then return -1 end
local ids, ledger, pending = {}, {}, {}
for i = 4, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  ledger[#ledger + 1] = 't:' .. ARGV[i]
  ledger[#ledger + 1] = ARGV[i + 1]
  pending[#pending + 1] = string.format('%d', base + want + #ids - 1)
  pending[#pending + 1] = ARGV[i]
  if #ids >= 1000 then
    redis.call('RPUSH', KEYS[1], unpack(ids))
    redis.call('HSET', KEYS[2], unpack(ledger))
    redis.call('ZADD', KEYS[3], unpack(pending))
    want = want + #ids
    ids, ledger, pending = {}, {}, {}
  end
end
if #ids > 0 then
  redis.call('RPUSH', KEYS[1], unpack(ids))
  redis.call('HSET', KEYS[2], unpack(ledger))
  redis.call('ZADD', KEYS[3], unpack(pending))
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return redis.call('LLEN', KEYS[1])
