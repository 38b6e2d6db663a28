-- claim_idempotency.lua: claims an idempotency key for a first request
-- (SET NX with a TTL, seed 000's pattern) or, when the key is taken, returns
-- what it holds, in one round trip.
--
-- KEYS[1] -> {p}idem:<scope>:{<sha256(key)>}   claim or stored answer (STRING)
-- ARGV[1] -> the claim value (opaque to Redis, unique per request)
-- ARGV[2] -> TTL of the claim in milliseconds
-- Returns {1} when the key was free (it now holds ARGV[1]), or {0, value}
-- with what the key holds.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1} end
return {0, redis.call('GET', KEYS[1]) or ''}
