-- renew_permits.lua: extend the leases of permits a live instance holds
-- (only those still held: a permit that expired was freed and its entry
-- requeued; it is not taken back). One round trip per plan, however many
-- of its tasks the instance runs.
--
-- KEYS[1] -> {p}plan:{planId}:permits    held permits (ZSET entry -> lease end, ms)
-- ARGV[1] -> permit lease in milliseconds
-- ARGV[2] -> TTL of the plan keys in milliseconds
-- ARGV[3 ..] -> the entries
-- Returns how many permits were renewed.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
local renewed = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], until_ms, ARGV[i])
    renewed = renewed + 1
  end
end
if renewed > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return renewed
