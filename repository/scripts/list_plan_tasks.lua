-- list_plan_tasks.lua: one page of a plan's tasks in plan order, optionally
-- of one status, in the plan's slot. It examines at most ARGV[3] list entries
-- and reads each task's status and tenant from the ledger, so a page costs
-- one round trip whatever the filter (the records are read afterwards).
--
-- KEYS[1] -> {p}plan:{planId}:tasks     task ids in plan order (LIST)
-- KEYS[2] -> {p}plan:{planId}:counts    counts and ledger (HASH)
-- ARGV[1] -> position to start at (0-based)
-- ARGV[2] -> most task ids to return
-- ARGV[3] -> most entries to examine
-- ARGV[4] -> status to keep ("" = every status)
-- ARGV[5] -> tenant id prefix to keep ("" = every tenant; an entry without
--            a ledger tenant is kept, the caller checks its record)
-- Returns {next position ("" at the end of the list), task id, tenant id,
-- task id, tenant id, ...}; tenant id is "" when the ledger has no entry.

local pos = tonumber(ARGV[1])
local limit, scan, want, pre = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5] or ''
local out = {''}
local found, examined = 0, 0
local chunk = 500
while examined < scan do
  local n = math.min(chunk, scan - examined)
  local ids = redis.call('LRANGE', KEYS[1], pos, pos + n - 1)
  if #ids == 0 then return out end
  for _, id in ipairs(ids) do
    pos = pos + 1
    examined = examined + 1
    local e = redis.call('HGET', KEYS[2], 't:' .. id)
    local status, tenant = '', ''
    if e then
      status, tenant = string.match(e, '^([^|]*)|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)$')
      status, tenant = status or '', tenant or ''
    end
    if (want == '' or status == want) and (pre == '' or tenant == '' or string.sub(tenant, 1, #pre) == pre) then
      out[#out + 1] = id
      out[#out + 1] = tenant
      found = found + 1
      if found >= limit then
        if redis.call('LLEN', KEYS[1]) > pos then out[1] = string.format('%d', pos) end
        return out
      end
    end
  end
  if #ids < n then return out end
end
if redis.call('LLEN', KEYS[1]) > pos then out[1] = string.format('%d', pos) end
return out
