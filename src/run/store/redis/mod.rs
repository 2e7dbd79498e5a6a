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
//! `lane_store` error. Inside a process calls still queue in memory first (fairly across flows,
//! `fair.rs`); in Redis a lane's queue is fair across flows too — each gateway session, or each
//! process's runs, is a flow (`scripts.rs`). A backend's read/write order is a lane of its own,
//! queued by arrival alone; a tenant's window spend is a sorted set.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{
    Admission, Answer, BoxFuture, Flow, LaneError, LaneStore, Lease, MemoryLanes, RateSpec,
};
use crate::events::LaneStats;
use crate::plan::LaneSpec;
use crate::run::store::{Backends, Connection, LaneFigures, Lanes, TenantSpend};

/// How long a lease lasts without renewal (`FLUX_TOOLS_LEASE_MS` overrides, for tests).
const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// How long a dispatch keeps trying an unreachable Redis before it fails.
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);
/// How long an ending process waits for its last permits to be given back (a Redis that is
/// away by then: they lapse with their lease).
const SETTLE_FOR: Duration = Duration::from_secs(2);

mod bell;
mod board;
mod connect;
mod intents;
mod learn;
mod pending;
mod permits;
mod records;
mod scripts;
pub(crate) use connect::redact_url;
use connect::store_error;
use scripts::{ACQUIRE, LEAVE, RELEASE, RELEASE_ALONG, RENEW, SPEND, TOKENS};

/// The longest a waiter waits for a "freed" message before trying again (a lost message costs
/// this much, never a hang); each try also renews its place in the queue. Each try is a script:
/// at 100 ms the waiters of eight processes on one lane ran a third of Redis's scripts this way,
/// and took the CPU a handoff needed (`benches/README.md`). A grant a release hands on lasts
/// until the ticket's place would lapse, at least `QUEUE_LEASE - FALLBACK` ahead: more than the
/// half a queue lease after which its holder first renews it.
const FALLBACK: Duration = Duration::from_millis(400);
/// How long a waiter keeps its place in the queue without trying again (a crashed waiter's
/// place lapses after this).
const QUEUE_LEASE: Duration = Duration::from_secs(2);
/// A backend's read/write order is a lane of this many permits, queued by arrival alone: a
/// read takes one (reads overlap), a write all of them (it waits for everything before it).
const BACKEND_SLOTS: u32 = 64;

struct RedisLane {
    key: String,
    limit: u32,
    rate: Option<RateSpec>,
    /// A learned lane's learner: its limit is the one in force.
    learner: Option<Arc<crate::run::store::learn::Learner>>,
}

impl RedisLane {
    /// The limit in force (a learned lane's current one).
    fn limit(&self) -> u32 {
        self.learner.as_ref().map_or(self.limit, |l| l.limit())
    }
}

/// Lanes shared through Redis.
pub(crate) struct RedisLanes {
    url: String,
    /// Reconnects by itself when Redis restarts (a request during the outage fails and is
    /// retried by the caller, within `UNREACHABLE_FOR`).
    conn: ConnectionManager,
    mem: Arc<MemoryLanes>,
    lanes: Vec<Option<RedisLane>>,
    /// The manifest's namespace in key names.
    ns: String,
    /// "Freed" messages, shared by this process's stores.
    bells: Arc<bell::Bells>,
    /// Messages sent from `Drop`, waited for before the process ends.
    pending: Arc<pending::Pending>,
    /// Per lane: until when its last grant said it is paused.
    paused: Vec<std::sync::Mutex<Option<tokio::time::Instant>>>,
    lease: Duration,
    acquire: Script,
    release: Script,
    release_along: Script,
    leave: Script,
    renew: Script,
    tokens: Script,
    /// Since when Redis has failed every attempt (shared by all calls, so once it has been
    /// down for a while each further dispatch fails after one try, not after its own wait).
    down_since: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// The flow this store's calls queue as in Redis (a session, or this process's runs) and
    /// its weight: queues are fair across flows (see `scripts.rs`).
    flow: (Arc<str>, u32),
}

/// The lanes of `specs` that live in Redis (shared across runs, with a limit or a rate); a
/// learned one's learner (in `mem`) exchanges with Redis from now on.
fn redis_lanes(
    specs: &[LaneSpec],
    ns: &str,
    mem: &MemoryLanes,
    conn: &ConnectionManager,
) -> Vec<Option<RedisLane>> {
    let lane = |(i, s): (usize, &LaneSpec)| {
        let key = format!("flux-tools:{ns}:{}", s.name);
        let learner = mem.learner(i);
        if let Some(l) = &learner {
            let judge = learn::RedisJudge::new(conn.clone(), &key);
            crate::run::store::learn::keep_exchanging(l, Arc::new(judge));
        }
        RedisLane {
            key,
            limit: s.limit.unwrap_or(0),
            rate: RateSpec::of(s),
            learner,
        }
    };
    (specs.iter().enumerate())
        .map(|(i, s)| {
            let shared = s.key.across_runs() && !s.borrowed;
            (shared && (s.limit.is_some() || s.rate.is_some())).then(|| lane((i, s)))
        })
        .collect()
}

impl RedisLanes {
    /// The same connection and in-process lanes for another run's lane table; its calls
    /// queue as `flow` (a run's own flow: as this process's runs).
    fn renewed(&self, specs: &[LaneSpec], flow: &Flow) -> RedisLanes {
        let shared_as = if flow.name.is_empty() {
            self.flow.clone()
        } else {
            (flow.name.clone(), flow.weight.max(1))
        };
        let mem = Arc::new(self.mem.renewed(specs, flow));
        RedisLanes {
            url: self.url.clone(),
            conn: self.conn.clone(),
            lanes: redis_lanes(specs, &self.ns, &mem, &self.conn),
            mem,
            paused: specs.iter().map(|_| std::sync::Mutex::new(None)).collect(),
            bells: self.bells.clone(),
            pending: self.pending.clone(),
            ns: self.ns.clone(),
            lease: self.lease,
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            release_along: Script::new(RELEASE_ALONG),
            leave: Script::new(LEAVE),
            renew: Script::new(RENEW),
            tokens: Script::new(TOKENS),
            down_since: std::sync::Mutex::new(None),
            flow: shared_as,
        }
    }

    fn lane(&self, lane: usize) -> Option<&RedisLane> {
        self.lanes.get(lane).and_then(Option::as_ref)
    }

    /// Where backend `name`'s read/write order lives.
    fn backend_key(&self, name: &str) -> String {
        format!("flux-tools:{}:backend:{name}", self.ns)
    }

    /// What the grant said of the lane's pause (another process's Retry-After): admissions
    /// to a lane without a rate wait for it without asking Redis again.
    fn note_pause(&self, lane: usize, ms: i64) {
        if let Some(p) = self.paused.get(lane) {
            let until = (ms > 0)
                .then(|| tokio::time::Instant::now() + Duration::from_millis(ms.unsigned_abs()));
            *p.lock().unwrap_or_else(|e| e.into_inner()) = until;
        }
    }

    /// Record whether Redis answered; `Ok(true)` when the permits were granted, `Err` once it
    /// has been unreachable for too long.
    fn note_answer(&self, answer: &redis::RedisResult<i64>) -> Result<bool, LaneError> {
        let mut down = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        match answer {
            Ok(granted) => {
                *down = None;
                Ok(*granted >= 1)
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

impl Connection for RedisLanes {
    fn for_lanes(&self, specs: &[LaneSpec], flow: &Flow) -> Result<Arc<dyn LaneStore>, LaneError> {
        Ok(Arc::new(self.renewed(specs, flow)))
    }

    fn board(&self, of: super::BoardOf) -> Option<Arc<dyn super::Board>> {
        Some(Arc::new(board::RedisBoard {
            conn: self.conn.clone(),
            ns: self.ns.clone(),
            url: self.url.clone(),
            of,
        }))
    }

    fn intents(&self) -> Option<Arc<dyn super::intents::Intents>> {
        Some(Arc::new(intents::RedisIntents {
            conn: self.conn.clone(),
            ns: self.ns.clone(),
            url: self.url.clone(),
        }))
    }

    fn records(
        &self,
        kind: super::records::RecordKind,
    ) -> Option<Arc<dyn super::records::Records>> {
        Some(Arc::new(records::RedisRecords {
            conn: self.conn.clone(),
            ns: self.ns.clone(),
            url: self.url.clone(),
            kind: kind.name().to_string(),
        }))
    }

    fn settle(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout(SETTLE_FOR, self.pending.settled()).await;
        })
    }

    fn ping(self: Arc<Self>) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let cmd = redis::cmd("PING");
            let ask = cmd.query_async::<String>(&mut conn);
            match tokio::time::timeout(Duration::from_secs(1), ask).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(store_error(&self.url, e)),
                Err(_) => Err(store_error(&self.url, "no answer within 1s")),
            }
        })
    }

    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore> {
        Arc::new(crate::run::cache::RedisCache::new(
            self.conn.clone(),
            &self.ns,
            &self.url,
        ))
    }
}

impl RedisLanes {
    /// Pause `lane` in Redis for `wait`, for every process (in the background).
    fn pause_shared(self: Arc<Self>, lane: usize, wait: Duration) {
        if self.lane(lane).is_some() {
            tokio::spawn(async move {
                let _ = self
                    .run_tokens(lane, wait.max(Duration::from_micros(1)))
                    .await;
            });
        }
    }
}

impl crate::run::store::Heeds for RedisLanes {
    fn quota(self: Arc<Self>, lane: usize, remaining: u64, reset: Duration) {
        self.mem.heed(lane, remaining, reset);
        if remaining == 0 {
            self.pause_shared(lane, reset);
        }
    }

    fn observe(
        &self,
        lane: usize,
        sample: crate::run::store::Sample,
        sent: tokio::time::Instant,
    ) -> Option<crate::run::store::Move> {
        self.mem.observe(lane, sample, sent)
    }
}

impl Lanes for RedisLanes {
    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        self.lease(lane, weight, order, None)
    }

    /// An in-process lane (no Redis key) with room: taken at once, with no future.
    fn try_acquire(&self, lane: usize, weight: u32) -> Option<Lease> {
        match self.lane(lane) {
            None => self.mem.try_acquire(lane, weight),
            Some(_) => None,
        }
    }

    fn carries_along(&self, lane: usize) -> bool {
        self.lane(lane)
            .is_some_and(|l| l.limit > 0 && l.rate.is_none())
    }

    fn acquire_along(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
        along: super::Claims,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        self.lease(lane, weight, order, Some(along))
    }

    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>> {
        match self.lane(lane) {
            None => return Answer::Now(self.mem.admit(lane)),
            // A permit lane without a rate: its grant just said how long it is paused.
            Some(l) if l.rate.is_none() && l.limit > 0 => {
                let shared = self.paused.get(lane).and_then(|p| {
                    let until = *p.lock().unwrap_or_else(|e| e.into_inner());
                    until.map(|u| u.saturating_duration_since(tokio::time::Instant::now()))
                });
                return Answer::Now(self.mem.admit(lane).map(|mut a| {
                    a.wait = a.wait.max(shared.unwrap_or_default());
                    a
                }));
            }
            Some(_) => {}
        }
        Answer::Later(Box::pin(async move {
            self.run_tokens(lane, Duration::ZERO).await
        }))
    }

    fn back_off(self: Arc<Self>, lane: usize, wait: Duration) {
        self.mem.pause(lane, wait);
        self.pause_shared(lane, wait);
    }

    fn record_wait(&self, lane: usize, wait: Duration, token: bool) {
        self.mem.record_wait(lane, wait, token);
    }
}

impl LaneFigures for RedisLanes {
    fn occupancy(&self) -> Vec<super::Occupancy> {
        self.mem.occupancy_of(true)
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

impl Backends for RedisLanes {
    fn orders_backends(&self) -> bool {
        true
    }

    fn backend(
        self: Arc<Self>,
        backend: String,
        claim: crate::plan::Claim,
    ) -> BoxFuture<'static, Result<Box<dyn Send + Sync>, LaneError>> {
        Box::pin(async move {
            let key = self.backend_key(&backend);
            // A concurrent write overlaps its like (and, across processes, reads).
            let weight = match claim {
                crate::plan::Claim::Read | crate::plan::Claim::ConcurrentWrite => 1,
                crate::plan::Claim::Write => BACKEND_SLOTS,
            };
            let (held, _, _) = self
                .take_key(
                    &key,
                    permits::Live(BACKEND_SLOTS, None),
                    weight,
                    ("", 1),
                    None,
                )
                .await?;
            Ok(Box::new(held) as Box<dyn Send + Sync>)
        })
    }
}

impl TenantSpend for RedisLanes {
    fn charge(
        self: Arc<Self>,
        tenant: String,
        window: crate::manifest::TenantWindow,
        cost: f64,
    ) -> BoxFuture<'static, Result<super::Charge, LaneError>> {
        Box::pin(async move {
            let key = format!("flux-tools:{}:spend:{tenant}", self.ns);
            let id = format!("{:016x}", fastrand::u64(..));
            let cost_text = cost.to_string();
            let window_ms = u64::try_from(window.window.as_millis()).unwrap_or(u64::MAX);
            let script = Script::new(SPEND);
            let mut inv = script.key(&key);
            inv.arg(window_ms)
                .arg(window.max_cost.to_string())
                .arg(&cost_text)
                .arg(&id);
            let mut conn = self.conn.clone();
            let (granted, spent, ms): (i64, String, i64) = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| store_error(&self.url, e))?;
            Ok(if granted == 1 {
                super::Charge::Granted(format!("{id}|{cost_text}"))
            } else {
                super::Charge::Refused {
                    spent: spent.parse().unwrap_or(0.0),
                    frees_in: u64::try_from(ms).ok().map(Duration::from_millis),
                }
            })
        })
    }

    fn refund(self: Arc<Self>, tenant: String, id: String) {
        let key = format!("flux-tools:{}:spend:{tenant}", self.ns);
        let mut conn = self.conn.clone();
        self.pending.spawn(async move {
            let _: Result<i64, _> = redis::cmd("ZREM")
                .arg(&key)
                .arg(&id)
                .query_async(&mut conn)
                .await;
        });
    }
}
