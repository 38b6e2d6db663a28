-- create_plan.lua: stores a new plan record and its status counters unless
-- the plan id is taken, in the plan's slot. The first round trip of
-- CreatePlan; the task batches follow.
--
-- KEYS[1] -> {p}plan:{planId}           plan record (HASH)
-- KEYS[2] -> {p}plan:{planId}:counts    counts (HASH)
-- ARGV[1] -> TTL in milliseconds
-- ARGV[2] -> number of tasks (the PENDING counter)
-- ARGV[3 ..] -> field, value, ... of the plan record
-- Returns 1 when created, 0 when the plan exists (nothing written).

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HSET', KEYS[2], 'PENDING', ARGV[2], 'RUNNING', '0', 'PAUSED', '0',
  'COMPLETED', '0', 'FAILED', '0', 'CANCELLED', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
