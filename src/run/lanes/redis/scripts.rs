//! The Lua scripts the Redis store runs (each atomic on the server, on Redis's own clock).
//!
//! A lane is `KEY` (a sorted set of permits scored by lease expiry), `KEY:queue` (waiting
//! tickets, scored by arrival or by their flow's fair tag), `KEY:qlease` (each ticket's own
//! lapse time), `KEY:seq` (the arrival counter), `KEY:flows` (each flow's last tag, and the
//! lane's virtual time `~vt`: the tag granted last). A ticket of flow F with weight W is
//! tagged `max(vt, last[F]) + 1/W` (start-time fair queueing): flows take turns, a flow's own
//! tickets keep their order, and a flow that was idle banks no credit. A ticket without a flow
//! (a backend's read/write order) is scored by arrival alone. A release (and a grant that leaves room, and a waiter that leaves) publishes
//! on `KEY:freed:TICKET` for the ticket now at the head of the queue, so only the process whose
//! call is next wakes, and only that call.

/// KEYS: permits, queue, qlease, seq, freed channel prefix, rate hash, flows. ARGV: limit,
/// lease_ms, ticket, queue_lease_ms, flow, flow weight, member…  Grants only to the head of the queue, when its weight fits:
/// `{1, ms}` with how long the lane is paused (a partner's Retry-After), else `{0, 0}`.
pub(super) const ACQUIRE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, g in ipairs(gone) do
  redis.call('ZREM', KEYS[2], g)
  redis.call('ZREM', KEYS[3], g)
end
local ticket = ARGV[3]
local flow = ARGV[5]
if not redis.call('ZSCORE', KEYS[2], ticket) then
  if flow == '' then
    redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ticket)
  else
    local vt = tonumber(redis.call('HGET', KEYS[7], '~vt') or 0)
    local last = tonumber(redis.call('HGET', KEYS[7], flow) or 0)
    local tag = math.max(vt, last) + 1 / tonumber(ARGV[6])
    redis.call('HSET', KEYS[7], flow, tostring(tag))
    redis.call('ZADD', KEYS[2], tag, ticket)
  end
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ticket)
local keep = tonumber(ARGV[2]) * 2
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], keep) end
redis.call('PEXPIRE', KEYS[7], keep)
local limit = tonumber(ARGV[1])
local n = #ARGV - 6
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head ~= ticket or redis.call('ZCARD', KEYS[1]) + n > limit then return {0, 0} end
for i = 7, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], keep)
if flow ~= '' then
  local tag = tonumber(redis.call('ZSCORE', KEYS[2], ticket))
  local vt = tonumber(redis.call('HGET', KEYS[7], '~vt') or 0)
  if tag > vt then redis.call('HSET', KEYS[7], '~vt', tostring(tag)) end
end
redis.call('ZREM', KEYS[2], ticket)
redis.call('ZREM', KEYS[3], ticket)
local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if next and redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('PUBLISH', KEYS[5] .. next, '1')
end
local paused = tonumber(redis.call('HGET', KEYS[6], 'paused') or 0) * 1000 - now
if paused < 0 then paused = 0 end
return {1, math.floor(paused)}
"#;

/// KEYS: permits, queue, freed channel prefix. ARGV: member…  Gives permits back and tells
/// the head of the queue.
pub(super) const RELEASE: &str = r#"
redis.call('ZREM', KEYS[1], unpack(ARGV))
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then redis.call('PUBLISH', KEYS[3] .. head, '1') end
return 1
"#;

/// KEYS: queue, qlease, freed channel prefix. ARGV: ticket. A waiter that gives up leaves
/// the queue, and the new head is told.
pub(super) const LEAVE: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
if head then redis.call('PUBLISH', KEYS[3] .. head, '1') end
return 1
"#;

pub(super) const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1
"#;

/// Token bucket and back-off pause: returns the wait in microseconds and whether it is for a
/// token. ARGV: per_sec, burst, has_rate (0/1), backoff_us (0: admit one call).
pub(super) const TOKENS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local per_sec, burst, has_rate, backoff = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or burst)
local at = tonumber(redis.call('HGET', KEYS[1], 'at') or now)
local paused = tonumber(redis.call('HGET', KEYS[1], 'paused') or 0)
local wait, token = 0, 0
if backoff > 0 then
  local untl = now + backoff / 1e6
  if untl > paused then paused = untl end
  if has_rate and at < untl then
    if tokens > 0 then tokens = 0 end
    at = untl
  end
else
  local pw = paused - now
  if pw < 0 then pw = 0 end
  local tw = 0
  if has_rate then
    if now > at then
      tokens = math.min(burst, tokens + (now - at) * per_sec)
      at = now
    end
    tokens = tokens - 1
    local starts = at - now
    if starts < 0 then starts = 0 end
    tw = starts
    if tokens < 0 then tw = starts + (-tokens) / per_sec end
  end
  if tw > 0 then token = 1 end
  wait = math.max(tw, pw)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at), 'paused', tostring(paused))
redis.call('EXPIRE', KEYS[1], 86400)
return {math.floor(wait * 1e6), token}
"#;

/// A tenant's window spend. KEYS: the tenant's sorted set (members `ID|COST`, scored by when,
/// in ms). ARGV: window_ms, max_cost, cost, id. Drops what left the window, then reserves the
/// call if it fits: `{1, spent}`, else `{0, spent, ms until enough has left}` (-1: never).
pub(super) const SPEND: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, max, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local spent = 0
for i = 1, #all, 2 do spent = spent + tonumber(string.match(all[i], '|(.*)$')) end
if spent + cost <= max + 1e-9 then
  redis.call('ZADD', KEYS[1], now, ARGV[4] .. '|' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, tostring(spent + cost), 0}
end
if cost > max + 1e-9 then return {0, tostring(spent), -1} end
local left = spent
for i = 1, #all, 2 do
  left = left - tonumber(string.match(all[i], '|(.*)$'))
  if left + cost <= max + 1e-9 then
    return {0, tostring(spent), tonumber(all[i + 1]) + window - now}
  end
end
return {0, tostring(spent), 0}
"#;
