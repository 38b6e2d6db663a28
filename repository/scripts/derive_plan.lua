-- derive_plan.lua: a library fragment, never run alone. It is prepended to the
-- scripts that move a plan's counts (move_plan_counts.lua,
-- correct_plan_counts.lua, repair_plan_counts.lua) and defines:
--
--   parse_ledger(s) -> {status, seq, fence, write_id, owner, tenant} | nil
--       reads a ledger entry "status|seq|fence|writeId|owner|tenant"
--   format_ledger(status, seq, fence, write_id, owner, tenant) -> string
--   count_task(counts_key, status, owner, delta) -> the status' new count
--       adds delta to the counter of status and, for RUNNING, to the
--       counter RUNNING@<owner> (count_owner); status "" counts nowhere
--       (and returns nil)
--   count_owner(counts_key, owner, delta)
--       adds delta to the counter RUNNING@<owner> (deleted when it reaches
--       0); owner "" counts nowhere
--   derive_plan(counts_key, plan_key, now, threshold_reason, task_from, task_to[, plan]) -> plan status
--       applies plan.Derive (plan/plan.go) to the plan record and its counts
--       (plan, when given, is the plan record's HMGET status, totalTasks,
--       maxFailed as the caller read it),
--       task_from -> task_to being the status move of the task whose write
--       moved the counts ('' and '' when no single task moved), and, when
--       the status changes, writes status, reason, updatedAt and finishedAt
--       as plan.Plan.Apply does and drops statusFrom, reasonFrom and
--       finishedAtFrom (no correction may put back a status from before
--       this change); "" when the plan record is missing
--   status_sets(first) -> {[status] = key} | nil
--       the plan's per-status task indexes {p}plan:{planId}:status:<S>,
--       passed as KEYS[first .. first+5] in the order PENDING, RUNNING,
--       PAUSED, COMPLETED, FAILED, CANCELLED; nil when KEYS stops before
--   index_task(sets, id, from, to, score, ttl)
--       moves task id from the index of status from to the index of status
--       to, where it gets score (Unix microseconds of the move); an index
--       created by the move gets the TTL; sets nil does nothing
--       (move_plan_counts.lua batches its moves' index changes itself)
--
-- Keep derive_plan in step with plan.Derive: TestDeriveParity compares them.

local function parse_ledger(s)
  if not s then return nil end
  local status, seq, fence, write_id, owner, tenant =
    string.match(s, '^([^|]*)|(%-?%d+)|(%-?%d+)|([^|]*)|([^|]*)|([^|]*)$')
  if not status then return nil end
  return {status = status, seq = tonumber(seq), fence = tonumber(fence),
          write_id = write_id, owner = owner, tenant = tenant}
end

local function format_ledger(status, seq, fence, write_id, owner, tenant)
  return status .. '|' .. string.format('%d', seq) .. '|' .. string.format('%d', fence) ..
    '|' .. write_id .. '|' .. owner .. '|' .. tenant
end

local function count_owner(counts_key, owner, delta)
  if owner == '' then return end
  local f = 'RUNNING@' .. owner
  if redis.call('HINCRBY', counts_key, f, delta) <= 0 then
    redis.call('HDEL', counts_key, f)
  end
end

local function count_task(counts_key, status, owner, delta)
  if status == '' then return nil end
  local n = redis.call('HINCRBY', counts_key, status, delta)
  if status == 'RUNNING' then count_owner(counts_key, owner, delta) end
  return n
end

local function derive_plan(counts_key, plan_key, now, threshold_reason, task_from, task_to, plan)
  local p = plan or redis.call('HMGET', plan_key, 'status', 'totalTasks', 'maxFailed')
  local cur = p[1]
  if not cur then return '' end
  local total = tonumber(p[2]) or 0
  local max_failed = tonumber(p[3]) or 0
  local c = redis.call('HMGET', counts_key, 'PENDING', 'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED')
  local pending, running, paused = tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0
  local completed, failed = tonumber(c[4]) or 0, tonumber(c[5]) or 0
  local finished = cur == 'COMPLETED' or cur == 'FAILED' or cur == 'CANCELLED'
  local to, reason = cur, ''
  if (cur == 'RUNNING' or cur == 'PAUSED') and pending + running + paused == 0 then
    if completed == total then
      to = 'COMPLETED'
    else
      to = 'FAILED'
      reason = string.format('%d of %d tasks did not complete', total - completed, total)
    end
  elseif finished and (task_to == 'RUNNING' or task_to == 'PENDING') and task_from ~= 'PENDING' and task_from ~= '' then
    -- A manual re-run (retry, resume, takeover; or one queued again, back
    -- to PENDING) reopens a finished plan; a task it was already running,
    -- or one started from PENDING, does not.
    to = 'RUNNING'
  elseif cur == 'RUNNING' and max_failed > 0 and task_to == 'FAILED' and task_from ~= 'FAILED'
      and failed > max_failed then
    -- Only a new failure pauses: a plan resumed over the threshold runs on.
    to = 'PAUSED'
    reason = threshold_reason
  end
  if to ~= cur then
    local finished_at = ''
    if to == 'COMPLETED' or to == 'FAILED' or to == 'CANCELLED' then finished_at = now end
    redis.call('HSET', plan_key, 'status', to, 'reason', reason, 'updatedAt', now, 'finishedAt', finished_at)
    -- A status no refused write can take back now: a correction puts back
    -- statusFrom only while the status is still the one its move set. (A
    -- move that made this change records its own right after.)
    redis.call('HDEL', plan_key, 'statusFrom', 'reasonFrom', 'finishedAtFrom')
  end
  return to
end

local index_statuses = {'PENDING', 'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED'}

local function status_sets(first)
  if #KEYS < first + 5 then return nil end
  local sets = {}
  for i, st in ipairs(index_statuses) do sets[st] = KEYS[first + i - 1] end
  return sets
end

local function index_task(sets, id, from, to, score, ttl)
  if not sets then return end
  if from ~= to and sets[from] then redis.call('ZREM', sets[from], id) end
  local k = sets[to]
  if not k then return end
  redis.call('ZADD', k, score, id)
  if redis.call('PTTL', k) < 0 then redis.call('PEXPIRE', k, ttl) end
end
