//! `/metrics`: the gateway's figures in the Prometheus text format, kept with the
//! `prometheus-client` crate. Counted as calls end: calls by tool, status and kind, their
//! durations, cache hits, the time calls waited in the lane they waited on longest, what each
//! tenant spent. Sampled when scraped: each lane's limit, permits held and calls waiting in
//! this process, and the calls waiting for approval on this machine.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::events::CallResult;
use crate::run::store::Occupancy;

type Labels = Vec<(&'static str, String)>;

fn seconds() -> Histogram {
    // 1 ms to about 66 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Every figure the gateway exports.
pub(super) struct Metrics {
    registry: Registry,
    calls: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    cache_hits: Family<Labels, Counter>,
    settled: Family<Labels, Counter>,
    lane_wait: Family<Labels, Histogram, fn() -> Histogram>,
    spent: Family<Labels, Counter<f64, AtomicU64>>,
    lane_limit: Family<Labels, Gauge>,
    lane_in_flight: Family<Labels, Gauge>,
    lane_waiting: Family<Labels, Gauge>,
    approvals: Gauge,
    held: Gauge,
    sessions: Gauge,
    reopened: Counter,
    tasks: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("flux_tools");
        let m = Metrics {
            calls: Family::default(),
            duration: Family::new_with_constructor(seconds),
            cache_hits: Family::default(),
            settled: Family::default(),
            lane_wait: Family::new_with_constructor(seconds),
            spent: Family::default(),
            lane_limit: Family::default(),
            lane_in_flight: Family::default(),
            lane_waiting: Family::default(),
            approvals: Gauge::default(),
            held: Gauge::default(),
            sessions: Gauge::default(),
            reopened: Counter::default(),
            tasks: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "calls",
            "Served calls by tool, status and error kind",
            m.calls.clone(),
        );
        r.register(
            "call_duration_seconds",
            "How long served calls ran at their tool",
            m.duration.clone(),
        );
        r.register(
            "cache_hits",
            "Served calls answered from the read cache",
            m.cache_hits.clone(),
        );
        r.register(
            "settled",
            "Writes cut off in flight that their probe settled (verify), by what it found",
            m.settled.clone(),
        );
        r.register(
            "lane_wait_seconds",
            "How long calls waited, by the lane they waited on longest",
            m.lane_wait.clone(),
        );
        r.register(
            "tenant_spent",
            "What each tenant's served calls cost",
            m.spent.clone(),
        );
        r.register(
            "lane_limit",
            "Each lane's limit (a learned lane's as it stands now)",
            m.lane_limit.clone(),
        );
        r.register(
            "lane_in_flight",
            "Permits of each lane held in this process",
            m.lane_in_flight.clone(),
        );
        r.register(
            "lane_waiting",
            "Calls of this process waiting for each lane",
            m.lane_waiting.clone(),
        );
        r.register(
            "approvals_waiting",
            "Calls waiting for approval out of band on this machine",
            m.approvals.clone(),
        );
        r.register(
            "catalog_held",
            "Served tools held back: their definition is not the one tools.lock pins",
            m.held.clone(),
        );
        r.register(
            "sessions",
            "Live HTTP sessions of this gateway",
            m.sessions.clone(),
        );
        r.register(
            "sessions_reopened",
            "HTTP sessions let go for idleness and opened again when their client came back",
            m.reopened.clone(),
        );
        r.register(
            "tasks_running",
            "Calls answered as tasks that this gateway process runs now",
            m.tasks.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// A served call of a tool costing `cost` ended with `r`.
    pub(super) fn record(&self, tenant: &str, r: &CallResult, cost: f64) {
        let kind = r.error.as_ref().map_or("", |e| e.kind.as_str());
        let labels = vec![
            ("tool", r.tool.clone()),
            ("status", r.status.as_str().to_string()),
            ("kind", kind.to_string()),
        ];
        self.calls.get_or_create(&labels).inc();
        let tool = vec![("tool", r.tool.clone())];
        if r.cached {
            self.cache_hits.get_or_create(&tool).inc();
        } else if let Some(ms) = r.duration_ms.filter(|_| r.attempts > 0) {
            self.duration
                .get_or_create(&tool)
                .observe(ms as f64 / 1000.0);
        }
        if let Some(s) = r.settled {
            let labels = vec![
                ("tool", r.tool.clone()),
                ("outcome", s.as_str().to_string()),
            ];
            self.settled.get_or_create(&labels).inc();
        }
        if let (Some(lane), Some(ms)) = (&r.waited_on, r.queued_ms) {
            let lane = vec![("lane", lane.clone())];
            self.lane_wait
                .get_or_create(&lane)
                .observe(ms as f64 / 1000.0);
        }
        if r.attempts > 0 && !r.cached && cost > 0.0 {
            let t = vec![("tenant", tenant.to_string())];
            self.spent.get_or_create(&t).inc_by(cost);
        }
    }

    /// The text a scrape gets, with the lanes and approvals as they are now.
    pub(super) fn render(
        &self,
        lanes: &[Occupancy],
        (approvals, tasks, held): (usize, usize, usize),
        (sessions, reopened): (usize, u64),
    ) -> String {
        self.tasks.set(i64::try_from(tasks).unwrap_or(i64::MAX));
        self.held.set(i64::try_from(held).unwrap_or(i64::MAX));
        self.sessions
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
        let seen = self.reopened.get();
        self.reopened.inc_by(reopened.saturating_sub(seen));
        for l in lanes {
            let labels = vec![("lane", l.lane.clone())];
            if let Some(limit) = l.limit {
                self.lane_limit.get_or_create(&labels).set(i64::from(limit));
            }
            let held = i64::try_from(l.held).unwrap_or(i64::MAX);
            self.lane_in_flight.get_or_create(&labels).set(held);
            let waiting = i64::try_from(l.waiting).unwrap_or(i64::MAX);
            self.lane_waiting.get_or_create(&labels).set(waiting);
        }
        self.approvals
            .set(i64::try_from(approvals).unwrap_or(i64::MAX));
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
