-- move_plan_counts.lua: moves a task's plan counts after a status-changing
-- write or a takeover (RUNNING -> RUNNING, see doc.go), in the plan's slot
-- (sent in the same pipeline as write_task.lua). Prepended with
-- derive_plan.lua.
--
-- The update applies only if (seq, fence) is greater, in that order, than the
-- ledger entry's: every committed write has a larger seq than the one before
-- it, and a refused write ties a committed one at most on seq with a smaller
-- fence. A refused write whose update still applied is undone by
-- correct_plan_counts.lua. When it applies, the status counters move from the
-- entry's status to the new one — or, the status unchanged, RUNNING@<owner>
-- moves from the entry's owner to the new one (a takeover) — and the plan's
-- status is derived with the entry's status -> the new status as the task's
-- move. When it does not apply, nothing moves and nothing is derived.
--
-- KEYS[1] -> {p}plan:{planId}:counts
-- KEYS[2] -> {p}plan:{planId}
-- KEYS[3] -> {p}plan:{planId}:tasks   (TTL refreshed)
-- ARGV[1] -> task id
-- ARGV[2] -> new status
-- ARGV[3] -> new seq (the expected seq + 1)
-- ARGV[4] -> writer's fencing token
-- ARGV[5] -> write id (random per write)
-- ARGV[6] -> owner instance
-- ARGV[7] -> tenant id
-- ARGV[8] -> now (RFC 3339), for the plan's updatedAt/finishedAt
-- ARGV[9] -> TTL in milliseconds
-- ARGV[10] -> reason of a pause by the failure threshold
-- Returns {plan status, 1 if the update applied else 0}; plan status is ""
-- when the plan record is missing (nothing is written then). A task without
-- a ledger entry is not counted in this plan (RepairCounts restores entries):
-- nothing moves.

if redis.call('EXISTS', KEYS[2]) == 0 then return {'', 0} end
local field = 't:' .. ARGV[1]
local old = parse_ledger(redis.call('HGET', KEYS[1], field))
local seq, fence = tonumber(ARGV[3]), tonumber(ARGV[4])
local applied = 0
if old and (seq > old.seq or (seq == old.seq and fence > old.fence)) then
  if old.status ~= ARGV[2] then
    count_task(KEYS[1], old.status, old.owner, -1)
    count_task(KEYS[1], ARGV[2], ARGV[6], 1)
  elseif old.status == 'RUNNING' and old.owner ~= ARGV[6] then
    count_owner(KEYS[1], old.owner, -1)
    count_owner(KEYS[1], ARGV[6], 1)
  end
  redis.call('HSET', KEYS[1], field, format_ledger(ARGV[2], seq, fence, ARGV[5], ARGV[6], ARGV[7]))
  applied = 1
end
if applied == 0 then
  -- Nothing moved, so the plan's status has no reason to change.
  return {redis.call('HGET', KEYS[2], 'status'), 0}
end
local status = derive_plan(KEYS[1], KEYS[2], ARGV[8], ARGV[10], old.status, ARGV[2])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
return {status, 1}
