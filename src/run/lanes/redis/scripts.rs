//! The Lua scripts the Redis store runs (each atomic on the server, on Redis's own clock).
//!
//! A lane is `KEY` (a sorted set of permits scored by lease expiry), `KEY:queue` (waiting
//! tickets, scored by arrival or by their flow's fair tag), `KEY:qlease` (each ticket's own
//! lapse time), `KEY:seq` (the arrival counter), `KEY:flows` (each flow's last tag, and the
//! lane's virtual time `~vt`: the tag granted last). A ticket of flow F with weight W is
//! tagged `max(vt, last[F]) + 1/W` (start-time fair queueing): flows take turns, a flow's own
//! tickets keep their order, and a flow that was idle banks no credit. A ticket without a flow
//! (a backend's read/write order) is scored by arrival alone. A release (and a grant that
//! leaves room, and a waiter that leaves) grants the head of the queue itself and publishes on
//! `KEY:freed:TICKET` that it did, so only the process whose call is next wakes, only that
//! call, and it asks Redis nothing more before its call starts (`KEY:want` keeps what each
//! waiting ticket asked for).

/// What the scripts that free or grant permits share. `K` names a lane's keys: `permits`,
/// `queue`, `qlease`, `want` (each waiting ticket's `WEIGHT FLOWED LEASE_MS`, so that another
/// script can grant it), `flows`, `rate` and `chan` (the freed channels' prefix). `tidy` drops
/// lapsed permits and tickets; `hand_on` grants the head of the queue while it fits — the
/// ticket's permits until its own queue lease, which its waiter renews at once — and tells it
/// `g PAUSED_MS`, so the waiter runs no script before its call; a head whose weight does not
/// fit waits for the next release.
macro_rules! lane_lib {
    () => {
        r#"
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function tidy(K, now)
  redis.call('ZREMRANGEBYSCORE', K.permits, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', K.qlease, '-inf', now)
  for _, g in ipairs(gone) do
    redis.call('ZREM', K.queue, g)
    redis.call('ZREM', K.qlease, g)
    redis.call('HDEL', K.want, g)
  end
end
local function paused_ms(K, now)
  local paused = tonumber(redis.call('HGET', K.rate, 'paused') or 0) * 1000 - now
  if paused < 0 then paused = 0 end
  return math.floor(paused)
end
local function advance(K, ticket)
  local tag = tonumber(redis.call('ZSCORE', K.queue, ticket))
  local vt = tonumber(redis.call('HGET', K.flows, '~vt') or 0)
  if tag > vt then redis.call('HSET', K.flows, '~vt', tostring(tag)) end
end
local function hand_on(K, now, limit)
  while true do
    local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
    if not head then return end
    local want = redis.call('HGET', K.want, head)
    if not want then
      redis.call('PUBLISH', K.chan .. head, '1')
      return
    end
    local n, flowed, lease = string.match(want, '^(%d+) (%d) (%d+)$')
    n = tonumber(n)
    if redis.call('ZCARD', K.permits) + n > limit then return end
    local till = tonumber(redis.call('ZSCORE', K.qlease, head) or now)
    for i = 0, n - 1 do redis.call('ZADD', K.permits, till, head .. '#' .. i) end
    redis.call('PEXPIRE', K.permits, tonumber(lease) * 2)
    if flowed == '1' then advance(K, head) end
    redis.call('ZREM', K.queue, head)
    redis.call('ZREM', K.qlease, head)
    redis.call('HDEL', K.want, head)
    redis.call('PUBLISH', K.chan .. head, 'g ' .. paused_ms(K, now))
  end
end
local function lane_keys(first)
  return {permits = KEYS[first], queue = KEYS[first + 1], qlease = KEYS[first + 2],
          want = KEYS[first + 3], flows = KEYS[first + 4], rate = KEYS[first + 5],
          chan = KEYS[first + 6]}
end
"#
    };
}

/// KEYS: permits, queue, qlease, want, flows, rate hash, freed channel prefix, seq. ARGV:
/// limit, lease_ms, ticket, queue_lease_ms, flow, flow weight, member…  Grants only to the
/// head of the queue, when its weight fits (or finds the ticket granted already, by a release
/// that reached it first: `{2, ms}`, and the waiter renews at once): `{1, ms}` with how long
/// the lane is paused (a partner's Retry-After), else `{0, 0}`.
pub(super) const ACQUIRE: &str = concat!(
    lane_lib!(),
    r#"
local K = lane_keys(1)
local now = clock()
tidy(K, now)
local ticket, flow = ARGV[3], ARGV[5]
local n = #ARGV - 6
if n > 0 and redis.call('ZSCORE', K.permits, ARGV[7]) then return {2, paused_ms(K, now)} end
if not redis.call('ZSCORE', K.queue, ticket) then
  if flow == '' then
    redis.call('ZADD', K.queue, redis.call('INCR', KEYS[8]), ticket)
  else
    local vt = tonumber(redis.call('HGET', K.flows, '~vt') or 0)
    local last = tonumber(redis.call('HGET', K.flows, flow) or 0)
    local tag = math.max(vt, last) + 1 / tonumber(ARGV[6])
    redis.call('HSET', K.flows, flow, tostring(tag))
    redis.call('ZADD', K.queue, tag, ticket)
  end
  redis.call('HSET', K.want, ticket, n .. ' ' .. (flow == '' and '0' or '1') .. ' ' .. ARGV[2])
end
redis.call('ZADD', K.qlease, now + tonumber(ARGV[4]), ticket)
local keep = tonumber(ARGV[2]) * 2
for _, k in ipairs({K.queue, K.qlease, K.want, K.flows, KEYS[8]}) do redis.call('PEXPIRE', k, keep) end
local limit = tonumber(ARGV[1])
local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
if head ~= ticket or redis.call('ZCARD', K.permits) + n > limit then return {0, 0} end
for i = 7, #ARGV do redis.call('ZADD', K.permits, now + tonumber(ARGV[2]), ARGV[i]) end
redis.call('PEXPIRE', K.permits, keep)
if flow ~= '' then advance(K, ticket) end
redis.call('ZREM', K.queue, ticket)
redis.call('ZREM', K.qlease, ticket)
redis.call('HDEL', K.want, ticket)
hand_on(K, now, limit)
return {1, paused_ms(K, now)}
"#
);

/// KEYS: the lane's (as [`ACQUIRE`]'s first seven). ARGV: limit, member…  Gives permits back
/// and grants the head of the queue what now fits.
pub(super) const RELEASE: &str = concat!(
    lane_lib!(),
    r#"
local K = lane_keys(1)
local now = clock()
redis.call('ZREM', K.permits, unpack(ARGV, 2))
tidy(K, now)
hand_on(K, now, tonumber(ARGV[1]))
return 1
"#
);

/// KEYS: the lane's (as [`ACQUIRE`]'s first seven). ARGV: limit, ticket, member…  A waiter
/// that gives up leaves the queue — and gives back what a release granted it meanwhile — and
/// the head is granted what now fits.
pub(super) const LEAVE: &str = concat!(
    lane_lib!(),
    r#"
local K = lane_keys(1)
local now = clock()
redis.call('ZREM', K.queue, ARGV[2])
redis.call('ZREM', K.qlease, ARGV[2])
redis.call('HDEL', K.want, ARGV[2])
redis.call('ZREM', K.permits, unpack(ARGV, 3))
tidy(K, now)
hand_on(K, now, tonumber(ARGV[1]))
return 1
"#
);

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
