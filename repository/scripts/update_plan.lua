-- update_plan.lua: compare-and-set of a plan's status, in the plan's slot.
--
-- KEYS[1] -> {p}plan:{planId}           plan record (HASH)
-- KEYS[2] -> {p}plan:{planId}:tasks     (TTL refreshed)
-- KEYS[3] -> {p}plan:{planId}:counts    (TTL refreshed)
-- ARGV[1] -> TTL in milliseconds
-- ARGV[2] -> n, the number of statuses the stored one may be (0 = any)
-- ARGV[3 .. 2+n] -> those statuses
-- ARGV[3+n ..] -> field, value, ... to write
-- Returns {1} when written, {0, stored status} when the stored status is not
-- one of the given ones, {-1} when the plan is missing.

local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return {-1} end
local n = tonumber(ARGV[2])
if n > 0 then
  local ok = false
  for i = 3, 2 + n do
    if ARGV[i] == cur then ok = true end
  end
  if not ok then return {0, cur} end
end
local fields, sets_status = {}, false
for i = 3 + n, #ARGV do
  fields[#fields + 1] = ARGV[i]
  if ARGV[i] == 'status' and (i - 3 - n) % 2 == 0 then sets_status = true end
end
redis.call('HSET', KEYS[1], unpack(fields))
if sets_status then
  -- The plan's status is now this writer's (an operator's pause, resume or
  -- cancel): a refused write's correction must not put back the status a
  -- move changed before it (see correct_plan_counts.lua), which would undo
  -- this one. statusWrite stays: a replay of that write still says its
  -- first sending changed the status.
  redis.call('HDEL', KEYS[1], 'statusFrom', 'reasonFrom', 'finishedAtFrom')
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return {1}
