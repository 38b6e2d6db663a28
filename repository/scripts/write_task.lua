-- write_task.lua: the fenced write of a task's stage transition, in the
-- tenant's slot: record, checkpoint and timeline together, or nothing.
--
-- Checks, in order (a refusal writes nothing):
--   a. the record exists                          else "missing"
--   b. a lock value is given and the lock holds it else "lock"
--   c. the stored fence is not above the writer's  else "fence"
--   d. the stored seq is the expected one           else "seq"
--   e. the digest of the fixed fields ("?fixedSum", when sent) is the stored
--      one, else {2, 'fixed'}: the writer sends the write again with the
--      fixed fields themselves (see record.go)
--   f. a delta write (only the fields that changed, "?prevWrite" = the id of
--      the write it is relative to) finds that write's id stored, else
--      {2, 'fixed'}: the writer sends the whole write again (see delta.go).
--      Only this script writes the mutable fields, and it always sets
--      writeId: the stored id names the stored fields. (A script that wrote
--      them without setting writeId would break delta writes.)
--   g. a blind start ("?blind" = the writer's plan id, sent as the last
--      field instead of "?fixedSum": the writer knows the task only from
--      its queue entry, see redis_task.go) finds the record of that plan,
--      else "plan". Its answer carries the stored params, totalStages and
--      createdAt, which the writer did not have.
--   h. a write of the tenant's current task only ("?current" = the task id,
--      task.Write.Current: a re-run) finds that id the newest entry of the
--      tenant's history (KEYS[5]), else "current"
-- A write whose id is already stored was applied before (a client retry): it
-- succeeds again without writing.
--
-- The script runs after one of two prefixes, which define lock_held()
-- (check b), put_back() (called by every refusal after check b) and
-- take_lock() (called after checks a-f):
--   write_lock.lua  a write under a lock taken before: check b reads the
--                   lock, or deletes it with GETDEL when the write is the
--                   run's last (ARGV[7], the lease); put_back restores it
--   start_lock.lua  a task's start that takes the lock itself: check b
--                   passes, and after checks a-f the lock and the fence
--                   ARGV[2] are taken (KEYS[6], ARGV[7]: see that file) or
--                   the start is refused with {3, reason}, nothing written
--
-- TTLs: a checkpoint is SET with the TTL and a timeline this write creates
-- gets it. The record, timeline, checkpoint and the tenant's history (its
-- index) are given the TTL again only when the record's "ttlAt" (the
-- writer's clock, Unix ms, when the keys last got it; set at creation) is
-- more than min(TTL/100, 30 s) before the writer's now, or missing — read
-- with the record's other fields, so no command of its own on the writes in
-- between:
-- the keys of a task expire between TTL - 30 s and TTL after its last
-- write, as far as the instances' clocks agree (a writer whose clock is
-- behind by d refreshes d later). They were set together (at creation, or
-- by the last refresh), so ttlAt stands for all of them.
--
-- KEYS[1] -> {p}task:{tenantId}:<taskId>              task record (HASH)
-- KEYS[2] -> {p}ckpt:{tenantId}:<taskId>              checkpoint (STRING)
-- KEYS[3] -> {p}task:{tenantId}:<taskId>:timeline     timeline (LIST)
-- KEYS[4] -> {p}lock:tenant:{tenantId}                tenant lock (STRING)
-- KEYS[5] -> {p}index:tenant:{tenantId}:history       tenant's tasks (TTL refreshed)
-- ARGV[1] -> lock value the writer holds ("" = a write without the lock)
-- ARGV[2] -> writer's fencing token (stored as the record's fence)
-- ARGV[3] -> expected seq (the record gets seq + 1)
-- ARGV[4] -> write id (random per write)
-- ARGV[5] -> checkpoint JSON; "" keeps the checkpoint, "-" deletes it
-- ARGV[6] -> "1" clears the pause and cancel requests
-- ARGV[7] -> see the prefix (write_lock.lua, start_lock.lua)
-- ARGV[8] -> timeline max entries
-- ARGV[9] -> TTL in milliseconds
-- ARGV[10] -> the writer's now, Unix milliseconds
-- ARGV[11] -> n, the number of record fields that follow
-- ARGV[12 .. 11+2n] -> field, value, ... (the mutable fields, or those that
--                      changed and "?prevWrite"; the fixed ones or, as
--                      "?fixedSum", their digest, compared and not stored)
-- ARGV[12+2n ..] -> timeline entries (JSON), appended in order
-- Returns {1, seq, pauseRequested, cancelRequested} when written (0|1 flags,
-- as stored after the write; a blind start adds params, totalStages and
-- createdAt as stored, also when answered as a write applied before),
-- {0, reason, status, seq, fence, owner} (the stored state) when refused, or {2, 'fixed'} when the fixed fields are
-- needed (nothing written), or {3, reason} when a start could not take the
-- lock (start_lock.lua; nothing written).

local n = tonumber(ARGV[11]) or 0
-- A blind start (check g) reads the fixed fields too: rec[10..13].
local blind = n > 0 and ARGV[10 + 2 * n] == '?blind'
local rec
if blind then
  rec = redis.call('HMGET', KEYS[1], 'status', 'seq', 'fence', 'owner', 'writeId',
    'pauseRequested', 'cancelRequested', 'fixedSum', 'ttlAt', 'planId', 'params', 'totalStages', 'createdAt')
else
  rec = redis.call('HMGET', KEYS[1], 'status', 'seq', 'fence', 'owner', 'writeId',
    'pauseRequested', 'cancelRequested', 'fixedSum', 'ttlAt')
end
if not rec[1] then return {0, 'missing', '', 0, 0, ''} end
local seq, fence = tonumber(rec[2]) or 0, tonumber(rec[3]) or 0
local pause, cancel = tonumber(rec[6]) or 0, tonumber(rec[7]) or 0
local function written(s)
  if blind then return {1, s, pause, cancel, rec[11] or '', rec[12] or '', rec[13] or ''} end
  return {1, s, pause, cancel}
end
if rec[5] == ARGV[4] then return written(seq) end

local function refuse(reason)
  put_back()
  return {0, reason, rec[1], seq, fence, rec[4] or ''}
end
if not lock_held() then return refuse('lock') end
if fence > tonumber(ARGV[2]) then return refuse('fence') end
if seq ~= tonumber(ARGV[3]) then return refuse('seq') end

local new_seq = seq + 1
local fields = {'seq', string.format('%d', new_seq), 'fence', ARGV[2], 'writeId', ARGV[4]}
for i = 12, 11 + 2 * n, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  if f == '?fixedSum' then
    if v ~= rec[8] then put_back() return {2, 'fixed'} end
  elseif f == '?prevWrite' then
    if v ~= rec[5] then put_back() return {2, 'fixed'} end
  elseif f == '?blind' then
    if v ~= rec[10] then return refuse('plan') end
  elseif f == '?current' then
    if redis.call('ZREVRANGE', KEYS[5], 0, 0)[1] ~= v then return refuse('current') end
  else
    fields[#fields + 1] = f
    fields[#fields + 1] = v
  end
end
if ARGV[6] == '1' then
  pause, cancel = 0, 0
  fields[#fields + 1] = 'pauseRequested'
  fields[#fields + 1] = '0'
  fields[#fields + 1] = 'cancelRequested'
  fields[#fields + 1] = '0'
end
local ttl = ARGV[9]
local ttl_ms, at = tonumber(ttl), tonumber(rec[9])
local refresh = not at or tonumber(ARGV[10]) - at > math.min(math.floor(ttl_ms / 100), 30000)
if refresh then
  fields[#fields + 1] = 'ttlAt'
  fields[#fields + 1] = ARGV[10]
end
local not_taken = take_lock()
if not_taken then return not_taken end
redis.call('HSET', KEYS[1], unpack(fields))

if ARGV[5] == '-' then
  redis.call('DEL', KEYS[2])
elseif ARGV[5] ~= '' then
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ttl)
elseif refresh then
  redis.call('PEXPIRE', KEYS[2], ttl)
end

local first = 12 + 2 * n
if #ARGV >= first then
  local len = 0
  for i = first, #ARGV, 1000 do
    len = redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  local max = tonumber(ARGV[8])
  if len > max then redis.call('LTRIM', KEYS[3], -max, -1) end
  if not refresh and len == #ARGV - first + 1 then redis.call('PEXPIRE', KEYS[3], ttl) end
end

if refresh then
  for _, k in ipairs({KEYS[1], KEYS[3], KEYS[5]}) do redis.call('PEXPIRE', k, ttl) end
end
return written(new_seq)
