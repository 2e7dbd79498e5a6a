//! Lanes: counting permits (with weights) and token buckets, behind the [`LaneStore`] trait.
//!
//! A call acquires its lanes one at a time in the plan's fixed order (tenant → turn → tool →
//! shared lanes by name) and releases them in reverse when its [`Lease`]s drop, so no two
//! calls can each hold what the other waits for. A rate-limited lane takes a token *after*
//! its permit. [`MemoryLanes`] (`memory.rs`) keeps everything in this process, on tokio's clock
//! (so tests run it on a paused clock); [`LocalLanes`] (`local.rs`) shares lanes between the
//! processes of one machine through file locks, [`RedisLanes`] (`redis.rs`) between machines.
//! One file per store. In this process a lane's permits are granted fairly
//! ([`OrderedSemaphore`], `fair.rs`): in call order within one [`Flow`] (a run, or a session
//! of `mcp serve`) — whichever task happens to be polled first, a later call never overtakes
//! an earlier one of its flow — round robin across the flows of a tenant and by weight
//! across tenants; the waiter chosen next is not starved by light ones behind it. Stores
//! shared across processes and machines implement the same trait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::plan::LaneSpec;

mod fair;
pub(crate) mod learn;
pub use learn::{Move, Sample, Why};
mod local;
mod memory;
mod redis;
pub(crate) mod window;
use crate::events::LaneStats;
pub(crate) use fair::{Flow, OrderedSemaphore};
pub(crate) use local::FileBoard;
pub use local::{runtime_dir, LocalLanes};
pub use memory::MemoryLanes;
pub(crate) use redis::{redact_url, RedisLanes};
pub(crate) use window::{refusal, Charge};

/// A call's backends and how it holds them, by name.
pub(crate) type Claims = Arc<[(String, crate::plan::Claim)]>;

pub(crate) use crate::store::{intents, records, BoxFuture, LaneError};

/// Permits held in one lane; dropping it gives them back.
pub struct Lease {
    sem: Option<Arc<OrderedSemaphore>>,
    counters: Arc<Counters>,
    weight: u64,
    /// What a shared store holds for this lease (file locks); dropped with it.
    shared: Option<Box<dyn Send + Sync>>,
    /// The call's backend read, taken with this lane ([`LaneStore::acquire_along`]).
    backend: Option<Box<dyn Send + Sync>>,
}

impl Lease {
    /// Attach what a cross-process store holds, released when the lease drops (and counted as
    /// running in the lane's semaphore until then).
    pub fn with_shared(mut self, guard: Box<dyn Send + Sync>) -> Lease {
        if let Some(sem) = &self.sem {
            sem.running(self.weight as i64);
        }
        self.shared = Some(guard);
        self
    }

    /// Hold the call's backend read too, taken with the lane in one step (given back just after it).
    pub fn with_backend(mut self, guard: Box<dyn Send + Sync>) -> Lease {
        self.backend = Some(guard);
        self
    }

    /// Whether the call's backend came with this lease (the call then holds it no more).
    pub fn holds_backend(&self) -> bool {
        self.backend.is_some()
    }

    /// Give the backend read back now: the call is about to wait for a lane, and no call
    /// waits for a lane while it holds a backend.
    pub fn give_back_backend(&mut self) {
        self.backend = None;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The shared hold first: the in-process waiter woken below looks for a shared slot at
        // once, and must find ours free (else it backs off for nothing).
        if self.shared.take().is_some() {
            if let Some(sem) = &self.sem {
                sem.running(-(self.weight as i64));
            }
        }
        // Then the read that came with it (a store may give it back with the lane, in one
        // step): the lane's release is what hands the lane on to the next call (another
        // process's, waking on its grant), so it goes to the store first; a read only ever
        // holds up a write.
        drop(self.backend.take());
        self.counters.held.fetch_sub(self.weight, Ordering::Relaxed);
        if let Some(sem) = &self.sem {
            sem.release(self.weight);
        }
    }
}

/// How long a call must wait after taking a permit, and whether that is for a rate token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Admission {
    pub wait: Duration,
    pub token: bool,
}

/// What a store answers: at once (in memory), or after I/O it must not block a runtime
/// thread on (a file lock another process holds, a round trip to Redis).
pub enum Answer<T> {
    Now(T),
    Later(BoxFuture<'static, T>),
}

impl<T: Send + 'static> Answer<T> {
    /// The answer as one future (no allocation when it is known already).
    pub fn boxed(self) -> BoxFuture<'static, T> {
        match self {
            Answer::Now(t) => Box::pin(std::future::ready(t)),
            Answer::Later(f) => f,
        }
    }

    pub async fn get(self) -> T {
        match self {
            Answer::Now(t) => t,
            Answer::Later(f) => f.await,
        }
    }
}

/// A lane as it stands in this process (for `/metrics`): its limit, the permits held and the
/// calls waiting here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupancy {
    pub lane: String,
    /// Its limit now (a learned lane's current one).
    pub limit: Option<u32>,
    /// A learned lane's last move, if it moved.
    pub learned: Option<learn::Move>,
    pub held: u64,
    pub waiting: u64,
    /// Who waits: (flow — a gateway session or a run —, tenant, how many calls).
    pub queue: Vec<(String, String, u64)>,
}

/// Entries every process sharing a store sees, under ids: the calls `mcp serve` parks for
/// approval (the Redis store keeps them for every replica; other stores have none, and the
/// gateway keeps files): its three facets.
pub trait Board: Entries + Answers + Beats {}

impl<T: Entries + Answers + Beats> Board for T {}

/// Which board: the calls `mcp serve` parks for approval, or the definitions `tools.lock`
/// holds back and the decisions on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardOf {
    Calls,
    Catalog,
}

impl BoardOf {
    /// Its name (a Redis key's, a folder's): the calls' board keeps its first name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BoardOf::Calls => "approval",
            BoardOf::Catalog => "catalog",
        }
    }
}

/// The board's entries: one per parked call, under its id.
pub trait Entries: Send + Sync {
    fn put(self: Arc<Self>, id: String, entry: String)
        -> BoxFuture<'static, Result<(), LaneError>>;
    fn entries(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>>;
    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>>;
    /// The ids of every entry (cheap: no entry is read).
    fn ids(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<String>, LaneError>>;
    /// The entries of `ids` that exist.
    fn get(self: Arc<Self>, ids: Vec<String>)
        -> BoxFuture<'static, Result<Vec<String>, LaneError>>;
    /// Replace entry `id` by `entry` only if it still reads `old` (one replica takes over a
    /// call another left); whether it did.
    fn claim(
        self: Arc<Self>,
        id: String,
        old: String,
        entry: String,
    ) -> BoxFuture<'static, Result<bool, LaneError>>;
}

/// The board's answers: given under a parked call's id, looked at by the gateway that waits.
pub trait Answers: Send + Sync {
    fn set_answer(
        self: Arc<Self>,
        id: String,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>>;
    fn answer(self: Arc<Self>, id: String)
        -> BoxFuture<'static, Result<Option<String>, LaneError>>;
    /// Every answer given, as (id, answer): what a waiting gateway looks at, once for all its
    /// parked calls.
    fn answers(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, String)>, LaneError>>;
}

/// The board's heartbeats: which gateways live (a parked call of a gateway that died is
/// taken over by another).
pub trait Beats: Send + Sync {
    /// Say that gateway `gateway` lives (Unix seconds `at`); its entries are renewed with it.
    fn beat(self: Arc<Self>, gateway: String, at: f64)
        -> BoxFuture<'static, Result<(), LaneError>>;
    /// When each gateway last said it lives.
    fn beats(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>>;
}

/// Where lane permits and tokens live, and what else runs share through a store — in
/// facets, so a store implements what it offers (the defaults are what a store that is not
/// shared answers): every type with the five is a `LaneStore`.
pub trait LaneStore: Connection + Lanes + LaneFigures + Backends + TenantSpend {}

impl<T: Connection + Lanes + LaneFigures + Backends + TenantSpend> LaneStore for T {}

/// A store's connection: the same store for another run's lane table, where it keeps
/// cached results and parked approvals, and whether it answers.
pub trait Connection: Send + Sync {
    /// Where this store keeps cached results (`cache = "…"` tools).
    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore>;
    /// The same store (its connection, its files, its in-process permits and buckets of
    /// lanes every run shares) for another run with lane table `specs`, whose calls wait as
    /// `flow` (each turn of `run --turns` plans its own lanes; each session of `mcp serve` is
    /// a flow of its own, served fairly beside the others).
    fn for_lanes(&self, specs: &[LaneSpec], flow: &Flow) -> Result<Arc<dyn LaneStore>, LaneError>;
    /// The board `of` this store shares with other machines (Redis), if any.
    fn board(&self, _of: BoardOf) -> Option<Arc<dyn Board>> {
        None
    }
    /// The intents (idempotency keys) this store shares with other machines (Redis), if any.
    fn intents(&self) -> Option<Arc<dyn intents::Intents>> {
        None
    }
    /// Records of `kind` this store shares with other machines (Redis), if any.
    fn records(&self, _kind: records::RecordKind) -> Option<Arc<dyn records::Records>> {
        None
    }
    /// Whether the store answers now (`/readyz`): a shared store is asked; memory always is.
    fn ping(self: Arc<Self>) -> BoxFuture<'static, Result<(), LaneError>> {
        Box::pin(async { Ok(()) })
    }
    /// Resolves once what the process still has to tell the store (permits given back as
    /// calls ended) has been said — awaited, briefly, before the process ends.
    fn settle(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// What a partner's answers tell its lanes: the latency and refusals a learned lane learns
/// from, and the quota it states. A store that keeps neither ignores them.
pub trait Heeds: Send + Sync {
    /// The answer to an attempt sent at `sent`, for a learned lane (`concurrency = "auto"`):
    /// the move it made to the lane's limit (or one made since the last answer), if any.
    fn observe(
        &self,
        lane: usize,
        sample: learn::Sample,
        sent: tokio::time::Instant,
    ) -> Option<learn::Move> {
        let _ = (lane, sample, sent);
        None
    }
    /// The backend stated its rate quota (`RateLimit`, `X-RateLimit-*` headers): `remaining`
    /// calls before `reset`. Spent, nothing more is admitted to `lane` until it resets — for
    /// every run sharing the lane, and not counted as a rejection.
    fn quota(self: Arc<Self>, lane: usize, remaining: u64, reset: Duration) {
        let _ = (lane, remaining, reset);
    }
}

/// Lane permits and rate tokens: what a call waits for before its tool starts (and, through
/// [`Heeds`], what its partner's answers tell them).
pub trait Lanes: Heeds + Send + Sync {
    /// `weight` permits of `lane` at once, when that needs no I/O and nobody waits for the
    /// lane (`None`: ask [`acquire`](Self::acquire), which queues in call order). What a call
    /// on a lane without a limit, or with room, pays: no future, no allocation.
    fn try_acquire(&self, lane: usize, weight: u32) -> Option<Lease> {
        let _ = (lane, weight);
        None
    }
    /// Wait for `weight` permits of `lane`; `order` is the call's position (earlier first).
    /// The returned future is polled once by the coordinator as soon as the call is ready, so
    /// waiters register in call order; the call's own task then awaits it.
    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>>;
    /// Whether a call's backend read may come with `lane` ([`acquire_along`](Self::acquire_along)):
    /// it is then asked for with the last such lane of the call.
    fn carries_along(&self, lane: usize) -> bool {
        let _ = lane;
        false
    }
    /// [`acquire`](Self::acquire), and in the same step, when it is free at once (nobody waits
    /// for it and it has room), the one backend read `along` the call holds after its lanes
    /// ([`backend`](Self::backend)): the lease then holds it too ([`Lease::holds_backend`]);
    /// otherwise the call asks for it after its lanes, as ever. What a call through a shared
    /// store saves is a round trip before its tool starts. A call that must still wait for a
    /// later lane gives the read back first ([`Lease::give_back_backend`]).
    fn acquire_along(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
        along: Claims,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        let _ = along;
        self.acquire(lane, weight, order)
    }
    /// After a permit of `lane` is held: reserve its rate token (if it has a rate) and say how
    /// long the caller must wait before dispatching — for the token, or while the lane backs
    /// off after a partner's 429. A store that must wait on a lock or a server answers
    /// [`Answer::Later`]; nothing here may block the runtime's threads.
    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>>;
    /// A partner answered 429 (or 503) with this wait: nothing more is admitted to `lane`
    /// until it has passed, and the rejection is counted. Returns at once: a store that must
    /// wait on a lock or a server does that work in the background.
    fn back_off(self: Arc<Self>, lane: usize, wait: Duration);
    /// Record that a call waited `wait` for `lane` (`token`: for a rate token).
    fn record_wait(&self, lane: usize, wait: Duration, token: bool);
}

/// What a store can say of its lanes: figures for the stats and the status page.
pub trait LaneFigures: Send + Sync {
    /// Figures for the stats.
    fn stats(&self) -> Vec<LaneStats>;
    /// For a lane shared with other runs: how many of its permits they hold now (counted into
    /// the stats' peak). `None` for a lane only this run uses.
    fn held_elsewhere(self: Arc<Self>, lane: usize) -> Answer<Option<u64>> {
        let _ = lane;
        Answer::Now(None)
    }
    /// Each limited lane's permits held and calls waiting in this process.
    fn occupancy(&self) -> Vec<Occupancy>;
}

/// The order of side effects across every run and gateway sharing the store.
pub trait Backends: Send + Sync {
    /// Whether calls hold their backends here ([`LaneStore::backend`]): a store other
    /// processes share. Inside one process the plan (a batch) or the gateway's arrival order
    /// already keeps them.
    fn orders_backends(&self) -> bool {
        false
    }
    /// [`backend`](Self::backend) at once, when that needs no waiting and no I/O (a read
    /// joining its process's hold): `None`, ask `backend`.
    fn try_backend(
        &self,
        backend: &str,
        claim: crate::plan::Claim,
    ) -> Option<Box<dyn Send + Sync>> {
        let _ = (backend, claim);
        None
    }
    /// Hold `backend` as `claim` against every run and gateway sharing the store, in the order
    /// they asked: a write waits for the reads and the write before it, a read for the write
    /// before it; reads overlap. Held until the returned guard drops.
    fn backend(
        self: Arc<Self>,
        backend: String,
        claim: crate::plan::Claim,
    ) -> BoxFuture<'static, Result<Box<dyn Send + Sync>, LaneError>> {
        let _ = (backend, claim);
        Box::pin(async { Ok(Box::new(()) as Box<dyn Send + Sync>) })
    }
    /// Hold the lock that keeps calls to a `parallel_safe = false` tool with identical
    /// arguments (`key`) from overlapping across runs. Inside one run its phases already
    /// serialize such calls, so a store that is not shared returns nothing to hold.
    fn exclusive(
        self: Arc<Self>,
        key: String,
    ) -> BoxFuture<'static, Result<Option<Box<dyn Send + Sync>>, LaneError>> {
        let _ = key;
        Box::pin(async { Ok(None) })
    }
}

/// Each tenant's spend over a window, shared by every run and gateway of the store.
pub trait TenantSpend: Send + Sync {
    /// Reserve `cost` of `tenant`'s spend over `window` (`[budget] per_tenant`), counted
    /// with every run and gateway sharing the store: granted (with an id to give it back
    /// under) or refused, with when enough of the window frees up.
    fn charge(
        self: Arc<Self>,
        tenant: String,
        window: crate::manifest::TenantWindow,
        cost: f64,
    ) -> BoxFuture<'static, Result<Charge, LaneError>>;
    /// Give back a reservation of `charge` (the call never reached its tool).
    fn refund(self: Arc<Self>, tenant: String, id: String);
}

#[derive(Default)]
pub(crate) struct Counters {
    pub held: AtomicU64,
    pub peak: AtomicU64,
    pub wait_ns: AtomicU64,
    pub waits: AtomicU64,
    pub rate_waits: AtomicU64,
    pub rejections: AtomicU64,
    /// 1 + the most permits other runs were seen holding (0: never looked).
    elsewhere_peak: AtomicU64,
    /// When other runs' permits were last counted (ms since the store began).
    probed_ms: AtomicU64,
}

/// A lane's rate (tokens per second, burst), if it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateSpec {
    pub per_sec: f64,
    pub burst: f64,
}

impl RateSpec {
    pub(crate) fn of(spec: &LaneSpec) -> Option<RateSpec> {
        spec.rate.map(|r| RateSpec {
            per_sec: r.per_second(),
            burst: f64::from(spec.burst.unwrap_or(r.count)),
        })
    }
}

/// A token bucket and a back-off pause, in seconds on some clock (an `Instant` base in
/// memory, the Unix epoch when shared through a file). Pure arithmetic, shared by the stores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TokenState {
    pub tokens: f64,
    /// Refill is counted from here (pushed into the future by a back-off).
    pub at: f64,
    /// Nothing is admitted before this time.
    pub paused_until: f64,
}

impl TokenState {
    pub(crate) fn full(rate: Option<RateSpec>, now: f64) -> TokenState {
        TokenState {
            tokens: rate.map_or(0.0, |r| r.burst),
            at: now,
            paused_until: 0.0,
        }
    }

    /// Admit one call at `now`: reserve its token (if the lane has a rate; the token is
    /// reserved even if not there yet, so waiters queue behind each other and the lane never
    /// exceeds its rate) and say how long it must wait.
    pub(crate) fn admit(&mut self, now: f64, rate: Option<RateSpec>) -> Admission {
        let paused = (self.paused_until - now).max(0.0);
        let Some(r) = rate else {
            return Admission {
                wait: Duration::from_secs_f64(paused),
                token: false,
            };
        };
        if now > self.at {
            self.tokens = (self.tokens + (now - self.at) * r.per_sec).min(r.burst);
            self.at = now;
        }
        self.tokens -= 1.0;
        let refill_starts = (self.at - now).max(0.0);
        let token_wait = if self.tokens >= 0.0 {
            refill_starts
        } else {
            refill_starts + -self.tokens / r.per_sec
        };
        Admission {
            wait: Duration::from_secs_f64(token_wait.max(paused)),
            token: token_wait > 0.0,
        }
    }

    /// A partner said "wait": pause admissions, and (for a rate lane) stop refilling, until then.
    pub(crate) fn back_off(&mut self, now: f64, wait: Duration, has_rate: bool) {
        let until = now + wait.as_secs_f64();
        self.paused_until = self.paused_until.max(until);
        if has_rate && self.at < until {
            self.tokens = self.tokens.min(0.0);
            self.at = until;
        }
    }
}
