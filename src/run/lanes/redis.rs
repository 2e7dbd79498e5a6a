//! The `redis://HOST:PORT[/DB]` lane store: tenant, tool and shared lanes held by every process
//! on every machine that points at the same Redis (or Valkey).
//!
//! A lane is a sorted set of permits (`weight` members per call, each scored with the time its
//! lease expires, on Redis's own clock); acquiring and releasing are Lua scripts, so they are
//! atomic. A holder renews its lease every third of the lease time while its call runs, so a
//! crashed holder's permits come back once the lease lapses, and renewal re-adds the *same*
//! members, so an in-flight call is never counted twice after Redis comes back. Rate buckets
//! live in Redis too (a hash updated by script, same arithmetic as the other stores). When
//! Redis cannot be reached, a dispatch retries for a few seconds and then fails with a clear
//! `lane_store` error. Inside a process calls still queue in call order in memory first.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{Admission, Answer, BoxFuture, LaneError, LaneStore, Lease, MemoryLanes, RateSpec};
use crate::events::LaneStats;
use crate::plan::LaneSpec;

/// How long a lease lasts without renewal (`FLUX_TOOLS_LEASE_MS` overrides, for tests).
const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// How long a dispatch keeps trying an unreachable Redis before it fails.
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);

const ACQUIRE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[1])
local n = #ARGV - 2
if redis.call('ZCARD', KEYS[1]) + n > limit then return 0 end
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"#;

const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1
"#;

/// Token bucket and back-off pause: returns the wait in microseconds and whether it is for a
/// token. ARGV: per_sec, burst, has_rate (0/1), backoff_us (0: admit one call).
const TOKENS: &str = r#"
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

struct RedisLane {
    key: String,
    limit: u32,
    rate: Option<RateSpec>,
}

/// Lanes shared through Redis.
pub struct RedisLanes {
    url: String,
    /// Reconnects by itself when Redis restarts (a request during the outage fails and is
    /// retried by the caller, within `UNREACHABLE_FOR`).
    conn: ConnectionManager,
    mem: Arc<MemoryLanes>,
    lanes: Vec<Option<RedisLane>>,
    /// The manifest's namespace in key names.
    ns: String,
    lease: Duration,
    acquire: Script,
    renew: Script,
    tokens: Script,
    /// Since when Redis has failed every attempt (shared by all calls, so once it has been
    /// down for a while each further dispatch fails after one try, not after its own wait).
    down_since: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// The lanes of `specs` that live in Redis (shared across runs, with a limit or a rate).
fn redis_lanes(specs: &[LaneSpec], ns: &str) -> Vec<Option<RedisLane>> {
    specs
        .iter()
        .map(|s| {
            (s.key.across_runs() && !s.borrowed && (s.limit.is_some() || s.rate.is_some())).then(
                || RedisLane {
                    key: format!("flux-tools:{ns}:{}", s.name),
                    limit: s.limit.unwrap_or(0),
                    rate: RateSpec::of(s),
                },
            )
        })
        .collect()
}

fn store_error(url: &str, e: impl std::fmt::Display) -> LaneError {
    LaneError(format!("lane store {url} is unreachable: {e}"))
}

/// The URL as shown in any message: a password (`redis://user:secret@host`) as `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let user = rest[..at].split(':').next().unwrap_or("");
    format!("{scheme}://{user}:***@{}", &rest[at + 1..])
}

impl RedisLanes {
    /// Connect; `namespace` (the manifest's canonical path) separates manifests sharing a Redis.
    pub async fn connect(
        url: &str,
        specs: &[LaneSpec],
        namespace: &str,
    ) -> Result<RedisLanes, LaneError> {
        let client = redis::Client::open(url)
            .map_err(|e| LaneError(format!("--lane-store {}: {e}", redact_url(url))))?;
        // Short timeouts and one retry a request: the store's own loop retries for
        // `UNREACHABLE_FOR`, and a Redis that is gone must not stretch each attempt.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = tokio::time::timeout(
            UNREACHABLE_FOR,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| store_error(&redact_url(url), "no answer"))?
        .map_err(|e| store_error(&redact_url(url), e))?;
        let lease = std::env::var("FLUX_TOOLS_LEASE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_LEASE, Duration::from_millis)
            .max(Duration::from_millis(300));
        let ns = format!("{:016x}", super::local::fnv(namespace.as_bytes()));
        let lanes = redis_lanes(specs, &ns);
        Ok(RedisLanes {
            // Only ever shown, so only ever kept redacted.
            url: redact_url(url),
            conn,
            mem: Arc::new(MemoryLanes::new(specs)),
            lanes,
            ns,
            lease,
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            tokens: Script::new(TOKENS),
            down_since: std::sync::Mutex::new(None),
        })
    }

    /// The same connection and in-process lanes for another run's lane table.
    fn renewed(&self, specs: &[LaneSpec]) -> RedisLanes {
        RedisLanes {
            url: self.url.clone(),
            conn: self.conn.clone(),
            mem: Arc::new(self.mem.renewed(specs)),
            lanes: redis_lanes(specs, &self.ns),
            ns: self.ns.clone(),
            lease: self.lease,
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            tokens: Script::new(TOKENS),
            down_since: std::sync::Mutex::new(None),
        }
    }

    fn lane(&self, lane: usize) -> Option<&RedisLane> {
        self.lanes.get(lane).and_then(Option::as_ref)
    }

    async fn take(self: &Arc<Self>, lane: usize, weight: u32) -> Result<Permits, LaneError> {
        let Some(l) = self.lane(lane) else {
            return Err(LaneError("no such lane".into()));
        };
        let id = format!("{:016x}", fastrand::u64(..));
        let members: Vec<String> = (0..weight).map(|i| format!("{id}#{i}")).collect();
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(10_000);
        let mut delay = Duration::from_millis(5);
        loop {
            let mut inv = self.acquire.key(&l.key);
            inv.arg(l.limit).arg(lease_ms);
            for m in &members {
                inv.arg(m);
            }
            let mut conn = self.conn.clone();
            let answer = inv.invoke_async::<i64>(&mut conn).await;
            if self.note_answer(&answer)? {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(100));
        }
        // Renew while the call runs; give the permits back when the lease drops.
        let me = self.clone();
        let key = l.key.clone();
        let renew_members = members.clone();
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(me.lease / 3).await;
                let mut inv = me.renew.key(&key);
                inv.arg(lease_ms);
                for m in &renew_members {
                    inv.arg(m);
                }
                let mut conn = me.conn.clone();
                let _ = inv.invoke_async::<i64>(&mut conn).await;
            }
        });
        Ok(Permits {
            store: self.clone(),
            key: l.key.clone(),
            members,
            renewer,
        })
    }

    /// Record whether Redis answered; `Ok(true)` when the permits were granted, `Err` once it
    /// has been unreachable for too long.
    fn note_answer(&self, answer: &redis::RedisResult<i64>) -> Result<bool, LaneError> {
        let mut down = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        match answer {
            Ok(granted) => {
                *down = None;
                Ok(*granted == 1)
            }
            Err(e) => {
                let since = *down.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= UNREACHABLE_FOR {
                    return Err(store_error(&self.url, e));
                }
                Ok(false)
            }
        }
    }

    /// The token script: reserve a token (and/or record a back-off of `backoff`) in Redis.
    async fn run_tokens(&self, lane: usize, backoff: Duration) -> Result<Admission, LaneError> {
        let Some(l) = self.lane(lane) else {
            return Ok(Admission::default());
        };
        let rate = l.rate;
        let mut inv = self.tokens.key(format!("{}:rate", l.key));
        inv.arg(rate.map_or(0.0, |r| r.per_sec))
            .arg(rate.map_or(0.0, |r| r.burst))
            .arg(if rate.is_some() { 1 } else { 0 })
            .arg(u64::try_from(backoff.as_micros()).unwrap_or(u64::MAX));
        // While Redis is away (a restart), retry like an acquisition does, for as long as the
        // store is not yet declared unreachable.
        let mut delay = Duration::from_millis(5);
        let (wait_us, token) = loop {
            let mut conn = self.conn.clone();
            let out: Result<(i64, i64), redis::RedisError> = inv.invoke_async(&mut conn).await;
            match out {
                Ok(v) => {
                    let _ = self.note_answer(&Ok(1));
                    break v;
                }
                Err(e) => {
                    self.note_answer(&Err(e))?;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(100));
                }
            }
        };
        Ok(Admission {
            wait: Duration::from_micros(wait_us.max(0) as u64),
            token: token == 1,
        })
    }
}

/// Permits held in Redis for one lease.
struct Permits {
    store: Arc<RedisLanes>,
    key: String,
    members: Vec<String>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Drop for Permits {
    fn drop(&mut self) {
        self.renewer.abort();
        let mut conn = self.store.conn.clone();
        let key = std::mem::take(&mut self.key);
        let members = std::mem::take(&mut self.members);
        // Best effort: if this never runs (the process exits), the lease lapses on its own.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _: Result<i64, _> = redis::cmd("ZREM")
                    .arg(&key)
                    .arg(&members)
                    .query_async(&mut conn)
                    .await;
            });
        }
    }
}

impl LaneStore for RedisLanes {
    fn for_lanes(&self, specs: &[LaneSpec]) -> Result<Arc<dyn LaneStore>, LaneError> {
        Ok(Arc::new(self.renewed(specs)))
    }

    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore> {
        Arc::new(crate::run::cache::RedisCache::new(
            self.conn.clone(),
            &self.ns,
            &self.url,
        ))
    }

    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            let lease = self.mem.clone().acquire(lane, weight, order).await?;
            match self.lane(lane) {
                Some(l) if l.limit > 0 => {
                    Ok(lease.with_shared(Box::new(self.take(lane, weight).await?)))
                }
                _ => Ok(lease),
            }
        })
    }

    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>> {
        if self.lane(lane).is_none() {
            return Answer::Now(self.mem.admit(lane));
        }
        Answer::Later(Box::pin(async move {
            self.run_tokens(lane, Duration::ZERO).await
        }))
    }

    fn back_off(self: Arc<Self>, lane: usize, wait: Duration) {
        self.mem.pause(lane, wait);
        if self.lane(lane).is_some() {
            tokio::spawn(async move {
                let _ = self
                    .run_tokens(lane, wait.max(Duration::from_micros(1)))
                    .await;
            });
        }
    }

    fn record_wait(&self, lane: usize, wait: Duration, token: bool) {
        self.mem.record_wait(lane, wait, token);
    }

    fn stats(&self) -> Vec<LaneStats> {
        self.mem.stats()
    }

    fn held_elsewhere(self: Arc<Self>, lane: usize) -> Answer<Option<u64>> {
        let key = match self.lane(lane) {
            Some(l) if l.limit > 0 && self.mem.should_probe(lane) => l.key.clone(),
            _ => return Answer::Now(None),
        };
        Answer::Later(Box::pin(async move {
            let mut conn = self.conn.clone();
            let total: u64 = redis::cmd("ZCARD")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .ok()?;
            let n = total.saturating_sub(self.mem.held_here(lane));
            self.mem.note_elsewhere(lane, n);
            Some(n)
        }))
    }
}
