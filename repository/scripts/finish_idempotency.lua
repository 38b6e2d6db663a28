-- finish_idempotency.lua: replaces an idempotency claim by the request's
-- answer (Complete) or deletes it so a retry can run (Abandon), only if the
-- key still holds this request's claim: a claim that expired and was taken
-- by another request is left alone.
--
-- KEYS[1] -> {p}idem:<scope>:{<sha256(key)>}   claim or stored answer (STRING)
-- ARGV[1] -> the claim value this request stored
-- ARGV[2] -> the answer to keep ("" deletes the key)
-- ARGV[3] -> TTL of the answer in milliseconds
-- Returns 1 when done, 0 when the key no longer holds the claim.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
