//! Lanes: counting permits (with weights) and token buckets, behind the [`LaneStore`] trait.
//!
//! A call acquires its lanes one at a time in the plan's fixed order (tenant → turn → tool →
//! shared lanes by name) and releases them in reverse when its [`Lease`]s drop, so no two
//! calls can each hold what the other waits for. A rate-limited lane takes a token *after*
//! its permit. [`MemoryLanes`] keeps everything in this process. Its permits are granted
//! strictly in call order ([`OrderedSemaphore`]): whichever task happens to be polled first, a
//! lane never lets a later call overtake an earlier one waiting for it, and a heavy call at
//! the head is not starved by light ones behind it. Stores shared across processes and
//! machines implement the same trait.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::plan::LaneSpec;

mod local;
mod redis;
use crate::events::LaneStats;
pub use local::{runtime_dir, LocalLanes};
pub use redis::RedisLanes;

/// FNV-1a: a stable, short name for bytes (paths, lanes, fingerprints). Not for security.
pub fn fnv_hash(bytes: &[u8]) -> u64 {
    local::fnv(bytes)
}

/// A boxed future, for the object-safe store trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Permits held in one lane; dropping it gives them back.
pub struct Lease {
    sem: Option<Arc<OrderedSemaphore>>,
    counters: Arc<Counters>,
    weight: u64,
    /// What a shared store holds for this lease (file locks); dropped with it.
    shared: Option<Box<dyn Send + Sync>>,
}

impl Lease {
    /// Attach what a cross-process store holds, released when the lease drops.
    pub fn with_shared(mut self, guard: Box<dyn Send + Sync>) -> Lease {
        self.shared = Some(guard);
        self
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The shared hold first: the in-process waiter woken below looks for a shared slot at
        // once, and must find ours free (else it backs off for nothing).
        drop(self.shared.take());
        self.counters.held.fetch_sub(self.weight, Ordering::Relaxed);
        if let Some(sem) = &self.sem {
            sem.release(self.weight);
        }
    }
}

/// A counting semaphore whose waiters are served in order of a key (the call's position),
/// not of arrival.
pub struct OrderedSemaphore {
    state: Mutex<SemState>,
}

struct SemState {
    available: u64,
    waiters: std::collections::BTreeMap<u64, (u64, oneshot::Sender<()>)>,
}

impl OrderedSemaphore {
    pub fn new(permits: u64) -> OrderedSemaphore {
        OrderedSemaphore {
            state: Mutex::new(SemState {
                available: permits,
                waiters: Default::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SemState> {
        // The state stays consistent even if a holder panicked: every update is one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for `weight` permits; `key` orders the waiters (smaller first).
    pub async fn acquire(self: &Arc<Self>, key: u64, weight: u64) {
        let rx = {
            let mut s = self.lock();
            let first = s.waiters.keys().next().is_none_or(|&k| k > key);
            if first && s.available >= weight {
                s.available -= weight;
                return;
            }
            let (tx, rx) = oneshot::channel();
            s.waiters.insert(key, (weight, tx));
            rx
        };
        let mut guard = WaitGuard {
            sem: self,
            key,
            weight,
            armed: true,
        };
        let _ = rx.await;
        guard.armed = false;
    }

    pub fn release(&self, weight: u64) {
        let mut s = self.lock();
        s.available += weight;
        Self::grant(&mut s);
    }

    fn grant(s: &mut SemState) {
        while let Some((&key, &(w, _))) = s.waiters.iter().next() {
            if s.available < w {
                break;
            }
            if let Some((_, tx)) = s.waiters.remove(&key) {
                s.available -= w;
                if tx.send(()).is_err() {
                    s.available += w;
                }
            }
        }
    }
}

/// Takes a waiter out of the queue if its future is dropped (the run ended while it waited),
/// and gives back permits that were granted but never picked up.
struct WaitGuard<'a> {
    sem: &'a OrderedSemaphore,
    key: u64,
    weight: u64,
    armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.sem.lock();
        if s.waiters.remove(&self.key).is_none() {
            // Granted while we were being dropped: hand the permits on.
            s.available += self.weight;
        }
        OrderedSemaphore::grant(&mut s);
    }
}

/// How long a call must wait after taking a permit, and whether that is for a rate token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Admission {
    pub wait: Duration,
    pub token: bool,
}

/// Why a lane could not be acquired.
#[derive(Debug, Clone, thiserror::Error)]
#[error("lane store: {0}")]
pub struct LaneError(pub String);

/// Where lane permits and tokens live.
pub trait LaneStore: Send + Sync {
    /// Wait for `weight` permits of `lane`; `order` is the call's position (earlier first).
    /// The returned future is polled once by the coordinator as soon as the call is ready, so
    /// waiters register in call order; the call's own task then awaits it.
    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>>;
    /// After a permit of `lane` is held: reserve its rate token (if it has a rate) and say how
    /// long the caller must wait before dispatching — for the token, or while the lane backs
    /// off after a partner's 429.
    fn admission(&self, lane: usize) -> Result<Admission, LaneError>;
    /// A partner answered 429 (or 503) with this wait: nothing more is admitted to `lane`
    /// until it has passed, and the rejection is counted.
    fn back_off(&self, lane: usize, wait: Duration);
    /// Record that a call waited `wait` for `lane` (`token`: for a rate token).
    fn record_wait(&self, lane: usize, wait: Duration, token: bool);
    /// Figures for the stats.
    fn stats(&self) -> Vec<LaneStats>;
    /// For a lane shared with other runs: how many of its permits they hold now (counted into
    /// the stats' peak). `None` for a lane only this run uses.
    fn held_elsewhere(&self, lane: usize) -> Option<u64> {
        let _ = lane;
        None
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

#[derive(Default)]
struct Counters {
    held: AtomicU64,
    peak: AtomicU64,
    wait_ns: AtomicU64,
    waits: AtomicU64,
    rate_waits: AtomicU64,
    rejections: AtomicU64,
    /// 1 + the most permits other runs were seen holding (0: never looked).
    elsewhere_peak: AtomicU64,
    /// When other runs' permits were last counted (ms since the store began).
    probed_ms: AtomicU64,
}

/// A lane's rate (tokens per second, burst), if it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSpec {
    pub per_sec: f64,
    pub burst: f64,
}

impl RateSpec {
    pub fn of(spec: &LaneSpec) -> Option<RateSpec> {
        spec.rate.map(|r| RateSpec {
            per_sec: r.per_second(),
            burst: f64::from(spec.burst.unwrap_or(r.count)),
        })
    }
}

/// A token bucket and a back-off pause, in seconds on some clock (an `Instant` base in
/// memory, the Unix epoch when shared through a file). Pure arithmetic, shared by the stores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenState {
    pub tokens: f64,
    /// Refill is counted from here (pushed into the future by a back-off).
    pub at: f64,
    /// Nothing is admitted before this time.
    pub paused_until: f64,
}

impl TokenState {
    pub fn full(rate: Option<RateSpec>, now: f64) -> TokenState {
        TokenState {
            tokens: rate.map_or(0.0, |r| r.burst),
            at: now,
            paused_until: 0.0,
        }
    }

    /// Admit one call at `now`: reserve its token (if the lane has a rate; the token is
    /// reserved even if not there yet, so waiters queue behind each other and the lane never
    /// exceeds its rate) and say how long it must wait.
    pub fn admit(&mut self, now: f64, rate: Option<RateSpec>) -> Admission {
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
    pub fn back_off(&mut self, now: f64, wait: Duration, has_rate: bool) {
        let until = now + wait.as_secs_f64();
        self.paused_until = self.paused_until.max(until);
        if has_rate && self.at < until {
            self.tokens = self.tokens.min(0.0);
            self.at = until;
        }
    }
}

struct Lane {
    spec: LaneSpec,
    rate: Option<RateSpec>,
    tokens: Mutex<TokenState>,
    sem: Option<Arc<OrderedSemaphore>>,
    counters: Arc<Counters>,
}

/// Lanes kept in this process only.
pub struct MemoryLanes {
    lanes: Vec<Lane>,
    /// The clock rate buckets count from.
    base: Instant,
}

impl MemoryLanes {
    /// Permits this process holds in `lane`.
    pub(crate) fn held_here(&self, lane: usize) -> u64 {
        self.lanes
            .get(lane)
            .map_or(0, |l| l.counters.held.load(Ordering::Relaxed))
    }

    /// Whether to count other runs' permits of `lane` now: at most every 100 ms, so a queue of
    /// thousands of waiting calls does not probe the shared store thousands of times.
    pub(crate) fn should_probe(&self, lane: usize) -> bool {
        let Some(l) = self.lanes.get(lane) else {
            return false;
        };
        let now = u64::try_from(self.base.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = l.counters.probed_ms.load(Ordering::Relaxed);
        (last == 0 || now >= last + 100)
            && l.counters
                .probed_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Note that other runs hold `n` permits of `lane`.
    pub(crate) fn note_elsewhere(&self, lane: usize, n: u64) {
        if let Some(l) = self.lanes.get(lane) {
            l.counters
                .elsewhere_peak
                .fetch_max(n + 1, Ordering::Relaxed);
        }
    }

    pub fn new(specs: &[LaneSpec]) -> MemoryLanes {
        MemoryLanes {
            base: Instant::now(),
            lanes: specs
                .iter()
                .map(|s| Lane {
                    spec: s.clone(),
                    rate: RateSpec::of(s),
                    tokens: Mutex::new(TokenState::full(RateSpec::of(s), 0.0)),
                    sem: s
                        .limit
                        .map(|l| Arc::new(OrderedSemaphore::new(u64::from(l)))),
                    counters: Arc::new(Counters::default()),
                })
                .collect(),
        }
    }
}

impl LaneStore for MemoryLanes {
    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            let l = self
                .lanes
                .get(lane)
                .ok_or_else(|| LaneError(format!("no lane #{lane}")))?;
            let w = u64::from(weight);
            if let Some(sem) = &l.sem {
                sem.acquire(order, w).await;
            }
            let now = l.counters.held.fetch_add(w, Ordering::Relaxed) + w;
            l.counters.peak.fetch_max(now, Ordering::Relaxed);
            Ok(Lease {
                sem: l.sem.clone(),
                counters: l.counters.clone(),
                weight: w,
                shared: None,
            })
        })
    }

    fn admission(&self, lane: usize) -> Result<Admission, LaneError> {
        let Some(l) = self.lanes.get(lane) else {
            return Ok(Admission::default());
        };
        let mut st = l
            .tokens
            .lock()
            .map_err(|_| LaneError("rate bucket poisoned".into()))?;
        Ok(st.admit(self.base.elapsed().as_secs_f64(), l.rate))
    }

    fn back_off(&self, lane: usize, wait: Duration) {
        let Some(l) = self.lanes.get(lane) else {
            return;
        };
        l.counters.rejections.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut st) = l.tokens.lock() {
            st.back_off(self.base.elapsed().as_secs_f64(), wait, l.rate.is_some());
        }
    }

    fn record_wait(&self, lane: usize, wait: Duration, token: bool) {
        if let Some(l) = self.lanes.get(lane) {
            let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
            l.counters.wait_ns.fetch_add(ns, Ordering::Relaxed);
            l.counters.waits.fetch_add(1, Ordering::Relaxed);
            if token {
                l.counters.rate_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn stats(&self) -> Vec<LaneStats> {
        self.lanes
            .iter()
            .map(|l| LaneStats {
                lane: l.spec.name.clone(),
                limit: l.spec.limit,
                rate: l.spec.rate.map(|r| r.to_string()),
                peak_in_flight: l.counters.peak.load(Ordering::Relaxed),
                wait_ms: l.counters.wait_ns.load(Ordering::Relaxed) / 1_000_000,
                waits: l.counters.waits.load(Ordering::Relaxed),
                rate_limit_waits: l.counters.rate_waits.load(Ordering::Relaxed),
                rejections: l.counters.rejections.load(Ordering::Relaxed),
                peak_held_elsewhere: l
                    .counters
                    .elsewhere_peak
                    .load(Ordering::Relaxed)
                    .checked_sub(1),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Rate;
    use crate::plan::LaneKey;

    fn spec(limit: Option<u32>, rate: Option<Rate>, burst: Option<u32>) -> LaneSpec {
        LaneSpec {
            key: LaneKey::Turn,
            name: "turn".into(),
            limit,
            rate,
            burst,
            borrowed: false,
        }
    }

    #[tokio::test]
    async fn weights_take_several_permits_and_peaks_are_recorded() {
        let lanes = Arc::new(MemoryLanes::new(&[spec(Some(3), None, None)]));
        let a = lanes.clone().acquire(0, 2, 0).await.unwrap();
        let b = lanes.clone().acquire(0, 1, 1).await.unwrap();
        // A third acquisition must wait until something is released.
        let pending =
            tokio::time::timeout(Duration::from_millis(50), lanes.clone().acquire(0, 1, 2)).await;
        assert!(pending.is_err());
        drop(a);
        let c =
            tokio::time::timeout(Duration::from_millis(50), lanes.clone().acquire(0, 2, 3)).await;
        assert!(c.is_ok());
        drop(b);
        assert_eq!(lanes.stats()[0].peak_in_flight, 3);
    }

    #[tokio::test]
    async fn unbounded_lanes_never_wait() {
        let lanes = Arc::new(MemoryLanes::new(&[spec(None, None, None)]));
        let mut held = Vec::new();
        for _ in 0..1000 {
            held.push(lanes.clone().acquire(0, 1, 0).await.unwrap());
        }
        assert_eq!(lanes.stats()[0].peak_in_flight, 1000);
    }

    #[test]
    fn back_off_pauses_a_lane_and_its_bucket() {
        let rate = Rate {
            count: 100,
            per: Duration::from_secs(1),
        };
        let lanes = MemoryLanes::new(&[spec(None, Some(rate), None), spec(Some(4), None, None)]);
        lanes.back_off(0, Duration::from_millis(500));
        lanes.back_off(1, Duration::from_millis(300));
        let a = lanes.admission(0).unwrap();
        assert!(a.wait > Duration::from_millis(490) && a.token, "{a:?}");
        let b = lanes.admission(1).unwrap();
        assert!(b.wait > Duration::from_millis(290) && !b.token, "{b:?}");
        assert_eq!(lanes.stats()[0].rejections, 1);
    }

    #[tokio::test]
    async fn waiters_are_served_in_call_order_not_arrival_order() {
        let lanes = Arc::new(MemoryLanes::new(&[spec(Some(1), None, None)]));
        let first = lanes.clone().acquire(0, 1, 0).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Calls 9, 5 and 7 arrive in that order; they must be served 5, 7, 9.
        for order in [9u64, 5, 7] {
            let lanes = lanes.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let lease = lanes.acquire(0, 1, order).await.unwrap();
                let _ = tx.send(order);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(lease);
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(first);
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(rx.recv().await.unwrap());
        }
        assert_eq!(got, vec![5, 7, 9]);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_queue() {
        let sem = Arc::new(OrderedSemaphore::new(1));
        sem.acquire(0, 1).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(20), sem.acquire(1, 1)).await;
        assert!(gave_up.is_err());
        sem.release(1);
        // The abandoned waiter must not have swallowed the permit.
        tokio::time::timeout(Duration::from_millis(20), sem.acquire(2, 1))
            .await
            .unwrap();
    }

    #[test]
    fn token_bucket_allows_the_burst_then_spaces_calls() {
        let rate = Rate {
            count: 10,
            per: Duration::from_secs(1),
        };
        let lanes = MemoryLanes::new(&[spec(None, Some(rate), Some(2))]);
        assert_eq!(lanes.admission(0).unwrap().wait, Duration::ZERO);
        assert_eq!(lanes.admission(0).unwrap().wait, Duration::ZERO);
        let w3 = lanes.admission(0).unwrap().wait;
        let w4 = lanes.admission(0).unwrap().wait;
        assert!(
            w3 > Duration::from_millis(90) && w3 <= Duration::from_millis(100),
            "{w3:?}"
        );
        assert!(
            w4 > Duration::from_millis(190) && w4 <= Duration::from_millis(200),
            "{w4:?}"
        );
    }
}
