-- beat_task.lua: refreshes a running task's heartbeat if the writer still
-- holds the tenant lock with the newest fence, in the tenant's slot. An empty
-- lock value (an in-process lease, single-instance mode) skips the lock
-- check, as in write_task.lua; the fence is always checked.
--
-- KEYS[1] -> {p}task:{tenantId}:<taskId>   task record (HASH)
-- KEYS[2] -> {p}lock:tenant:{tenantId}     tenant lock (STRING)
-- ARGV[1] -> lock value the writer holds ("" = an in-process lease)
-- ARGV[2] -> writer's fencing token
-- ARGV[3] -> heartbeat time (RFC 3339)
-- Returns {1} when written, or {0, reason, status, seq, fence, owner} (the
-- stored state) when refused (reason: missing | lock | fence).

local rec = redis.call('HMGET', KEYS[1], 'status', 'seq', 'fence', 'owner')
if not rec[1] then return {0, 'missing', '', 0, 0, ''} end
local seq, fence = tonumber(rec[2]) or 0, tonumber(rec[3]) or 0
local function refuse(reason) return {0, reason, rec[1], seq, fence, rec[4] or ''} end
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return refuse('lock') end
if fence > tonumber(ARGV[2]) then return refuse('fence') end
redis.call('HSET', KEYS[1], 'heartbeatAt', ARGV[3])
return {1}
