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

use crate::run::lanes::{Backends, Connection, LaneFigures, Lanes, TenantSpend};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::{
    Admission, Answer, BoxFuture, Flow, LaneError, LaneStore, Lease, MemoryLanes, RateSpec,
};
use crate::events::LaneStats;
use crate::plan::LaneSpec;

/// How long a lease lasts without renewal (`FLUX_TOOLS_LEASE_MS` overrides, for tests).
const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// How long a dispatch keeps trying an unreachable Redis before it fails.
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);
/// How long an ending process waits for its last permits to be given back (a Redis that is
/// away by then: they lapse with their lease).
const SETTLE_FOR: Duration = Duration::from_secs(2);

mod bell;
mod board;
mod pending;
mod scripts;
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
    let e = e.to_string();
    match tls_cause(&e) {
        Some(why) => LaneError(format!(
            "{url} is unreachable: {why} ({e})\nhint: make a CA, sign the server's certificate with it (its subjectAltName naming the host of the URL), and trust the CA: SSL_CERT_FILE=ca.pem (docs/src/semantics.md, \"Redis over TLS\")"
        )),
        None => LaneError(format!("{url} is unreachable: {e}")),
    }
}

/// A TLS certificate refusal, in rustls' words, said in ours.
fn tls_cause(e: &str) -> Option<&'static str> {
    [
        ("CaUsedAsEndEntity", "the server presents a CA certificate as its own (a self-signed certificate, as `openssl req -x509` makes one), which TLS refuses even when it is trusted"),
        ("UnknownIssuer", "the server's certificate is signed by a CA this machine does not trust"),
        ("NotValidForName", "the server's certificate does not name the host of the URL"),
        ("Expired", "the server's certificate has expired"),
    ]
    .into_iter()
    .find(|(word, _)| e.contains(word))
    .map(|(_, why)| why)
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
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| store_error(&redact_url(url), "no answer"))?
        .map_err(|e| store_error(&redact_url(url), e))?;
        load_scripts(&mut conn.clone()).await;
        let lease = std::env::var("FLUX_TOOLS_LEASE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_LEASE, Duration::from_millis)
            .max(Duration::from_millis(300));
        let ns = format!("{:016x}", crate::hash::fnv(namespace.as_bytes()));
        let lanes = redis_lanes(specs, &ns);
        Ok(RedisLanes {
            // Only ever shown, so only ever kept redacted.
            url: redact_url(url),
            conn,
            mem: Arc::new(MemoryLanes::new(specs)),
            paused: specs.iter().map(|_| std::sync::Mutex::new(None)).collect(),
            lanes,
            bells: bell::Bells::new(client.clone(), &ns),
            pending: Arc::default(),
            ns,
            lease,
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            release_along: Script::new(RELEASE_ALONG),
            leave: Script::new(LEAVE),
            renew: Script::new(RENEW),
            tokens: Script::new(TOKENS),
            down_since: std::sync::Mutex::new(None),
            flow: (format!("run-{:016x}", fastrand::u64(..)).into(), 1),
        })
    }

    /// The same connection and in-process lanes for another run's lane table; its calls
    /// queue as `flow` (a run's own flow: as this process's runs).
    fn renewed(&self, specs: &[LaneSpec], flow: &Flow) -> RedisLanes {
        let shared_as = if flow.name.is_empty() {
            self.flow.clone()
        } else {
            (flow.name.clone(), flow.weight.max(1))
        };
        RedisLanes {
            url: self.url.clone(),
            conn: self.conn.clone(),
            mem: Arc::new(self.mem.renewed(specs, flow)),
            lanes: redis_lanes(specs, &self.ns),
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

    /// The lease of `weight` permits of `lane`: this process's first, then the shared ones —
    /// with the call's backend read along when `along` asks for it and the lane has no rate
    /// (a wait for a token must not hold the read).
    fn lease(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
        along: Option<super::Claims>,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            let lease = self.mem.clone().acquire(lane, weight, order).await?;
            let Some(l) = self.lane(lane).filter(|l| l.limit > 0) else {
                return Ok(lease);
            };
            let read = along
                .filter(|_| l.rate.is_none())
                .and_then(|a| a.first().map(|(backend, _)| self.backend_key(backend)));
            let (key, limit, flow) = (l.key.clone(), l.limit, self.flow.clone());
            let (permits, paused_ms, read) = self
                .take_key(&key, limit, weight, (&flow.0, flow.1), read.as_deref())
                .await?;
            self.note_pause(lane, paused_ms);
            Ok(match read {
                Some(read) => {
                    // Given back with the lane in one script, or alone if the call lets go of
                    // it first (`Lease::give_back_backend`).
                    let read = Arc::new(std::sync::Mutex::new(Some(read)));
                    let mut permits = permits;
                    permits.along = Some(read.clone());
                    lease
                        .with_shared(Box::new(permits))
                        .with_backend(Box::new(ReadAlong(read)))
                }
                None => lease.with_shared(Box::new(permits)),
            })
        })
    }

    /// Where backend `name`'s read/write order lives.
    fn backend_key(&self, name: &str) -> String {
        format!("flux-tools:{}:backend:{name}", self.ns)
    }

    /// Take `weight` of the `limit` permits of the Redis lane `key`, queued as `flow` (an empty
    /// name: by arrival alone); with how long the lane is paused, in ms, and the read of the
    /// backend at `along` when it came with them.
    async fn take_key(
        self: &Arc<Self>,
        key: &str,
        limit: u32,
        weight: u32,
        flow: (&str, u32),
        along: Option<&str>,
    ) -> Result<(Permits, i64, Option<Permits>), LaneError> {
        let id = self.bells.ticket();
        let members: Vec<String> = (0..weight).map(|i| format!("{id}#{i}")).collect();
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(10_000);
        let queue_ms = u64::try_from(QUEUE_LEASE.as_millis()).unwrap_or(2_000);
        let bell = self.bells.bell(&format!("{}{id}", freed(key)));
        // Until granted, the ticket leaves the queue if this wait is abandoned (giving back
        // what a release may have granted it meanwhile).
        let mut place = Place {
            store: self.clone(),
            key: key.to_string(),
            limit,
            ticket: id.clone(),
            members: members.clone(),
            along: along.map(str::to_string),
            waiting: true,
        };
        let (paused_ms, handed, came) = loop {
            let mut inv = lane_keys(&self.acquire, key);
            inv.key(format!("{key}:seq"));
            if let Some(backend) = along {
                inv.key(backend);
            }
            inv.arg(limit).arg(lease_ms).arg(&id).arg(queue_ms);
            inv.arg(flow.0).arg(flow.1);
            inv.arg(u32::from(along.is_some())).arg(BACKEND_SLOTS);
            for m in &members {
                inv.arg(m);
            }
            let mut conn = self.conn.clone();
            let answer = inv.invoke_async::<(i64, i64, i64)>(&mut conn).await;
            let (paused_ms, earlier, came) = answer
                .as_ref()
                .map_or((0, false, false), |(g, ms, b)| (*ms, *g == 2, *b == 1));
            if self.note_answer(&answer.map(|(granted, _, _)| granted))? {
                break (paused_ms, earlier, came);
            }
            // A message sent between the try and this wait is kept by the bell
            // (`notify_one`), so it is never missed; one that says the release granted this
            // ticket ends the wait with no script.
            let _ = tokio::time::timeout(FALLBACK, bell.notify.notified()).await;
            if let Some((ms, came)) = bell.granted() {
                break (ms, true, came);
            }
        };
        place.waiting = false;
        let read = along.filter(|_| came).map(|backend| {
            let members = vec![format!("{id}#0")];
            self.permits(backend, BACKEND_SLOTS, members, handed)
        });
        Ok((self.permits(key, limit, members, handed), paused_ms, read))
    }

    /// `members` of lane `key` just granted, renewed while the call runs.
    fn permits(
        self: &Arc<Self>,
        key: &str,
        limit: u32,
        members: Vec<String>,
        handed: bool,
    ) -> Permits {
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(10_000);
        Permits {
            store: self.clone(),
            key: key.to_string(),
            limit,
            renewer: self.renew_while_held(key, &members, lease_ms, handed),
            members,
            along: None,
        }
    }

    /// Renew `members` while the call runs, every third of a lease — the first time within
    /// half a queue lease when a release granted them (until the ticket's queue lease only,
    /// which its last try had just pushed a queue lease ahead): a call shorter than that
    /// renews nothing.
    fn renew_while_held(
        self: &Arc<Self>,
        key: &str,
        members: &[String],
        lease_ms: u64,
        handed: bool,
    ) -> tokio::task::JoinHandle<()> {
        let (me, key, members) = (self.clone(), key.to_string(), members.to_vec());
        tokio::spawn(async move {
            let mut first = handed;
            loop {
                let every = me.lease / 3;
                if std::mem::take(&mut first) {
                    tokio::time::sleep(every.min(QUEUE_LEASE / 2)).await;
                } else {
                    tokio::time::sleep(every).await;
                }
                let mut inv = me.renew.key(&key);
                inv.arg(lease_ms);
                for m in &members {
                    inv.arg(m);
                }
                let mut conn = me.conn.clone();
                let _ = inv.invoke_async::<i64>(&mut conn).await;
            }
        })
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

/// Load every script up front (best effort). A script Redis does not know yet costs its first
/// run a `NOSCRIPT` answer and a second round trip: a release would then reach Redis after the
/// waiter it freed in this process had asked, and queue it behind its own permits. (A Redis
/// that restarts later forgets them; each is loaded again as it is first run.)
async fn load_scripts(conn: &mut ConnectionManager) {
    let mut pipe = redis::pipe();
    for code in [ACQUIRE, RELEASE, RELEASE_ALONG, LEAVE, RENEW, TOKENS, SPEND] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
    }
    let _: Result<(), _> = pipe.query_async(conn).await;
}

/// The prefix of the channels on which lane `key`'s waiters hear that a permit was freed and
/// they are next (`PREFIX` + their ticket).
fn freed(key: &str) -> String {
    format!("{key}:freed:")
}

/// The keys every lane script starts with, in the order `scripts.rs` names them.
fn lane_keys<'a>(script: &'a Script, key: &str) -> redis::ScriptInvocation<'a> {
    let mut inv = script.key(key);
    for k in ["queue", "qlease", "want", "flows", "rate"] {
        inv.key(format!("{key}:{k}"));
    }
    inv.key(freed(key));
    inv
}

/// A waiter's ticket in a lane's queue: taken out (so the next waiter is the head) when the
/// wait is abandoned before the grant.
struct Place {
    store: Arc<RedisLanes>,
    key: String,
    limit: u32,
    ticket: String,
    members: Vec<String>,
    /// The backend whose read the ticket asked for along with the lane.
    along: Option<String>,
    waiting: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.store
            .bells
            .forget(&format!("{}{}", freed(&self.key), self.ticket));
        if !self.waiting {
            return;
        }
        let store = self.store.clone();
        let mut conn = store.conn.clone();
        let (key, ticket, members, limit) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.ticket),
            std::mem::take(&mut self.members),
            self.limit,
        );
        let along = self.along.take();
        // If this never runs, the ticket (and anything granted to it) lapses after
        // `QUEUE_LEASE`.
        store.pending.clone().spawn(async move {
            let mut inv = lane_keys(&store.leave, &key);
            inv.arg(limit).arg(&ticket).arg(&members);
            let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
            if let Some(backend) = along {
                // A read a release granted along with the lane meanwhile.
                let mut inv = lane_keys(&store.release, &backend);
                inv.arg(BACKEND_SLOTS).arg(format!("{ticket}#0"));
                let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
            }
        });
    }
}

/// Permits held in Redis for one lease.
struct Permits {
    store: Arc<RedisLanes>,
    key: String,
    limit: u32,
    members: Vec<String>,
    renewer: tokio::task::JoinHandle<()>,
    /// The backend read that came with these permits, while the call holds it.
    along: Option<Arc<std::sync::Mutex<Option<Permits>>>>,
}

/// A backend read taken with its lane ([`LaneStore::acquire_along`]): the lane's [`Permits`]
/// give it back with their own release, in one script; dropped first, it goes back alone.
struct ReadAlong(Arc<std::sync::Mutex<Option<Permits>>>);

impl Drop for ReadAlong {
    fn drop(&mut self) {
        drop(self.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.members.is_empty() {
            return; // given back with the lane it came with
        }
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        let members = std::mem::take(&mut self.members);
        let limit = self.limit;
        let read = self.along.take().and_then(|a| {
            let mut read = a.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            read.renewer.abort();
            Some((
                std::mem::take(&mut read.key),
                std::mem::take(&mut read.members),
                read.limit,
            ))
        });
        // If this never runs, the lease lapses on its own.
        store.pending.clone().spawn(async move {
            let mut inv = match &read {
                Some((backend, read, backend_limit)) => {
                    let mut inv = lane_keys(&store.release_along, &key);
                    inv.key(backend).arg(limit).arg(backend_limit).arg(read);
                    inv
                }
                None => {
                    let mut inv = lane_keys(&store.release, &key);
                    inv.arg(limit);
                    inv
                }
            };
            inv.arg(&members);
            let mut conn = store.conn.clone();
            let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
        });
    }
}

impl Connection for RedisLanes {
    fn for_lanes(&self, specs: &[LaneSpec], flow: &Flow) -> Result<Arc<dyn LaneStore>, LaneError> {
        Ok(Arc::new(self.renewed(specs, flow)))
    }

    fn board(&self) -> Option<Arc<dyn super::Board>> {
        Some(Arc::new(board::RedisBoard {
            conn: self.conn.clone(),
            ns: self.ns.clone(),
            url: self.url.clone(),
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
                .take_key(&key, BACKEND_SLOTS, weight, ("", 1), None)
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
