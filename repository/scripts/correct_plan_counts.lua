-- correct_plan_counts.lua: undoes the counts update of a refused write, in the
-- plan's slot. Sent after write_task.lua refused a write whose
-- move_plan_counts.lua update had applied (both were in one pipeline). If the
-- ledger entry still carries the refused write's id, it is set to the task
-- record's state as read after the refusal, and the counters move with it;
-- otherwise a later committed write has overwritten it and nothing is done.
-- The plan's status is derived with the corrected (wrong) status -> the
-- stored one as the task's move (no move when the task is stored RUNNING
-- under the refused write's fence: see below). Prepended with
-- derive_plan.lua.
--
-- KEYS[1] -> {p}plan:{planId}:counts
-- KEYS[2] -> {p}plan:{planId}
-- KEYS[3] -> {p}plan:{planId}:tasks   (unused; same slot, kept for symmetry)
-- KEYS[4..9] -> the plan's per-status task indexes (see move_plan_counts.lua):
--               the task moves back to the index of its stored status
-- ARGV[1] -> task id
-- ARGV[2] -> write id of the refused write
-- ARGV[3] -> stored status ("" when the task record is missing)
-- ARGV[4] -> stored seq
-- ARGV[5] -> stored fence
-- ARGV[6] -> stored owner
-- ARGV[7] -> now (RFC 3339)
-- ARGV[8] -> reason of a pause by the failure threshold
-- ARGV[9] -> now in Unix microseconds (the index score)
-- ARGV[10] -> TTL in milliseconds (of an index the correction creates)
-- Returns {plan status, 1 if the entry was corrected else 0, 1 if the plan's
-- status after the correction differs from the one before the refused write
-- (when the write's own move changed it: see statusFrom) or else from the one
-- before the correction, else 0, PENDING, RUNNING,
-- PAUSED, COMPLETED, FAILED, CANCELLED}: a correction is published on the
-- event feed with the counts it left (the writer's coordinator does it, as
-- for a task write's counts move), so the counts come with the answer
-- instead of a read after it. The counts are those of the plan at the time
-- of the answer also when nothing was corrected.

local statuses = {'PENDING', 'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED'}
local function answer(status, corrected, changed)
  local out = {status, corrected, changed}
  local c = redis.call('HMGET', KEYS[1], unpack(statuses))
  for i = 1, #statuses do out[#out + 1] = tonumber(c[i]) or 0 end
  return out
end

local field = 't:' .. ARGV[1]
local e = parse_ledger(redis.call('HGET', KEYS[1], field))
if not e or e.write_id ~= ARGV[2] then
  return answer(redis.call('HGET', KEYS[2], 'status') or '', 0, 0)
end
count_task(KEYS[1], e.status, e.owner, -1)
count_task(KEYS[1], ARGV[3], ARGV[6], 1)
redis.call('HSET', KEYS[1], field,
  format_ledger(ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), '', ARGV[6], e.tenant))
index_task(status_sets(4), ARGV[1], e.status, ARGV[3], ARGV[9], ARGV[10])
-- The status to compare with: the one before the refused write when its
-- own move made the plan's last status change (statusWrite, statusFrom:
-- that change was never announced, so a correction that leaves a third
-- status, e.g. CANCELLED -> RUNNING -> FAILED, is a change), else the
-- current one (a change since was announced by its own write).
local pr = redis.call('HMGET', KEYS[2], 'status', 'statusWrite', 'statusFrom', 'reasonFrom', 'finishedAtFrom')
local before = pr[1]
if pr[1] and pr[2] == ARGV[2] and pr[3] then
  before = pr[3]
  -- That change came from the move being undone, and nobody announced it:
  -- the plan goes back to the status, reason and end it had before it (a
  -- cancelled plan that a refused start reopened stays CANCELLED, a plan
  -- that a refused failure paused by the threshold runs on), and the
  -- derivation below applies the corrected counts to that.
  if pr[1] ~= pr[3] then
    redis.call('HSET', KEYS[2], 'status', pr[3], 'reason', pr[4] or '', 'finishedAt', pr[5] or '', 'updatedAt', ARGV[7])
  end
end
-- The task's move for the derivation: refused status -> stored one, which
-- stands for a committed write whose own move lost to the refused one (a
-- re-run's reopens a finished plan). A task stored RUNNING under the
-- refused write's own fence is the run that sent it, still running: no
-- re-run happened, and the undo (e.g. of its stale failure, FAILED ->
-- RUNNING) must not reopen a plan an operator cancelled meanwhile.
local from = e.status
if ARGV[3] == 'RUNNING' and tonumber(ARGV[5]) == e.fence then from = '' end
local status = derive_plan(KEYS[1], KEYS[2], ARGV[7], ARGV[8], from, ARGV[3])
local changed = 0
if before and status ~= before then changed = 1 end
return answer(status, 1, changed)
