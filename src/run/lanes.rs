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
use crate::report::events::LaneStats;

/// A boxed future, for the object-safe store trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Permits held in one lane; dropping it gives them back.
pub struct Lease {
    sem: Option<Arc<OrderedSemaphore>>,
    counters: Arc<Counters>,
    weight: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
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
}

#[derive(Default)]
struct Counters {
    held: AtomicU64,
    peak: AtomicU64,
    wait_ns: AtomicU64,
    waits: AtomicU64,
    rate_waits: AtomicU64,
    rejections: AtomicU64,
}

struct Bucket {
    per_sec: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

struct Lane {
    spec: LaneSpec,
    /// Nothing is admitted before this instant (a 429's Retry-After).
    paused_until: Mutex<Option<Instant>>,
    sem: Option<Arc<OrderedSemaphore>>,
    bucket: Option<Mutex<Bucket>>,
    counters: Arc<Counters>,
}

/// Lanes kept in this process only.
pub struct MemoryLanes {
    lanes: Vec<Lane>,
}

impl MemoryLanes {
    pub fn new(specs: &[LaneSpec]) -> MemoryLanes {
        let now = Instant::now();
        MemoryLanes {
            lanes: specs
                .iter()
                .map(|s| Lane {
                    spec: s.clone(),
                    paused_until: Mutex::new(None),
                    sem: s
                        .limit
                        .map(|l| Arc::new(OrderedSemaphore::new(u64::from(l)))),
                    bucket: s.rate.map(|r| {
                        let burst = f64::from(s.burst.unwrap_or(r.count));
                        Mutex::new(Bucket {
                            per_sec: r.per_second(),
                            burst,
                            tokens: burst,
                            at: now,
                        })
                    }),
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
            })
        })
    }

    fn admission(&self, lane: usize) -> Result<Admission, LaneError> {
        let Some(l) = self.lanes.get(lane) else {
            return Ok(Admission::default());
        };
        let now = Instant::now();
        let paused = l
            .paused_until
            .lock()
            .map_err(|_| LaneError("lane pause poisoned".into()))?
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        let Some(bucket) = l.bucket.as_ref() else {
            return Ok(Admission {
                wait: paused,
                token: false,
            });
        };
        let mut b = bucket
            .lock()
            .map_err(|_| LaneError("rate bucket poisoned".into()))?;
        if now > b.at {
            let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
            b.tokens = (b.tokens + elapsed * b.per_sec).min(b.burst);
            b.at = now;
        }
        // Reserve the token even if it is not there yet: waiters queue up behind each other
        // and the lane never exceeds its rate, even when a waiter gives up.
        b.tokens -= 1.0;
        let refill_starts = b.at.saturating_duration_since(now);
        let token_wait = if b.tokens >= 0.0 {
            refill_starts
        } else {
            refill_starts + Duration::from_secs_f64(-b.tokens / b.per_sec)
        };
        Ok(Admission {
            wait: token_wait.max(paused),
            token: !token_wait.is_zero(),
        })
    }

    fn back_off(&self, lane: usize, wait: Duration) {
        let Some(l) = self.lanes.get(lane) else {
            return;
        };
        l.counters.rejections.fetch_add(1, Ordering::Relaxed);
        let until = Instant::now() + wait;
        if let Ok(mut p) = l.paused_until.lock() {
            if p.is_none_or(|cur| cur < until) {
                *p = Some(until);
            }
        }
        // A rate lane also stops refilling until then, so the partner sees no burst after it.
        if let Some(bucket) = &l.bucket {
            if let Ok(mut b) = bucket.lock() {
                if b.at < until {
                    b.tokens = b.tokens.min(0.0);
                    b.at = until;
                }
            }
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
