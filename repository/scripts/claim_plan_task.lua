-- claim_plan_task.lua: take up to ARGV[3] entries of a plan's shared work
-- queue and a permit for each, if the plan is RUNNING, as many as fewer than
-- maxConcurrency permits held (by every instance together) allow. One round
-- trip, in the plan's slot, however many entries it grants: an instance
-- claims its free share at once, so the starts of those tasks go to Redis
-- together (their reads, locks and first writes share pipelines).
--
-- KEYS[1] -> {p}plan:{planId}            plan record (HASH)
-- KEYS[2] -> {p}plan:{planId}:queue      queued entries (LIST of "<kind>|<tenantId>|<taskId>")
-- KEYS[3] -> {p}plan:{planId}:permits    held permits (ZSET entry -> lease end, ms, Redis clock)
-- ARGV[1] -> permit lease in milliseconds
-- ARGV[2] -> TTL of the plan keys in milliseconds
-- ARGV[3] -> want, the most entries to grant (>= 1)
-- ARGV[4] -> n, the number of permits to free first (the caller's tasks that ended)
-- ARGV[5 .. 4+n] -> those entries
-- Returns {3, permits, entry, ...} (1 to want entries, in queue order) when
-- granted; {1, permits} when every permit
-- is held; {2, permits} when the queue is empty; {0, status} when the plan
-- is not RUNNING; {-1} when the plan is missing.
--
-- Permits whose lease passed (their holder died or stopped renewing) are
-- freed and their entries go back to the head of the queue: whoever claims
-- one reads the task and starts it only if it is still in the status its
-- kind expects (a PENDING task whose claimer died before starting it), so
-- a dead instance's RUNNING tasks are never restarted.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local want, n = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, 4 + n, 1000 do redis.call('ZREM', KEYS[3], unpack(ARGV, i, math.min(i + 999, 4 + n))) end

local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  for i = #dead, 1, -1 do redis.call('LPUSH', KEYS[2], dead[i]) end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end

local p = redis.call('HMGET', KEYS[1], 'status', 'maxConcurrency')
if not p[1] then return {-1} end
if p[1] ~= 'RUNNING' then return {0, p[1]} end
local max = tonumber(p[2]) or 1
if max < 1 then max = 1 end
local held = redis.call('ZCARD', KEYS[3])
if held >= max then return {1, held} end
local es = redis.call('LPOP', KEYS[2], math.min(want, max - held))
if not es then return {2, held} end
local until_ms, z = now + tonumber(ARGV[1]), {}
for i = 1, #es do
  z[#z + 1] = until_ms
  z[#z + 1] = es[i]
end
for i = 1, #z, 1000 do redis.call('ZADD', KEYS[3], unpack(z, i, math.min(i + 999, #z))) end
-- The permits get the TTL when this ZADD made the key (none held): while
-- some are held, their holders' renewals (renew_permits.lua, every
-- lease/3) give it again, and a permit nobody renews is freed above.
if held == 0 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
local out = {3, held + #es}
for i = 1, #es do out[#out + 1] = es[i] end
return out
