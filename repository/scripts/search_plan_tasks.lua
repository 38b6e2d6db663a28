-- search_plan_tasks.lua: the newest entries of some of a plan's per-status
-- task indexes below a cursor, in the plan's slot: one call per plan and
-- page of the cross-plan search (search.go). It reads at most ARGV[1]
-- entries of each index (plus the entries tied with the cursor's score),
-- and the tenant of each entry it returns from the ledger.
--
-- KEYS[1] -> {p}plan:{planId}:counts        counts and ledger (HASH)
-- KEYS[2 ..] -> {p}plan:{planId}:status:<S>  the indexes to read (ZSET)
-- ARGV[1] -> most entries to return
-- ARGV[2] -> lowest score to return ("-inf" = any)
-- ARGV[3] -> cursor score ("+inf" = no cursor): entries come below it
-- ARGV[4] -> cursor task id: entries scored as the cursor come only if
--            their id sorts before it
-- ARGV[5 ..] -> highest score to return from KEYS[2], KEYS[3], ... ("+inf" = any)
-- Returns {ZCARD of KEYS[2], ZCARD of KEYS[3], ..., then for each entry,
-- newest first (score, then task id, descending): score, task id, tenant id
-- ("" without a ledger entry), position of its index in KEYS (2 ..)}.

local limit = tonumber(ARGV[1])
local low, cursor, cursor_id = ARGV[2], ARGV[3], ARGV[4]
local cursor_n = tonumber(cursor)
local out, hits = {}, {}
for i = 2, #KEYS do
  out[#out + 1] = redis.call('ZCARD', KEYS[i])
  local high = ARGV[3 + i]
  local high_n = tonumber(high)
  local tie = false
  if cursor_n and (not high_n or cursor_n <= high_n) then
    high, tie = cursor, true
  end
  local off, got = 0, 0
  while got < limit do
    local r = redis.call('ZREVRANGEBYSCORE', KEYS[i], high, low, 'WITHSCORES', 'LIMIT', off, limit)
    for j = 1, #r, 2 do
      local id, score = r[j], r[j + 1]
      local n = tonumber(score)
      if not (tie and n == cursor_n and id >= cursor_id) then
        hits[#hits + 1] = {n, id, score, i}
        got = got + 1
        if got >= limit then break end
      end
    end
    if #r < 2 * limit then break end
    off = off + limit
  end
end
table.sort(hits, function(a, b)
  if a[1] ~= b[1] then return a[1] > b[1] end
  return a[2] > b[2]
end)
for j = 1, math.min(limit, #hits) do
  local h = hits[j]
  local e = redis.call('HGET', KEYS[1], 't:' .. h[2])
  local tenant = ''
  if e then tenant = string.match(e, '|([^|]*)$') or '' end
  out[#out + 1] = h[3]
  out[#out + 1] = h[2]
  out[#out + 1] = tenant
  out[#out + 1] = h[4]
end
return out
