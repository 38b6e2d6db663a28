-- reindex_plan.lua: rebuilds a plan's per-status task indexes from its
-- ledger, in the plan's slot (RepairCounts, after the recount; also the
-- way to index a plan created before the indexes existed). The time a
-- task entered its status is not in the ledger: every task gets the
-- repair's time, but a RUNNING one 0 (its run may have started long ago:
-- the search must not skip it as too recent for runningLongerThan).
--
-- KEYS[1] -> {p}plan:{planId}:counts        counts and ledger (HASH)
-- KEYS[2..7] -> {p}plan:{planId}:status:<S> for S = PENDING, RUNNING,
--               PAUSED, COMPLETED, FAILED, CANCELLED
-- ARGV[1] -> now in Unix microseconds
-- ARGV[2] -> TTL in milliseconds
-- Returns the number of tasks indexed per status, in the order of KEYS[2..7].

local statuses = {'PENDING', 'RUNNING', 'PAUSED', 'COMPLETED', 'FAILED', 'CANCELLED'}
local sets, batch, n = {}, {}, {}
for i, s in ipairs(statuses) do
  sets[s] = KEYS[1 + i]
  batch[s] = {}
  n[s] = 0
  redis.call('DEL', KEYS[1 + i])
end
local function flush(s)
  if #batch[s] > 0 then
    redis.call('ZADD', sets[s], unpack(batch[s]))
    batch[s] = {}
  end
end
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  local f = h[i]
  if string.sub(f, 1, 2) == 't:' then
    local s = string.match(h[i + 1], '^([^|]*)|')
    if s and sets[s] then
      local b = batch[s]
      if s == 'RUNNING' then b[#b + 1] = '0' else b[#b + 1] = ARGV[1] end
      b[#b + 1] = string.sub(f, 3)
      n[s] = n[s] + 1
      if #b >= 1000 then flush(s) end
    end
  end
end
local out = {}
for i, s in ipairs(statuses) do
  flush(s)
  if n[s] > 0 then redis.call('PEXPIRE', KEYS[1 + i], ARGV[2]) end
  out[#out + 1] = n[s]
end
return out
