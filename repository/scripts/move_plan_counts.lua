-- move_plan_counts.lua: moves a task's plan counts after a status-changing
-- write or a takeover (RUNNING -> RUNNING, see doc.go), in the plan's slot
-- (sent in the same pipeline as write_task.lua). Prepended with
-- derive_plan.lua. Several tasks' moves of one plan may come in one call
-- (writes sharing a pipeline): they are applied in order, each as if the
-- script ran for it alone.
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
-- A move to an active status (PENDING, RUNNING, PAUSED) whose counter is
-- now at least 1 cannot change the plan's status under plan.Derive's rule,
-- unless it re-runs a task of a finished plan: a plan finishes only with no
-- active task, and only a new failure pauses it. Such a move (every task
-- start) skips the derivation and answers the stored status. So does a
-- move out of an active status whose counter is still at least 1 after it,
-- to a status that is neither active nor FAILED with a failure threshold
-- set (every task's finish but the plan's last ones). An applied update
-- gives the plan's keys the TTL again, and the plan record's "ttlAt" the
-- writer's now (ARGV[11] in ms), when that ttlAt (set at creation, read
-- with the record's other fields: no command of its own) is more than
-- min(TTL/100, 30 s) before now or missing — as write_task.lua does for a
-- task's keys — and when the plan's status changed.
--
-- An applied move also moves the task between the plan's per-status task
-- indexes (KEYS[4..9], ZSETs scored by the Unix microseconds of the move,
-- ARGV[11]): the cross-plan search reads them (search_plan_tasks.lua). A
-- RUNNING -> RUNNING move (a takeover) scores the task again: the score of
-- a RUNNING task is when its current run started.
--
-- KEYS[1] -> {p}plan:{planId}:counts
-- KEYS[2] -> {p}plan:{planId}
-- KEYS[3] -> {p}plan:{planId}:tasks   (TTL refreshed)
-- KEYS[4..9] -> {p}plan:{planId}:status:<S> for S = PENDING, RUNNING,
--               PAUSED, COMPLETED, FAILED, CANCELLED (TTL refreshed)
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
-- ARGV[11] -> now in Unix microseconds: the index score of every move
-- ARGV[12 ..] -> more moves, 7 arguments each as ARGV[1..7]
-- Returns {plan status, 1 if the update applied else 0 (2: applied, and it
-- changed the plan's status — or a write sent again whose first sending
-- did: the plan record's "statusWrite" is its write id)}, and as many more
-- pairs as moves; plan status is "" when the plan record is missing (nothing
-- is written then). A task without a ledger entry is not counted in this
-- plan (RepairCounts restores entries): nothing moves.

local p = redis.call('HMGET', KEYS[2], 'status', 'totalTasks', 'maxFailed', 'ttlAt', 'statusWrite')
local moves = 1 + (#ARGV - 11) / 7
local sets, score = status_sets(4), ARGV[11]
local out = {}
if not p[1] then
  for i = 1, moves do out[#out + 1] = ''; out[#out + 1] = 0 end
  return out
end

-- The moves of one call are applied to a copy of what they touch in the
-- counts hash — their ledger entries and counters, read with one HMGET
-- each — and written back with one HSET (and one ZREM and ZADD per status
-- index) at the end, and before a derivation, which reads the counters.
-- Each move sees the state the moves before it left, as if run alone.
local function base_of(i)
  if i == 1 then return 0 end
  return 11 + 7 * (i - 2)
end

local function hmget(key, fields)
  local vals = {}
  for i = 1, #fields, 1000 do
    local got = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #got do vals[#vals + 1] = got[j] end
  end
  return vals
end

-- ledger: a move's field ("t:<task id>") -> its entry, parsed once (false:
-- none or unreadable); moves replace it and flush_counts formats it again.
-- fields[i] is the field of the i-th move.
local ledger, dirty, fields = {}, {}, {}
do
  for i = 1, moves do fields[i] = 't:' .. ARGV[base_of(i) + 1] end
  local got = hmget(KEYS[1], fields)
  for i = 1, moves do
    local f = fields[i]
    if ledger[f] == nil then ledger[f] = parse_ledger(got[i]) or false end
  end
end

-- counters: status counters and RUNNING@<owner>, as the moves need them
local counters = {}
do
  local want, seen = {}, {}
  local function need(f)
    if f ~= '' and not seen[f] then seen[f] = true; want[#want + 1] = f end
  end
  for i = 1, moves do
    local b = base_of(i)
    local old = ledger[fields[i]]
    need(ARGV[b + 2])
    if ARGV[b + 6] ~= '' then need('RUNNING@' .. ARGV[b + 6]) end
    if old then
      need(old.status)
      if old.owner ~= '' then need('RUNNING@' .. old.owner) end
    end
  end
  local got = hmget(KEYS[1], want)
  for i, f in ipairs(want) do counters[f] = tonumber(got[i]) or 0 end
end

-- An owner's counter is deleted when it reaches 0 (count_owner).
local owner_field = {}
local function bump_owner(owner, delta)
  if owner == '' then return end
  local f = 'RUNNING@' .. owner
  local v = counters[f] + delta
  if v < 0 then v = 0 end
  counters[f], dirty[f], owner_field[f] = v, true, true
end
local function bump(status, owner, delta)
  if status == '' then return nil end
  local v = counters[status] + delta
  counters[status], dirty[status] = v, true
  if status == 'RUNNING' then bump_owner(owner, delta) end
  return v
end

local function flush_counts()
  local hset, hdel = {}, {}
  for f in pairs(dirty) do
    local v = counters[f]
    if v == nil then
      local e = ledger[f]
      v = format_ledger(e.status, e.seq, e.fence, e.write_id, e.owner, e.tenant)
    end
    if owner_field[f] and v == 0 then
      hdel[#hdel + 1] = f
    else
      hset[#hset + 1] = f
      hset[#hset + 1] = v
    end
  end
  for i = 1, #hset, 1000 do redis.call('HSET', KEYS[1], unpack(hset, i, math.min(i + 999, #hset))) end
  for i = 1, #hdel, 1000 do redis.call('HDEL', KEYS[1], unpack(hdel, i, math.min(i + 999, #hdel))) end
  dirty = {}
end

-- index: per status index, task id -> score (added) or false (removed);
-- the last move of a task in this call decides
local index, fresh = {}, {}
local function index_move(id, from, to, count)
  if not sets then return end
  if from ~= to and sets[from] then
    index[sets[from]] = index[sets[from]] or {}
    index[sets[from]][id] = false
  end
  local k = sets[to]
  if not k then return end
  index[k] = index[k] or {}
  index[k][id] = score
  -- More than one task counted in to: the index held tasks before, so it
  -- has its TTL (not looked at; a plan's keys get the TTL again whenever
  -- its status changes, below).
  if count == nil or count <= 1 then fresh[k] = true end
end

local function flush_index()
  for k, ids in pairs(index) do
    local rem, add = {}, {}
    for id, v in pairs(ids) do
      if v then
        add[#add + 1] = v
        add[#add + 1] = id
      else
        rem[#rem + 1] = id
      end
    end
    for i = 1, #rem, 1000 do redis.call('ZREM', k, unpack(rem, i, math.min(i + 999, #rem))) end
    for i = 1, #add, 1000 do redis.call('ZADD', k, unpack(add, i, math.min(i + 999, #add))) end
    if #add > 0 and fresh[k] and redis.call('PTTL', k) < 0 then redis.call('PEXPIRE', k, ARGV[9]) end
  end
end

-- move applies one task's move (its 7 arguments from ARGV[base+1]) and
-- returns the plan status and 1 if it applied — 2 when it applied and the
-- derivation changed the plan's status (finished, reopened, or paused by
-- the failure threshold): exactly one move sees each such change.
local function move(base, field)
  local cur = p[1]
  local id, new, owner, tenant = ARGV[base + 1], ARGV[base + 2], ARGV[base + 6], ARGV[base + 7]
  local old = ledger[field]
  local seq, fence = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  if not (old and (seq > old.seq or (seq == old.seq and fence > old.fence))) then
    -- Nothing moved, so the plan's status has no reason to change. A write
    -- sent again after its answer was lost finds its own ledger entry: if
    -- its first sending changed the plan's status, it says so again (2),
    -- since nobody saw the first answer.
    if old and old.write_id == ARGV[base + 5] and p[5] == ARGV[base + 5] then return cur, 2 end
    return cur, 0
  end
  local count, left
  if old.status ~= new then
    left = bump(old.status, old.owner, -1)
    count = bump(new, owner, 1)
  elseif old.status == 'RUNNING' and old.owner ~= owner then
    bump_owner(old.owner, -1)
    bump_owner(owner, 1)
  end
  ledger[field], dirty[field] = {status = new, seq = seq, fence = fence, write_id = ARGV[base + 5], owner = owner, tenant = tenant}, true
  index_move(id, old.status, new, count)
  local active = new == 'PENDING' or new == 'RUNNING' or new == 'PAUSED'
  local was_active = old.status == 'PENDING' or old.status == 'RUNNING' or old.status == 'PAUSED'
  local finished = cur == 'COMPLETED' or cur == 'FAILED' or cur == 'CANCELLED'
  local failing = new == 'FAILED' and (tonumber(p[3]) or 0) > 0
  if active and count and count >= 1 and not (finished and (new == 'RUNNING' or new == 'PENDING') and old.status ~= 'PENDING') then
    return p[1], 1
  end
  if not active and not failing and was_active and left and left >= 1 then
    -- A task left an active status others are still in (every task's
    -- finish but the plan's last ones): the plan cannot finish, and only
    -- a failure pauses it, so its status stays.
    return p[1], 1
  end
  flush_counts()
  local was = redis.call('HMGET', KEYS[2], 'reason', 'finishedAt')
  p[1] = derive_plan(KEYS[1], KEYS[2], ARGV[8], ARGV[10], old.status, new, p)
  if p[1] ~= cur then
    -- The write that changed it, for a replay of that write (above), and
    -- the status, reason and end it changed: should the write be refused,
    -- its correction (correct_plan_counts.lua) puts them back — nobody
    -- announced the change — before it applies the corrected counts.
    p[5] = ARGV[base + 5]
    redis.call('HSET', KEYS[2], 'statusWrite', p[5], 'statusFrom', cur, 'reasonFrom', was[1] or '', 'finishedAtFrom', was[2] or '')
    return p[1], 2
  end
  return p[1], 1
end

local applied, before = false, p[1]
for i = 1, moves do
  local status, ok = move(base_of(i), fields[i])
  out[#out + 1] = status
  out[#out + 1] = ok
  applied = applied or ok >= 1
end
flush_counts()
flush_index()
local ttl = tonumber(ARGV[9])
local now_ms, at = math.floor(tonumber(ARGV[11]) / 1000), tonumber(p[4])
if applied and (p[1] ~= before or not at or now_ms - at > math.min(math.floor(ttl / 100), 30000)) then
  for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
  redis.call('HSET', KEYS[2], 'ttlAt', string.format('%d', now_ms))
end
return out
