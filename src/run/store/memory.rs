//! [`MemoryLanes`]: every lane in this process. Permits through [`OrderedSemaphore`]s (served
//! in call order within a flow, fairly across flows), rate tokens from a bucket on tokio's clock, so a test on the paused clock
//! sees exact waits. The other stores keep their in-process half here too.

use crate::run::store::Backends;
use crate::run::store::{Connection, LaneFigures, Lanes, TenantSpend};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::learn::{Learner, Move, Sample};
use super::{
    Admission, Answer, BoxFuture, Counters, Flow, LaneError, LaneStore, Lease, OrderedSemaphore,
    RateSpec, TokenState,
};
use crate::events::LaneStats;
use crate::plan::LaneSpec;

struct Lane {
    spec: LaneSpec,
    rate: Option<RateSpec>,
    tokens: Arc<Mutex<TokenState>>,
    sem: Option<Arc<OrderedSemaphore>>,
    counters: Arc<Counters>,
    /// A learned lane's learner (`concurrency = "auto"`), which sizes `sem`.
    learner: Option<Arc<Learner>>,
}

impl Lane {
    /// A new lane of `s` (its bucket full at `now`, seconds on the store's clock); a learned
    /// one only gathers its answers when `shares` (a shared store judges them).
    fn new(s: &LaneSpec, now: f64, shares: bool) -> Lane {
        let sem = s.limit.map(|l| {
            let start = s.auto.map_or(l, |a| a.start);
            Arc::new(OrderedSemaphore::new(u64::from(start)))
        });
        let shared = shares && s.key.across_runs() && !s.borrowed;
        let learner = s
            .auto
            .zip(sem.clone())
            .map(|(a, sem)| Learner::new(a, sem, shared));
        Lane {
            spec: s.clone(),
            rate: RateSpec::of(s),
            tokens: Arc::new(Mutex::new(TokenState::full(RateSpec::of(s), now))),
            sem,
            counters: Arc::new(Counters::default()),
            learner,
        }
    }

    /// The limit in force: a learned lane's current one.
    fn limit(&self) -> Option<u32> {
        match &self.learner {
            Some(l) => Some(l.limit()),
            None => self.spec.limit,
        }
    }

    /// The lease of `w` permits just taken from the semaphore (if any): counted as held.
    fn lease(&self, w: u64) -> Lease {
        let now = self.counters.held.fetch_add(w, Ordering::Relaxed) + w;
        self.counters.peak.fetch_max(now, Ordering::Relaxed);
        Lease {
            sem: self.sem.clone(),
            counters: self.counters.clone(),
            weight: w,
            shared: None,
            backend: None,
        }
    }
}

/// Lanes kept in this process only.
pub struct MemoryLanes {
    lanes: Vec<Lane>,
    /// The clock rate buckets count from.
    base: Instant,
    /// Cached results (this process only).
    cache: Arc<crate::run::cache::MemoryCache>,
    /// Who this store's calls wait as, beside other runs' and sessions' calls.
    flow: Flow,
    /// Tenants' spend over their window (this process only).
    ledger: Arc<super::window::Ledger>,
    /// Whether a shared store judges its learned lanes (this process only gathers answers).
    shares: bool,
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

    /// Reserve a token of `lane` (see [`LaneStore::admission`]).
    pub fn admit(&self, lane: usize) -> Result<Admission, LaneError> {
        let Some(l) = self.lanes.get(lane) else {
            return Ok(Admission::default());
        };
        let mut st = l
            .tokens
            .lock()
            .map_err(|_| LaneError("rate bucket poisoned".into()))?;
        // A lane without a rate that was never paused admits at once: no clock to read.
        if l.rate.is_none() && st.paused_until <= 0.0 {
            return Ok(Admission::default());
        }
        Ok(st.admit(self.base.elapsed().as_secs_f64(), l.rate))
    }

    /// Pause `lane` for `wait` and count the rejection (see [`LaneStore::back_off`]).
    pub fn pause(&self, lane: usize, wait: Duration) {
        let Some(l) = self.lanes.get(lane) else {
            return;
        };
        l.counters.rejections.fetch_add(1, Ordering::Relaxed);
        self.hold(lane, wait);
    }

    /// Pause `lane` for `wait` (a partner's spent quota: no rejection).
    pub(crate) fn hold(&self, lane: usize, wait: Duration) {
        let Some(l) = self.lanes.get(lane) else {
            return;
        };
        if let Ok(mut st) = l.tokens.lock() {
            st.back_off(self.base.elapsed().as_secs_f64(), wait, l.rate.is_some());
        }
    }

    /// A stated quota: a rate lane's bucket holds no more tokens than remain; spent, the lane
    /// waits for the reset.
    pub(crate) fn heed(&self, lane: usize, remaining: u64, reset: Duration) {
        let Some(l) = self.lanes.get(lane) else {
            return;
        };
        if remaining == 0 {
            return self.hold(lane, reset);
        }
        if let (Some(_), Ok(mut st)) = (l.rate, l.tokens.lock()) {
            st.tokens = st.tokens.min(remaining as f64);
        }
    }

    pub fn new(specs: &[LaneSpec]) -> MemoryLanes {
        MemoryLanes::sharing(specs, false)
    }

    /// The in-process half of a shared store (`shares`: its learned lanes are judged there).
    pub(crate) fn sharing(specs: &[LaneSpec], shares: bool) -> MemoryLanes {
        MemoryLanes {
            base: Instant::now(),
            cache: Arc::new(crate::run::cache::MemoryCache::new()),
            flow: Flow::default(),
            ledger: Arc::default(),
            lanes: specs.iter().map(|s| Lane::new(s, 0.0, shares)).collect(),
            shares,
        }
    }

    /// Lane `lane`'s learner, if it learns its limit.
    pub(crate) fn learner(&self, lane: usize) -> Option<Arc<Learner>> {
        self.lanes.get(lane).and_then(|l| l.learner.clone())
    }
}

impl MemoryLanes {
    /// Each shared, limited lane's occupancy; `shared`: the store holds a shared part too (a
    /// lease counts as in flight only once it has it).
    pub(crate) fn occupancy_of(&self, shared: bool) -> Vec<super::Occupancy> {
        // The lanes every run and session shares (a run's own turn lane is its own).
        let across = self.lanes.iter().filter(|l| l.spec.key.across_runs());
        let limited = across.filter_map(|l| l.sem.as_ref().map(|s| (l, s)));
        limited
            .map(|(l, sem)| super::Occupancy {
                lane: l.spec.name.clone(),
                limit: l.limit(),
                learned: l.learner.as_ref().and_then(|l| l.last_move()),
                held: if shared {
                    sem.shared_held()
                } else {
                    sem.held()
                },
                waiting: sem.waiting()
                    + if shared {
                        sem.held().saturating_sub(sem.shared_held())
                    } else {
                        0
                    },
                queue: sem.queue(),
            })
            .collect()
    }

    /// The same lanes for the next run of this process (a `--turns` turn) with lane table
    /// `specs`: a lane every run shares (tenant, tool, declared) that is declared the same keeps
    /// its permits and its rate bucket — so a partner's limit holds across turns — with fresh
    /// figures; the rest is new. The cache and the clock are kept; its calls wait as `flow`.
    pub fn renewed(&self, specs: &[LaneSpec], flow: &Flow) -> MemoryLanes {
        let lanes = specs
            .iter()
            .map(|s| {
                let kept = self.lanes.iter().find(|l| {
                    s.key.across_runs()
                        && l.spec.key == s.key
                        && l.spec.limit == s.limit
                        && l.spec.auto == s.auto
                        && l.spec.rate == s.rate
                        && l.spec.burst == s.burst
                });
                match kept {
                    Some(l) => Lane {
                        spec: s.clone(),
                        rate: l.rate,
                        tokens: l.tokens.clone(),
                        sem: l.sem.clone(),
                        counters: Arc::new(Counters::default()),
                        learner: l.learner.clone(),
                    },
                    None => Lane::new(s, self.base.elapsed().as_secs_f64(), self.shares),
                }
            })
            .collect();
        MemoryLanes {
            lanes,
            base: self.base,
            cache: self.cache.clone(),
            flow: flow.clone(),
            ledger: self.ledger.clone(),
            shares: self.shares,
        }
    }
}

impl Connection for MemoryLanes {
    fn for_lanes(&self, specs: &[LaneSpec], flow: &Flow) -> Result<Arc<dyn LaneStore>, LaneError> {
        Ok(Arc::new(self.renewed(specs, flow)))
    }

    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore> {
        self.cache.clone()
    }
}

impl crate::run::store::Heeds for MemoryLanes {
    fn quota(self: Arc<Self>, lane: usize, remaining: u64, reset: Duration) {
        self.heed(lane, remaining, reset);
    }

    fn observe(&self, lane: usize, sample: Sample, sent: Instant) -> Option<Move> {
        self.lanes
            .get(lane)?
            .learner
            .as_ref()?
            .observe(sample, sent)
    }
}

impl Lanes for MemoryLanes {
    fn try_acquire(&self, lane: usize, weight: u32) -> Option<Lease> {
        let l = self.lanes.get(lane)?;
        let w = u64::from(weight);
        if let Some(sem) = &l.sem {
            if !sem.try_acquire(w) {
                return None;
            }
        }
        Some(l.lease(w))
    }

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
                sem.acquire(&self.flow, order, w).await;
            }
            Ok(l.lease(w))
        })
    }

    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>> {
        Answer::Now(self.admit(lane))
    }

    fn back_off(self: Arc<Self>, lane: usize, wait: Duration) {
        self.pause(lane, wait);
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
}

impl LaneFigures for MemoryLanes {
    fn occupancy(&self) -> Vec<super::Occupancy> {
        self.occupancy_of(false)
    }

    fn held_elsewhere(self: Arc<Self>, lane: usize) -> Answer<Option<u64>> {
        // A run's own lanes are its alone; a session's are shared with the gateway's others.
        let Some(sem) = self.lanes.get(lane).and_then(|l| l.sem.as_ref()) else {
            return Answer::Now(None);
        };
        if self.flow.id == 0 {
            return Answer::Now(None);
        }
        let n = sem.held().saturating_sub(self.held_here(lane));
        self.note_elsewhere(lane, n);
        Answer::Now(Some(n))
    }

    fn stats(&self) -> Vec<LaneStats> {
        self.lanes
            .iter()
            .map(|l| LaneStats {
                lane: l.spec.name.clone(),
                limit: l.limit(),
                learned: l.learner.as_ref().map(|l| l.learned()),
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

/// One process: the plan and the gateway's arrival order keep its backends.
impl Backends for MemoryLanes {}

impl TenantSpend for MemoryLanes {
    fn charge(
        self: Arc<Self>,
        tenant: String,
        window: crate::manifest::TenantWindow,
        cost: f64,
    ) -> BoxFuture<'static, Result<super::Charge, LaneError>> {
        let got = self.ledger.charge(&tenant, &window, cost);
        Box::pin(std::future::ready(Ok(got)))
    }

    fn refund(self: Arc<Self>, tenant: String, id: String) {
        self.ledger.refund(&tenant, &id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Rate;
    use crate::plan::LaneKey;

    fn spec(limit: Option<u32>, rate: Option<Rate>, burst: Option<u32>) -> LaneSpec {
        LaneSpec {
            auto: None,
            learned: None,
            key: LaneKey::Turn,
            name: "turn".into(),
            limit,
            rate,
            burst,
            borrowed: false,
        }
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn back_off_pauses_a_lane_and_its_bucket() {
        let rate = Rate {
            count: 100,
            per: Duration::from_secs(1),
        };
        let lanes = Arc::new(MemoryLanes::new(&[
            spec(None, Some(rate), None),
            spec(Some(4), None, None),
        ]));
        lanes.clone().back_off(0, Duration::from_millis(500));
        lanes.clone().back_off(1, Duration::from_millis(300));
        let a = lanes.clone().admission(0).get().await.unwrap();
        // The pause, then the first token after it (a rate of 100/s): exactly 510 ms.
        assert_eq!(a.wait.as_micros(), 510_000);
        assert!(a.token, "{a:?}");
        let b = lanes.clone().admission(1).get().await.unwrap();
        assert_eq!(b.wait.as_micros(), 300_000);
        assert!(!b.token, "{b:?}");
        // On the paused clock: 200 ms later, 300 ms of the first pause are left.
        tokio::time::advance(Duration::from_millis(200)).await;
        let later = lanes.clone().admission(1).get().await.unwrap();
        assert_eq!(later.wait.as_micros(), 100_000);
        assert_eq!(lanes.stats()[0].rejections, 1);
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_the_burst_then_spaces_calls() {
        let rate = Rate {
            count: 10,
            per: Duration::from_secs(1),
        };
        let lanes = MemoryLanes::new(&[spec(None, Some(rate), Some(2))]);
        // On the paused clock no time passes between these: the waits are exact.
        assert_eq!(lanes.admit(0).unwrap().wait, Duration::ZERO);
        assert_eq!(lanes.admit(0).unwrap().wait, Duration::ZERO);
        assert_eq!(lanes.admit(0).unwrap().wait, Duration::from_millis(100));
        assert_eq!(lanes.admit(0).unwrap().wait, Duration::from_millis(200));
        // A second on, the two reserved tokens are spent and the bucket holds 10 − 2 − 2... capped by the burst of 2.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(lanes.admit(0).unwrap().wait, Duration::ZERO);
    }
}
