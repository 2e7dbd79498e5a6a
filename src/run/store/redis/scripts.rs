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
//! waiting ticket asked for). A call whose one backend read comes next asks for it with its
//! last lane: whichever script grants the lane grants the read too (`along`) when nobody waits
//! for that backend and it has room — lanes first, then the backend, in one atomic step, so
//! the order every call keeps holds and the call saves a round trip before it starts.
//! `along` names the backend's keys from the key it was given (one Redis, not a cluster).

/// What the scripts that free or grant permits share. `K` names a lane's keys: `permits`,
/// `queue`, `qlease`, `want` (each waiting ticket's `WEIGHT FLOWED LEASE_MS`, then `BACKEND_WEIGHT
/// BACKEND_LIMIT BACKEND_KEY` for a read along, so that another script can grant it), `flows`,
/// `rate` and `chan` (the freed channels' prefix). `tidy` drops lapsed permits and tickets;
/// `along` grants a backend read when nobody waits for the backend and it has room; `hand_on`
/// grants the head of the queue while it fits — the ticket's permits (and its read along) until
/// its own queue lease, which its waiter renews well before it lapses — and tells it
/// `g PAUSED_MS ALONG`, so the waiter runs no script before its call; a head whose weight does
/// not fit waits for the next release; `give_back` returns permits and hands the lane on.
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
local function keys_of(base)
  return {permits = base, queue = base .. ':queue', qlease = base .. ':qlease',
          want = base .. ':want', flows = base .. ':flows', rate = base .. ':rate',
          chan = base .. ':freed:'}
end
local function lane_keys(first)
  return {permits = KEYS[first], queue = KEYS[first + 1], qlease = KEYS[first + 2],
          want = KEYS[first + 3], flows = KEYS[first + 4], rate = KEYS[first + 5],
          chan = KEYS[first + 6]}
end
local function along(base, ticket, w, limit, till, now, lease)
  local B = keys_of(base)
  redis.call('ZREMRANGEBYSCORE', B.permits, '-inf', now)
  if redis.call('EXISTS', B.queue) == 1 then
    tidy(B, now)
    if redis.call('EXISTS', B.queue) == 1 then return 0 end
  end
  if redis.call('ZCARD', B.permits) + w > limit then return 0 end
  for i = 0, w - 1 do redis.call('ZADD', B.permits, till, ticket .. '#' .. i) end
  redis.call('PEXPIRE', B.permits, tonumber(lease) * 2)
  return 1
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
    local n, flowed, lease, rest = string.match(want, '^(%d+) (%d) (%d+)(.*)$')
    n = tonumber(n)
    if redis.call('ZCARD', K.permits) + n > limit then return end
    local till = tonumber(redis.call('ZSCORE', K.qlease, head) or now)
    for i = 0, n - 1 do redis.call('ZADD', K.permits, till, head .. '#' .. i) end
    redis.call('PEXPIRE', K.permits, tonumber(lease) * 2)
    if flowed == '1' then advance(K, head) end
    redis.call('ZREM', K.queue, head)
    redis.call('ZREM', K.qlease, head)
    redis.call('HDEL', K.want, head)
    local got = 0
    local bw, blimit, base = string.match(rest, '^ (%d+) (%d+) (.+)$')
    if base then got = along(base, head, tonumber(bw), tonumber(blimit), till, now, lease) end
    redis.call('PUBLISH', K.chan .. head, 'g ' .. paused_ms(K, now) .. ' ' .. got)
  end
end
local function give_back(K, now, limit, ...)
  redis.call('ZREM', K.permits, ...)
  tidy(K, now)
  hand_on(K, now, limit)
end
"#
    };
}

/// KEYS: permits, queue, qlease, want, flows, rate hash, freed channel prefix, seq, and the
/// key of a backend to read along (only when ARGV[7] > 0). ARGV: limit, lease_ms, ticket,
/// queue_lease_ms, flow, flow weight, backend weight (0: none), backend limit, member…
/// Grants at once, with no place in the queue, when nobody waits and the weight fits (the
/// common case: half the work of queueing and granting at the head); else only to the head of
/// the queue, when its weight fits (or finds the ticket granted already, by a release that
/// reached it first: `{2, ms, b}`, and the waiter renews soon): `{1, ms, b}` with how long the
/// lane is paused (a partner's Retry-After), else `{0, 0, 0}`. `b` is 1 when the backend read
/// came along with the lane (see `along`).
pub(super) const ACQUIRE: &str = concat!(
    lane_lib!(),
    r#"
local K = lane_keys(1)
local now = clock()
redis.call('ZREMRANGEBYSCORE', K.permits, '-inf', now)
local ticket, flow = ARGV[3], ARGV[5]
local bw = tonumber(ARGV[7])
local n = #ARGV - 8
local limit, keep = tonumber(ARGV[1]), tonumber(ARGV[2]) * 2
local function came()
  if bw > 0 and redis.call('ZSCORE', KEYS[9], ticket .. '#0') then return 1 end
  return 0
end
local function grant()
  local z = {}
  for i = 9, #ARGV do z[#z + 1] = now + tonumber(ARGV[2]); z[#z + 1] = ARGV[i] end
  if #z > 0 then redis.call('ZADD', K.permits, unpack(z)) end
  redis.call('PEXPIRE', K.permits, keep)
  if bw == 0 then return 0 end
  return along(KEYS[9], ticket, bw, tonumber(ARGV[8]), now + tonumber(ARGV[2]), now, ARGV[2])
end
if n > 0 and redis.call('ZSCORE', K.permits, ARGV[9]) then return {2, paused_ms(K, now), came()} end
if redis.call('EXISTS', K.queue) == 0 and redis.call('ZCARD', K.permits) + n <= limit then
  -- Nobody waits and the weight fits: granted with no place in the queue (its flow's tag
  -- taken and passed at once, as a ticket granted at the head would have).
  if flow ~= '' then
    local f = redis.call('HMGET', K.flows, '~vt', flow)
    local tag = tostring(math.max(tonumber(f[1] or 0), tonumber(f[2] or 0)) + 1 / tonumber(ARGV[6]))
    redis.call('HSET', K.flows, flow, tag, '~vt', tag)
    redis.call('PEXPIRE', K.flows, keep)
  end
  local got = grant()
  return {1, paused_ms(K, now), got}
end
tidy(K, now)
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
  local want = n .. ' ' .. (flow == '' and '0' or '1') .. ' ' .. ARGV[2]
  if bw > 0 then want = want .. ' ' .. bw .. ' ' .. ARGV[8] .. ' ' .. KEYS[9] end
  redis.call('HSET', K.want, ticket, want)
end
redis.call('ZADD', K.qlease, now + tonumber(ARGV[4]), ticket)
for _, k in ipairs({K.queue, K.qlease, K.want, K.flows, KEYS[8]}) do redis.call('PEXPIRE', k, keep) end
local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
if head ~= ticket or redis.call('ZCARD', K.permits) + n > limit then return {0, 0, 0} end
if flow ~= '' then advance(K, ticket) end
redis.call('ZREM', K.queue, ticket)
redis.call('ZREM', K.qlease, ticket)
redis.call('HDEL', K.want, ticket)
local got = grant()
hand_on(K, now, limit)
return {1, paused_ms(K, now), got}
"#
);

/// KEYS: the lane's (as [`ACQUIRE`]'s first seven). ARGV: limit, member…  Gives permits back
/// and grants the head of the queue what now fits.
pub(super) const RELEASE: &str = concat!(
    lane_lib!(),
    r#"
give_back(lane_keys(1), clock(), tonumber(ARGV[1]), unpack(ARGV, 2))
return 1
"#
);

/// KEYS: the lane's (as [`ACQUIRE`]'s first seven), then the key of the backend whose read came
/// along with it. ARGV: limit, the backend's limit, the read's member, member…  [`RELEASE`] of
/// the lane and then of the read, in one script: a call whose read came with its lane gives
/// both back in one step, as it took them (the lane first: its release is what hands it on).
pub(super) const RELEASE_ALONG: &str = concat!(
    lane_lib!(),
    r#"
local now = clock()
give_back(lane_keys(1), now, tonumber(ARGV[1]), unpack(ARGV, 4))
give_back(keys_of(KEYS[8]), now, tonumber(ARGV[2]), ARGV[3])
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
give_back(K, now, tonumber(ARGV[1]), unpack(ARGV, 3))
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
