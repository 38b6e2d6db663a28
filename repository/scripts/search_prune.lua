-- search_prune.lua: removes plans from a {p}plans:status:<S> index when
-- the search found the plan's own index of S empty, only if their score
-- is still the one the search read: a task that entered S since raised it
-- (ZADD GT), and the plan stays.
--
-- KEYS[1] -> {p}plans:status:<S>   plans by status (ZSET)
-- ARGV[1 ..] -> plan id, score read, plan id, score read, ...
-- Returns the number of plans removed.

local n = 0
for i = 1, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
