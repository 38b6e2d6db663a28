-- repair_plan_counts.lua: rewrites a plan's counts hash from a recount of its
-- task records, in the plan's slot. Prepended with derive_plan.lua.
--
-- The recount was read before this script runs, so a ledger entry newer than
-- the recounted one (greater (seq, fence)) is kept when it changed since it
-- was read before the recount: a write landed meanwhile. One that was
-- already there, with its record still behind when read again after a
-- pause (RepairCounts), is the move of a write Redis refused, whose writer
-- did not correct it (it died, or its shutdown was cut short): the recount
-- wins.
-- Every counter is then recomputed from the merged ledger, and the plan's
-- status derived with no task move (a recount neither reopens a finished plan
-- nor pauses one on its failure threshold).
--
-- KEYS[1] -> {p}plan:{planId}:counts
-- KEYS[2] -> {p}plan:{planId}
-- KEYS[3] -> {p}plan:{planId}:tasks   (TTL refreshed)
-- ARGV[1] -> now (RFC 3339)
-- ARGV[2] -> TTL in milliseconds
-- ARGV[3] -> reason of a pause by the failure threshold
-- ARGV[4 ..] -> task id, recounted ledger entry, the entry as read before
--               the recount ("" for none), task id, ...
-- Returns {plan status, PENDING, RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED,
-- 1 if this repair's derivation changed the plan's status else 0}.

if redis.call('EXISTS', KEYS[2]) == 0 then return {''} end
local ids, entries = {}, {}
for i = 4, #ARGV, 3 do
  local id, entry, before = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local new = parse_ledger(entry)
  local raw = redis.call('HGET', KEYS[1], 't:' .. id)
  local cur = parse_ledger(raw)
  if raw ~= before and cur and new and (cur.seq > new.seq or (cur.seq == new.seq and cur.fence > new.fence)) then
    entry = raw
  end
  ids[#ids + 1] = id
  entries[#entries + 1] = entry
end
redis.call('DEL', KEYS[1])
local statuses = {'PENDING', 'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED'}
local counts = {}
for _, s in ipairs(statuses) do counts[s] = 0 end
local owners = {}
local batch = {}
for i, id in ipairs(ids) do
  local e = parse_ledger(entries[i])
  if e and counts[e.status] then
    counts[e.status] = counts[e.status] + 1
    if e.status == 'RUNNING' and e.owner ~= '' then
      owners[e.owner] = (owners[e.owner] or 0) + 1
    end
  end
  batch[#batch + 1] = 't:' .. id
  batch[#batch + 1] = entries[i]
  if #batch >= 1000 then
    redis.call('HSET', KEYS[1], unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('HSET', KEYS[1], unpack(batch)) end
local fields = {}
for _, s in ipairs(statuses) do
  fields[#fields + 1] = s
  fields[#fields + 1] = counts[s]
end
for owner, n in pairs(owners) do
  fields[#fields + 1] = 'RUNNING@' .. owner
  fields[#fields + 1] = n
end
redis.call('HSET', KEYS[1], unpack(fields))
local before = redis.call('HGET', KEYS[2], 'status')
local status = derive_plan(KEYS[1], KEYS[2], ARGV[1], ARGV[3], '', '')
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
local out = {status}
for _, s in ipairs(statuses) do out[#out + 1] = counts[s] end
if status ~= before then out[#out + 1] = 1 else out[#out + 1] = 0 end
return out
