-- request_task.lua: stores a cooperative request on a task, without the
-- tenant lock and without changing its seq, in the tenant's slot.
-- "pause" and "cancel" are stored only on a RUNNING task; "clear_pause"
-- withdraws a pause request on a task of any status; "note" changes nothing.
-- ev is appended to the timeline only when the request changed something or
-- was stored, and always for "note" — but not when the same entry (the same
-- JSON: time to the nanosecond, actor, reason, request id) is among the
-- newest 16: the replay of a request that reached Redis after its call
-- timed out (the single-instance write-behind queue sends it again).
--
-- KEYS[1] -> {p}task:{tenantId}:<taskId>              task record (HASH)
-- KEYS[2] -> {p}task:{tenantId}:<taskId>:timeline     timeline (LIST)
-- ARGV[1] -> request: pause | cancel | clear_pause | note
-- ARGV[2] -> timeline entry (JSON), "" for none
-- ARGV[3] -> timeline max entries
-- ARGV[4] -> TTL in milliseconds
-- Returns {} when the task is missing, else {applied (0|1), field, value, ...}:
-- the record after the request.

local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {} end
local applied = 0
if ARGV[1] == 'pause' and status == 'RUNNING' then
  redis.call('HSET', KEYS[1], 'pauseRequested', '1')
  applied = 1
elseif ARGV[1] == 'cancel' and status == 'RUNNING' then
  redis.call('HSET', KEYS[1], 'cancelRequested', '1')
  applied = 1
elseif ARGV[1] == 'clear_pause' and redis.call('HGET', KEYS[1], 'pauseRequested') == '1' then
  redis.call('HSET', KEYS[1], 'pauseRequested', '0')
  applied = 1
elseif ARGV[1] == 'note' then
  applied = 1
end
local replayed = false
if applied == 1 and ARGV[2] ~= '' then
  for _, e in ipairs(redis.call('LRANGE', KEYS[2], -16, -1)) do
    if e == ARGV[2] then replayed = true break end
  end
end
if applied == 1 and ARGV[2] ~= '' and not replayed then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
local out = {applied}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
