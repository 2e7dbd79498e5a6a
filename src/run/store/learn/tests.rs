//! The law on tokio's paused clock: its steps one by one, and a lane learning the hidden
//! capacity of a simulated backend (and following it when it halves or doubles).

use super::*;
use std::sync::atomic::AtomicU64;

const B: AutoLimit = AutoLimit {
    min: 2,
    max: 100,
    start: 4,
};

fn window(answered: u64, rtt_ms: f64, min_ms: f64, overloads: u64, peak: u64) -> Window {
    Window {
        answered,
        sum_ms: rtt_ms * answered as f64,
        min_ms,
        overloads,
        peak,
    }
}

#[test]
fn it_doubles_until_queueing_then_grows_by_the_root() {
    let mut law = Law::new(B);
    let unloaded = window(8, 100.0, 100.0, 0, 4);
    assert_eq!(law.step(&unloaded, B).map(|m| m.to), Some(8));
    assert_eq!(
        law.step(&window(16, 100.0, 100.0, 0, 8), B).map(|m| m.to),
        Some(16)
    );
    // Latency 2× the unloaded at 16: 8 queued, over 2α (2 × 3.6): half way to what it
    // serves (8) plus α — 13.8 — and out of the slow start.
    let m = law.step(&window(16, 200.0, 100.0, 0, 16), B);
    assert_eq!(m.map(|m| (m.to, m.why)), Some((14, Why::Queueing)));
    assert!(!law.slow_start);
    // Unloaded again: by √limit, not doubling.
    let m = law.step(&window(16, 100.0, 100.0, 0, 14), B);
    assert_eq!(m.map(|m| m.to), Some(18));
}

#[test]
fn an_overload_halves_it_and_it_keeps_to_its_floor_and_ceiling() {
    let mut law = Law::new(B);
    law.limit = 40.0;
    let m = law.step(&window(10, 100.0, 100.0, 1, 40), B);
    assert_eq!(
        m,
        Some(Move {
            from: 40,
            to: 20,
            why: Why::Overloaded
        })
    );
    for _ in 0..5 {
        law.step(&window(0, 0.0, 0.0, 3, 20), B);
    }
    assert_eq!(law.limit(), B.min);
    law.limit = 90.0;
    law.slow_start = true;
    law.step(&window(90, 100.0, 100.0, 0, 90), B);
    assert_eq!(law.limit(), B.max);
}

#[test]
fn a_lane_not_in_use_does_not_grow_and_a_quiet_band_holds() {
    let mut law = Law::new(B);
    law.limit = 20.0;
    law.slow_start = false;
    // Calls held 6 of 20: the lane is not what holds them back.
    assert_eq!(law.step(&window(6, 100.0, 100.0, 0, 6), B), None);
    // 20 in flight at 1.25× the unloaded latency: 4 queued, between α and 2α: held.
    assert_eq!(law.step(&window(20, 125.0, 100.0, 0, 20), B), None);
    assert_eq!(law.limit(), 20);
    // Unloaded, but calls held 19 of 20: past its slow start, only a full lane grows …
    assert_eq!(law.step(&window(20, 100.0, 100.0, 0, 19), B), None);
    assert_eq!(
        law.step(&window(20, 100.0, 100.0, 0, 20), B).map(|m| m.to),
        Some(24)
    );
    // … while in it, half the limit held is enough.
    let mut law = Law::new(B);
    law.limit = 20.0;
    assert_eq!(
        law.step(&window(20, 100.0, 100.0, 0, 10), B).map(|m| m.to),
        Some(40)
    );
}

#[test]
fn a_window_is_judged_on_a_whole_round_or_an_overload() {
    let mut law = Law::new(B);
    law.limit = 20.0;
    let long = Duration::from_secs(1);
    assert!(!law.ready(&window(19, 100.0, 100.0, 0, 20), long));
    assert!(law.ready(&window(20, 100.0, 100.0, 0, 20), long));
    // An overload at once.
    assert!(law.ready(&window(3, 100.0, 100.0, 1, 20), Duration::ZERO));
    // A round, but not yet two round trips long.
    assert!(!law.ready(&window(20, 100.0, 100.0, 0, 20), Duration::from_millis(150)));
}

#[tokio::test(start_paused = true)]
async fn the_answers_to_calls_sent_within_a_round_trip_of_a_cut_are_not_counted() {
    let bounds = AutoLimit {
        min: 1,
        max: 100,
        start: 8,
    };
    let learner = Learner::new(bounds, Arc::new(OrderedSemaphore::new(8)), false);
    // Answers of 200 ms: the round trip a cut's queue takes to drain.
    for _ in 0..3 {
        learner.observe(Sample::Answered(Duration::from_millis(200)), Instant::now());
    }
    learner.set(4, Some(Why::Overloaded));
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_millis(250)).await;
    // A 429 to a call sent 100 ms after the cut met the old limit's queue: not counted.
    learner.observe(Sample::Overloaded, cut + Duration::from_millis(100));
    assert_eq!(learner.limit(), 4);
    // One sent after a round trip speaks for the new limit: halved.
    learner.observe(Sample::Overloaded, cut + Duration::from_millis(210));
    assert_eq!(learner.limit(), 2);
    // After a rise, every answer counts at once.
    learner.set(6, None);
    let rise = Instant::now();
    tokio::time::sleep(Duration::from_millis(60)).await;
    learner.observe(Sample::Overloaded, rise);
    assert_eq!(learner.limit(), 3);
}

/// A backend that serves `capacity` calls at once in `base` each, queues the rest in order
/// (their latency grows), and refuses (429) beyond twice its capacity — the bench server.
struct Backend {
    capacity: AtomicU64,
    in_flight: AtomicU64,
    refused: AtomicU64,
    /// Its servers: as many permits as its capacity (kept in step with it).
    servers: tokio::sync::Semaphore,
    serving: AtomicU64,
}

impl Backend {
    async fn call(&self, base: Duration) -> Sample {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let c = self.capacity.load(Ordering::SeqCst);
        let started = Instant::now();
        let sample = if n > 2 * c {
            self.refused.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            Sample::Overloaded
        } else {
            let server = self.servers.acquire().await;
            tokio::time::sleep(base).await;
            drop(server);
            Sample::Answered(started.elapsed())
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        sample
    }

    /// Make its capacity `c` (servers taken away as they come free).
    fn set_capacity(self: &Arc<Self>, c: u64) {
        let was = self.serving.swap(c, Ordering::SeqCst);
        self.capacity.store(c, Ordering::SeqCst);
        if c > was {
            self.servers.add_permits((c - was) as usize);
        } else {
            let me = self.clone();
            tokio::spawn(async move {
                if let Ok(p) = me.servers.acquire_many((was - c) as u32).await {
                    p.forget();
                }
            });
        }
    }
}

/// `workers` callers, always more than the backend takes, through a learned lane; the limit
/// every 100 ms for `secs` seconds, with the capacity set by `capacity_at(second)`.
async fn learn(secs: u64, capacity_at: fn(u64) -> u64) -> (Vec<u32>, u64) {
    let bounds = AutoLimit {
        min: 1,
        max: 200,
        start: 4,
    };
    let sem = Arc::new(OrderedSemaphore::new(u64::from(bounds.start)));
    let learner = Learner::new(bounds, sem.clone(), false);
    let backend = Arc::new(Backend {
        capacity: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        servers: tokio::sync::Semaphore::new(0),
        serving: AtomicU64::new(0),
    });
    backend.set_capacity(capacity_at(0));
    let flow = super::super::Flow::default();
    for w in 0..300u64 {
        let (sem, learner, backend, flow) =
            (sem.clone(), learner.clone(), backend.clone(), flow.clone());
        tokio::spawn(async move {
            for key in 0.. {
                sem.acquire(&flow, key * 1000 + w, 1).await;
                let sent = Instant::now();
                let s = backend.call(Duration::from_millis(100)).await;
                learner.observe(s, sent);
                sem.release(1);
            }
        });
    }
    let mut seen = Vec::new();
    for tick in 0..secs * 10 {
        if capacity_at(tick / 10) != backend.capacity.load(Ordering::SeqCst) {
            backend.set_capacity(capacity_at(tick / 10));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen.push(learner.limit());
    }
    (seen, backend.refused.load(Ordering::SeqCst))
}

/// The limits seen from second `from` to second `to`.
fn between(seen: &[u32], from: u64, to: u64) -> &[u32] {
    &seen[(from * 10) as usize..(to * 10) as usize]
}

#[tokio::test(start_paused = true)]
async fn calls_above_a_lowered_limit_finish_and_new_ones_wait_until_under_it() {
    let sem = Arc::new(OrderedSemaphore::new(4));
    let flow = super::super::Flow::default();
    for k in 0..4 {
        sem.acquire(&flow, k, 1).await;
    }
    sem.resize(2);
    assert_eq!(sem.held(), 4);
    let waiter = {
        let (sem, flow) = (sem.clone(), flow.clone());
        tokio::spawn(async move { sem.acquire(&flow, 9, 1).await })
    };
    // Two releases pay the cut; only the third lets the waiter in.
    for released in 1..=3 {
        sem.release(1);
        tokio::task::yield_now().await;
        assert_eq!(waiter.is_finished(), released == 3, "after {released}");
    }
    sem.resize(5);
    assert!(sem.try_acquire(3) && !sem.try_acquire(1));
}

#[tokio::test(start_paused = true)]
async fn it_finds_a_hidden_capacity_within_three_seconds_and_stays_in_its_band() {
    let (seen, refused) = learn(12, |_| 20).await;
    let band = between(&seen, 3, 12);
    // Within 3 s: at least the capacity, at most half as much again; no wider after.
    assert!(band.iter().all(|l| (20..=30).contains(l)), "{seen:?}");
    let (lo, hi) = (band.iter().min(), band.iter().max());
    assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 6), "{band:?}");
    // It never went past twice the capacity: the backend refused nothing.
    assert_eq!(refused, 0, "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn it_follows_the_capacity_when_it_doubles_or_halves() {
    let (seen, _) = learn(30, |s| match s {
        0..10 => 20,
        10..20 => 40,
        _ => 20,
    })
    .await;
    assert!(
        between(&seen, 15, 20).iter().all(|l| (40..=60).contains(l)),
        "{seen:?}"
    );
    assert!(
        between(&seen, 25, 30).iter().all(|l| (20..=30).contains(l)),
        "{seen:?}"
    );
}

#[test]
fn a_shared_window_fed_every_exchange_is_judged_however_long_its_span() {
    let b = AutoLimit {
        min: 1,
        max: 64,
        start: 2,
    };
    // Answers of 200 ms: the first window needs 2 × 200 + 200 ms; fed every 100 ms, it never
    // goes stale on the way (it did, at ten times the initial 50 ms span, and never judged).
    let mut shared = Shared::new(b, 0.0);
    let mine = window(1, 200.0, 200.0, 0, 2);
    let moved = (1..=10).find_map(|t| shared.exchange(&mine, f64::from(t) * 100.0, b));
    assert_eq!(moved.map(|m| m.to), Some(4));
    // Left idle for ten spans, a window begins afresh.
    let since = shared.since_ms;
    shared.exchange(&Window::default(), 60_000.0, b);
    assert!(shared.since_ms > since && shared.window.is_empty());
}
