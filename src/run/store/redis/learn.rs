//! A learned lane (`concurrency = "auto"`) shared through Redis: one limit for every process
//! and replica. Each process hands over what its calls saw every [`EXCHANGE`](crate::run::store::learn::EXCHANGE)
//! while it uses the lane — one script, merged into the lane's window in `KEY:learn` (a hash:
//! the window's sums, when it began, how long it must be, the limit and the law's state). The
//! process whose exchange finds the window due is answered the whole window (reset at once, so
//! one process judges each) and judges it with the same law as a lone process
//! (`learn.rs`), then writes the law and the limit back; `KEY:learn:moves` keeps the last 100
//! moves (`ms limit why`). Every other process learns the limit from its next exchange.

use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::Script;

use crate::manifest::AutoLimit;
use crate::run::store::learn::{Judge, Law, Move, Shared, Window, EXCHANGE};
use crate::run::store::{BoxFuture, LaneError};

/// Merge a process's answers into the lane's window; answer the limit and the law, and — to
/// the one exchange that finds the window due — the window itself (then begun afresh).
/// KEYS: the learning hash, the lane's permits. ARGV: answered, sum ms, min ms, overloads,
/// the start limit, the limit the process had in force (answers gathered under another are
/// dropped: the process only learns the limit), two exchanges in ms (a window's least margin:
/// `learn::shared_span`).
const FEED: &str = r#"
local h = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', h) == 0 then
  redis.call('HSET', h, 'limit', ARGV[5], 'since', now, 'span', 50, 'answered', 0, 'sum', 0,
    'min', 0, 'over', 0, 'peak', 0)
end
-- A window nobody fed for ten spans (the lane lay idle) begins afresh.
local last_span = tonumber(redis.call('HGET', h, 'span')) or 50
local fed = math.max(tonumber(redis.call('HGET', h, 'fed')) or 0, tonumber(redis.call('HGET', h, 'since')))
if now - fed > 10 * last_span then
  redis.call('HSET', h, 'since', now, 'answered', 0, 'sum', 0, 'min', 0, 'over', 0, 'peak', 0)
end
if tonumber(ARGV[1]) + tonumber(ARGV[4]) > 0 then
  redis.call('HSET', h, 'fed', now)
end
-- Answers gathered under another limit than the lane's say nothing of it.
if redis.call('HGET', h, 'limit') ~= ARGV[6] then
  return {redis.call('HGET', h, 'limit'), '', '0'}
end
local answered = redis.call('HINCRBY', h, 'answered', ARGV[1])
local sum = tonumber(redis.call('HINCRBYFLOAT', h, 'sum', ARGV[2]))
local over = redis.call('HINCRBY', h, 'over', ARGV[4])
local min = tonumber(redis.call('HGET', h, 'min')) or 0
local m = tonumber(ARGV[3])
if m > 0 and (min <= 0 or m < min) then
  min = m
  redis.call('HSET', h, 'min', m)
end
local peak = math.max(tonumber(redis.call('HGET', h, 'peak')) or 0, redis.call('ZCARD', KEYS[2]))
redis.call('HSET', h, 'peak', peak)
redis.call('PEXPIRE', h, 86400000)
local limit = redis.call('HGET', h, 'limit')
local law = redis.call('HGET', h, 'law') or ''
local since = tonumber(redis.call('HGET', h, 'since'))
local span = tonumber(redis.call('HGET', h, 'span')) or 50
if answered > 0 then
  span = math.max(span, 2 * sum / answered + tonumber(ARGV[7]))
end
-- An overload at once; else a whole round (as many answers as the limit) and long enough
-- (`Law::ready`).
if over > 0 or (answered >= tonumber(limit) and now - since >= span) then
  redis.call('HSET', h, 'since', now, 'answered', 0, 'sum', 0, 'min', 0, 'over', 0, 'peak', 0)
  return {limit, law, '1', tostring(answered), tostring(sum), tostring(min), tostring(over),
    tostring(peak)}
end
return {limit, law, '0'}
"#;

/// Write the judged law back. KEYS: the learning hash, its moves. ARGV: the law (JSON), the
/// limit, the next window's length (ms), the move (`ms limit why`, or empty).
const SET: &str = r#"
redis.call('HSET', KEYS[1], 'law', ARGV[1], 'limit', ARGV[2], 'span', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('LTRIM', KEYS[2], 0, 99)
  redis.call('PEXPIRE', KEYS[2], 86400000)
end
return 1
"#;

/// Judges a learned lane's windows in Redis.
pub(super) struct RedisJudge {
    pub conn: ConnectionManager,
    /// The lane's key (its permits); the learning hash is `KEY:learn`.
    pub key: String,
    pub feed: Arc<Script>,
    pub set: Arc<Script>,
}

impl RedisJudge {
    pub(super) fn new(conn: ConnectionManager, key: &str) -> RedisJudge {
        RedisJudge {
            conn,
            key: key.to_string(),
            feed: Arc::new(Script::new(FEED)),
            set: Arc::new(Script::new(SET)),
        }
    }
}

impl Judge for RedisJudge {
    fn exchange(
        &self,
        (mine, mine_limit): (Window, u32),
        bounds: AutoLimit,
    ) -> BoxFuture<'static, Result<(u32, Option<Move>), LaneError>> {
        let (mut conn, key) = (self.conn.clone(), self.key.clone());
        let (feed, set) = (self.feed.clone(), self.set.clone());
        Box::pin(async move {
            let hash = format!("{key}:learn");
            let mut inv = feed.key(&hash);
            inv.key(&key);
            inv.arg(mine.answered)
                .arg(mine.sum_ms)
                .arg(mine.min_ms)
                .arg(mine.overloads)
                .arg(bounds.start)
                .arg(mine_limit)
                .arg(2 * EXCHANGE.as_millis() as u64);
            let out: Vec<String> = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| LaneError(format!("learning the lane's limit: {e}")))?;
            let limit = out.first().and_then(|l| l.parse::<u32>().ok());
            let limit = limit.unwrap_or(bounds.start);
            let num = |i: usize| {
                out.get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            if out.get(2).map(String::as_str) != Some("1") {
                return Ok((limit, None));
            }
            let window = Window {
                answered: num(3) as u64,
                sum_ms: num(4),
                min_ms: num(5),
                overloads: num(6) as u64,
                peak: num(7) as u64,
            };
            let law = out
                .get(1)
                .and_then(|l| serde_json::from_str::<Law>(l).ok())
                .unwrap_or_else(|| Law::new(bounds));
            let mut shared = Shared::new(bounds, 0.0);
            shared.law = law;
            // The hash's limit is the one in force (an operator may have set it).
            if shared.law.limit() != limit {
                shared.law.limit = f64::from(limit);
            }
            let moved = shared.judge(&window, bounds);
            let text = moved.map_or(String::new(), |m| {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                format!("{at} {} {}", m.to, m.why.as_str())
            });
            let mut inv = set.key(&hash);
            inv.key(format!("{hash}:moves"));
            inv.arg(serde_json::to_string(&shared.law).unwrap_or_default())
                .arg(shared.law.limit())
                .arg(shared.span_ms.round() as u64)
                .arg(text);
            let _: i64 = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| LaneError(format!("learning the lane's limit: {e}")))?;
            Ok((shared.law.limit(), moved))
        })
    }
}
