//! The coordinator on tokio's paused clock: exact makespans, lane peaks and ordering from events.

//! The scheduler on virtual time: scripted tools sleep on tokio's paused clock, so these
//! assert exact makespans and orderings from the collected events, never wall-clock time.

use crate::run::store::Backends;
use crate::run::store::{Connection, LaneFigures, Lanes, TenantSpend};
use std::path::PathBuf;

use super::*;
use crate::batch::Batch;
use crate::error::SourceFile;
use crate::events::Status;
use crate::plan::{build, PlanOptions};
use crate::run::store::{
    Admission, Answer, BoxFuture, Charge, Flow, LaneError, LaneStore, Lease, MemoryLanes, Occupancy,
};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8
[concurrency.per_tool]
pair = 2
[tools.pair]
kind = "scripted"
effect = "read"
latency = "300ms"
[tools.read]
kind = "scripted"
effect = "read"
latency = "200ms"
output = { items = [{ id = "o-17" }] }
[tools.write]
kind = "scripted"
effect = "write"
latency = "500ms"
[tools.alone]
kind = "scripted"
effect = "write"
idempotent = true
parallel_safe = false
latency = "100ms"
[tools.stuck]
kind = "scripted"
effect = "read"
hang = true
timeout = "700ms"
"#;

async fn run(batch: &str) -> (RunReport, Vec<Event>) {
    let m = Arc::new(
        Manifest::parse(
            SourceFile::new("t.toml", MANIFEST),
            PathBuf::from("/t/tools.toml"),
            crate::tools::KINDS,
        )
        .unwrap(),
    );
    let (b, _) = Batch::parse(SourceFile::new("b.yaml", batch)).unwrap();
    let plan = Arc::new(build(&m, &b, &PlanOptions::default()).unwrap());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let lanes: Arc<dyn crate::run::store::LaneStore> = Arc::new(MemoryLanes::new(&plan.lanes));
    let cache = crate::run::cache::Cache::new(lanes.cache_store(), "run-test", false);
    let config = RunConfig {
        events: Some(tx),
        lane_events: true,
        cache: Some(cache),
        ..RunConfig::bare("run-test", lanes)
    };
    let (_signals, sig_rx) = mpsc::unbounded_channel();
    let report = execute(m, plan, config, sig_rx).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    (report, events)
}

/// The most permits of `lane` held at once, from the lane events.
fn peak_held(events: &[Event], lane: usize) -> u32 {
    let (mut now, mut peak) = (0u32, 0u32);
    for e in events {
        match e {
            Event::LaneAcquired {
                lane: l, weight, ..
            } if *l == lane => {
                now += weight;
                peak = peak.max(now);
            }
            Event::LaneReleased {
                lane: l,
                weight,
                held: true,
                ..
            } if *l == lane => now -= weight,
            _ => {}
        }
    }
    peak
}

#[tokio::test(start_paused = true)]
async fn a_wide_batch_waits_as_parked_indices_not_tasks_and_keeps_call_order() {
    // 3,000 calls through a lane of 2: without parking each would be a waiting task.
    let mut batch = String::from("calls:\n");
    for _ in 0..3000 {
        batch.push_str("  - tool: pair\n");
    }
    batch.push_str("  - tool: read\n");
    let running = tokio::spawn(async move { run(&batch).await });
    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(alive < 1100, "{alive} tasks alive for 3,000 queued calls");
    let (report, events) = running.await.unwrap();
    assert!(report.results.iter().all(|r| r.status == Status::Ok));
    // Two at a time, 300 ms each: 1,500 rounds, and never more than two in the lane.
    assert_eq!(report.stats.wall_ms, 1500 * 300);
    let lane = report
        .stats
        .lanes
        .iter()
        .position(|l| l.lane == "tool:pair")
        .unwrap();
    assert_eq!(peak_held(&events, lane), 2);
    // Parked calls still start in call order.
    let starts: Vec<u64> = report.results[..3000]
        .iter()
        .map(|r| r.started_ms.unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "out of order");
}

#[tokio::test(start_paused = true)]
async fn a_tool_lane_binds_exactly() {
    let (report, events) =
        run("- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n")
            .await;
    let tool_lane = match &events[0] {
        Event::RunStarted { lanes, .. } => {
            lanes.iter().position(|l| l.name == "tool:pair").unwrap()
        }
        _ => panic!("the first event is RunStarted"),
    };
    assert_eq!(peak_held(&events, tool_lane), 2);
    assert_eq!(report.stats.wall_ms, 900);
    let tool = report
        .stats
        .lanes
        .iter()
        .find(|l| l.lane == "tool:pair")
        .unwrap();
    assert_eq!(tool.peak_in_flight, 2);
    assert_eq!(tool.waits, 4);
    // Queued calls were dispatched in call order.
    let starts: Vec<u64> = report
        .results
        .iter()
        .map(|r| r.started_ms.unwrap())
        .collect();
    assert_eq!(starts, vec![0, 0, 300, 300, 600, 600]);
}

#[tokio::test(start_paused = true)]
async fn references_and_write_chain_order_dispatch() {
    let (report, _) = run(
        "- { id: a, tool: read }\n- { id: w1, tool: write, args: { x: \"${a.items[0].id}\" } }\n- { id: w2, tool: write }\n- { id: b, tool: read }\n",
    )
    .await;
    let r = &report.results;
    assert!(r.iter().all(|x| x.status == Status::Ok));
    assert_eq!(r[1].started_ms, Some(200), "w1 waited for a's output");
    assert_eq!(r[1].output, serde_json::json!({"x": "o-17"}));
    assert_eq!(r[2].started_ms, Some(700), "w2 waited for w1 to resolve");
    assert_eq!(r[3].started_ms, Some(0), "reads never wait for writes");
    assert_eq!(report.stats.critical_path, vec!["a", "w1", "w2"]);
    assert_eq!(report.stats.critical_path_ms, 1200);
}

#[tokio::test(start_paused = true)]
async fn a_lone_phase_has_nothing_else_in_flight() {
    let (report, events) = run("- tool: pair\n- tool: alone\n- tool: pair\n").await;
    assert_eq!(report.results[1].started_ms, Some(300));
    assert_eq!(report.results[2].started_ms, Some(400));
    let mut running = 0;
    for e in &events {
        match e {
            Event::CallStarted { call, .. } => {
                assert!(
                    *call != 1 || running == 0,
                    "the lone call started beside another"
                );
                running += 1;
            }
            Event::CallFinished { .. } => running -= 1,
            _ => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_tool_times_out_at_its_own_ceiling() {
    let (report, _) = run("- tool: stuck\n- tool: pair\n").await;
    assert_eq!(report.results[0].status, Status::TimedOut);
    assert_eq!(report.results[0].duration_ms, Some(700));
    assert_eq!(report.results[1].status, Status::Ok);
    assert_eq!(report.stats.wall_ms, 700);
    assert_eq!(report.outcome, Outcome::Completed);
}

/// A store whose permits carry a shared hold (as Redis's do) that takes a while to give back.
struct SlowToRelease {
    inner: Arc<dyn LaneStore>,
    given_back: Arc<AtomicUsize>,
}

struct SlowHold(Arc<AtomicUsize>);

impl Drop for SlowHold {
    fn drop(&mut self) {
        // A loaded machine: the call's thread is descheduled as it lets go.
        std::thread::sleep(Duration::from_millis(300));
        self.0.fetch_add(1, SeqCst);
    }
}

impl Connection for SlowToRelease {
    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore> {
        self.inner.cache_store()
    }

    fn for_lanes(
        &self,
        specs: &[crate::plan::LaneSpec],
        flow: &Flow,
    ) -> Result<Arc<dyn LaneStore>, LaneError> {
        self.inner.for_lanes(specs, flow)
    }
}

impl crate::run::store::Heeds for SlowToRelease {}

impl Lanes for SlowToRelease {
    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            let lease = self.inner.clone().acquire(lane, weight, order).await?;
            Ok(lease.with_shared(Box::new(SlowHold(self.given_back.clone()))))
        })
    }

    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>> {
        self.inner.clone().admission(lane)
    }

    fn back_off(self: Arc<Self>, lane: usize, wait: Duration) {
        self.inner.clone().back_off(lane, wait)
    }

    fn record_wait(&self, lane: usize, wait: Duration, token: bool) {
        self.inner.record_wait(lane, wait, token)
    }
}

impl LaneFigures for SlowToRelease {
    fn stats(&self) -> Vec<crate::events::LaneStats> {
        self.inner.stats()
    }

    fn occupancy(&self) -> Vec<Occupancy> {
        self.inner.occupancy()
    }
}

impl Backends for SlowToRelease {}

impl TenantSpend for SlowToRelease {
    fn charge(
        self: Arc<Self>,
        tenant: String,
        window: crate::manifest::TenantWindow,
        cost: f64,
    ) -> BoxFuture<'static, Result<Charge, LaneError>> {
        self.inner.clone().charge(tenant, window, cost)
    }

    fn refund(self: Arc<Self>, tenant: String, id: String) {
        self.inner.clone().refund(tenant, id)
    }
}

/// When a run returns, every lane its calls held has been given back — a shared store's
/// permits included, so the process can tell the store before it exits. (Before, a call's
/// task sent its completion first and let go after: the run could end, and the runtime be
/// dropped, in between, leaving a Redis permit held for a whole lease — one CI run in ~15.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_returns_only_after_its_calls_gave_their_lanes_back() {
    let m = Arc::new(
        Manifest::parse(
            SourceFile::new("t.toml", MANIFEST),
            PathBuf::from("/t/tools.toml"),
            crate::tools::KINDS,
        )
        .unwrap(),
    );
    let (b, _) = Batch::parse(SourceFile::new("b.yaml", "calls:\n  - tool: pair\n")).unwrap();
    let plan = Arc::new(build(&m, &b, &PlanOptions::default()).unwrap());
    let given_back = Arc::new(AtomicUsize::new(0));
    let lanes: Arc<dyn LaneStore> = Arc::new(SlowToRelease {
        inner: Arc::new(MemoryLanes::new(&plan.lanes)),
        given_back: given_back.clone(),
    });
    let held = plan.calls[0].lanes.len();
    let (_signals, sig_rx) = mpsc::unbounded_channel();
    let report = execute(m, plan, RunConfig::bare("run-test", lanes), sig_rx).await;
    assert_eq!(report.results[0].status, Status::Ok);
    let back = given_back.load(SeqCst);
    assert_eq!(back, held, "{back} of the call's {held} lanes given back");
}
