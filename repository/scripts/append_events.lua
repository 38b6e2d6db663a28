-- append_events.lua: appends one batch of feed events as ONE stream entry
-- and trims the feed to the newest ARGV[2] events.
--
-- The entry's id is chosen so that its n events have consecutive stream ids
-- of their own: the entry <ms>-<seq> holds the events <ms>-<seq> ..
-- <ms>-<seq+n-1>, and the next entry starts after the last of them (same
-- millisecond: <ms>-<seq+n>; a later one: <ms'>-0). So an event's id is an
-- ordinary stream id ("<ms>-<seq>", the feed's cursor format) and entries
-- written before batching (no field n: one event each) read the same way.
-- The millisecond is the writer's clock (ARGV[1]) or the last entry's, the
-- larger. Each entry also carries c, the feed's running count of events; an
-- entry is trimmed once all its events are older than the newest ARGV[2]
-- (its c <= the new c - ARGV[2]), so the feed keeps at least ARGV[2] events
-- and at most one entry's worth (n - 1) more.
--
-- KEYS[1] -> {p}events            event feed (STREAM)
-- ARGV[1] -> now, ms (Config.Clock)
-- ARGV[2] -> most events kept (Config.EventsMax)
-- ARGV[3] -> n, events in the batch (>= 1)
-- ARGV[4] -> the batch, a JSON array of n events
-- Returns the entry id.

local key = KEYS[1]
local now, keep, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

-- fields of a stream entry: n (events, 1 without it) and c (running count, 0 without it)
local function counts(fields)
  local en, ec = 1, 0
  for i = 1, #fields, 2 do
    if fields[i] == 'n' then en = tonumber(fields[i + 1]) or 1
    elseif fields[i] == 'c' then ec = tonumber(fields[i + 1]) or 0 end
  end
  return en, ec
end

local ms, seq, c = now, 0, n
local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
if last then
  local lms, lseq = string.match(last[1], '^(%d+)-(%d+)$')
  lms, lseq = tonumber(lms), tonumber(lseq)
  local ln, lc = counts(last[2])
  c = lc + n
  if now <= lms then ms, seq = lms, lseq + ln end
end
local id = string.format('%d-%d', ms, seq)
local ok = redis.pcall('XADD', key, id, 'n', n, 'c', c, 'b', ARGV[4])
if type(ok) == 'table' and ok.err then
  -- The stream's last generated id is above the last entry's (an entry
  -- deleted by hand): let Redis choose one above it.
  ok = redis.call('XADD', key, '*', 'n', n, 'c', c, 'b', ARGV[4])
end

-- Trim whole entries whose events all lie beyond the newest keep.
local limit = c - keep
while limit > 0 do
  local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 16)
  local cut = nil
  for _, e in ipairs(first) do
    local _, ec = counts(e[2])
    if ec > limit or e[1] == ok then break end
    cut = e[1]
  end
  if not cut then break end
  local cms, cseq = string.match(cut, '^(%d+)-(%d+)$')
  redis.call('XTRIM', key, 'MINID', string.format('%d-%d', tonumber(cms), tonumber(cseq) + 1))
  if cut ~= first[#first][1] or #first < 16 then break end
end
return ok
