//! The coordinator: one task that owns the run's state and dispatches calls.
//!
//! A call becomes *ready* when its phase has started and every in-phase edge has resolved.
//! Ready calls go through pre-dispatch one at a time, lowest call index first (a call still
//! waiting on its edges never holds back later independent calls): dependency success,
//! reference resolution, the argument guardrail, the read cache, the budget and the call cap. Then the lanes that are free
//! are taken at once and the first that is not is queued for — still in call order — and the
//! call is spawned as its own task ([`super::call`]). Results come back over a channel in any
//! order; they are stored by index, so the report is in call order.
//!
//! Layout: `state` holds the [`Coordinator`](state::Coordinator) and how a result is
//! recorded; `predispatch` the serial steps before a call may go (with `durability`: journal,
//! resume, record and replay; `caching`: the read cache and its waits); `dispatch` hands a call to the gate or spawns it; `parking`
//! keeps waiting calls as indices; `hooks` starts the gate and the `after_call` hook;
//! `lifecycle` is the coordinator's loop and how a run is settled into a [`RunReport`].

mod allotment;
mod caching;
#[cfg(test)]
mod differential;
mod dispatch;
mod durability;
mod hooks;
mod lifecycle;
mod parking;
mod predispatch;
mod state;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cache::Cache;
use super::call::Emitter;
use super::cassette::Cassette;
use super::gate::{Approvals, Approver};
use super::journal::{Journal, Resume};
use super::store::LaneStore;
use crate::events::{CallResult, Event, LaneInfo, Outcome, Stats};
use crate::manifest::Manifest;
use crate::plan::Plan;
use state::Coordinator;

/// Everything a run needs besides the plan.
pub struct RunConfig {
    pub run_id: String,
    pub lanes: Arc<dyn LaneStore>,
    /// Where events go (`None`: nobody listens).
    pub events: Option<mpsc::UnboundedSender<Event>>,
    /// Send per-lane wait/acquire/release events (only a live display needs them).
    pub lane_events: bool,
    /// MCP sessions (started for annotations before planning, or on first call).
    pub mcp: Option<Arc<crate::tools::mcp::McpHub>>,
    /// `--approve`.
    pub approvals: Approvals,
    /// Who answers what `--approve` did not (the terminal, in the binary).
    pub approver: Arc<dyn Approver>,
    /// `--journal`: where dispatches and results are recorded.
    pub journal: Option<Journal>,
    /// `--resume`: what an earlier run's journal holds.
    pub resume: Option<Arc<Resume>>,
    /// `--retry-indeterminate`.
    pub retry_indeterminate: bool,
    /// `--no-resend`: a cut-off write its probe finds never landed is not sent again.
    pub no_resend: bool,
    /// `--record`: keep fingerprints and resolved arguments for the cassette.
    pub record: bool,
    /// `--replay`: answer calls from this cassette instead of invoking tools.
    pub replay: Option<Arc<Cassette>>,
    /// When the run began, if before this batch (a stream's later chunks): times and the run
    /// deadline count from here. `None`: now.
    pub start: Option<Instant>,
    /// What the run already spent before this batch (a stream's earlier chunks), against
    /// the plan's `max_cost`.
    pub spent: f64,
    /// This batch is a segment of a longer run (a stream), starting at this call index: its
    /// events number calls from there, and the run's start and finish are announced by
    /// whoever runs the segments.
    pub segment: Option<usize>,
    /// The read cache (`None`: `--no-cache`).
    pub cache: Option<Arc<Cache>>,
    /// The tools, ready to invoke, when a longer-lived caller keeps them (one HTTP pool and
    /// the MCP sessions for every batch of a stream or every turn); `None`: built for this run.
    pub tools: Option<Arc<Vec<Arc<crate::tools::ToolImpl>>>>,
    /// The trace the run belongs to (`TRACEPARENT`, `--otlp`): passed on to every tool.
    pub trace: Option<crate::trace_context::TraceContext>,
    /// Calls the run already made before this batch (a stream's earlier chunks, a journal's
    /// earlier run), against the plan's `max_calls`.
    pub calls_made: u64,
    /// What the caller wants back besides the results (`mcp serve`: an upstream's answer as
    /// it came, its progress).
    pub relay: Option<Arc<crate::tools::Relay>>,
}

impl RunConfig {
    /// A run on `lanes` with nothing else: no events, journal, cassette or trace; `NoApprover`
    /// (tests, and the benchmarks that time the engine alone).
    pub fn bare(run_id: &str, lanes: Arc<dyn LaneStore>) -> RunConfig {
        RunConfig {
            run_id: run_id.into(),
            lanes,
            events: None,
            lane_events: false,
            mcp: None,
            approvals: Approvals::Ask,
            approver: Arc::new(super::gate::NoApprover),
            journal: None,
            resume: None,
            retry_indeterminate: false,
            no_resend: false,
            record: false,
            replay: None,
            start: None,
            spent: 0.0,
            segment: None,
            cache: None,
            calls_made: 0,
            trace: None,
            tools: None,
            relay: None,
        }
    }
}

/// What the outside world asks of a running batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// SIGINT/SIGTERM: the first stops gracefully (in-flight calls are stopped), the second
    /// at once.
    Interrupt,
    /// Nobody reads the results any more (a closed stdout): dispatch nothing new, let the
    /// calls in flight finish.
    Drain,
}

/// The finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run_id: String,
    pub outcome: Outcome,
    pub results: Vec<CallResult>,
    pub stats: Stats,
    /// Each call's fingerprint and resolved arguments (when recording).
    pub fingerprints: Vec<Option<String>>,
    pub recorded_args: Vec<Option<Value>>,
    /// What the run has spent, this batch and any before it (see [`RunConfig::spent`]).
    pub spent: f64,
    /// Calls the run has made, this batch and any before it (see [`RunConfig::calls_made`]).
    pub calls_made: u64,
}

/// How many completions the coordinator may leave unread while it dispatches a wide phase:
/// reading them as it goes keeps memory flat when calls finish as fast as they start.
const DRAIN_EVERY: usize = 256;

/// How many calls beyond a lane's limit may wait in its queue as tasks. Further calls that
/// need the lane are *parked* — kept as an index (and their resolved arguments) until the
/// queue shortens — so a batch of any width waits in bounded memory (a waiting task costs a
/// few kB). Parked calls keep call order: a call never passes an earlier one parked on a lane
/// it needs. A short queue is enough to hand a lane straight to the next call, and its tasks'
/// memory is reused as calls finish: 1,024 made a 2,000-command run at J = 8 take ~1,300 more
/// page faults (~5 MB of fresh pages) and 1.5 % more time against the spawn floor.
const QUEUE_AHEAD: usize = 64;

/// What pre-dispatch decided for a call that may go ahead.
enum Ready {
    /// Dispatch it, with these resolved arguments (`None`: the literal ones).
    Go(Option<Map<String, Value>>),
    /// The journal of an earlier run already settled it.
    Reuse(Box<CallResult>),
    /// The read cache answered it.
    Cached(Box<CallResult>),
    /// Its cache lookup waits (on an identical call in flight, or on the store): it goes on
    /// when the answer comes.
    Waiting,
}

/// [`execute`] as a task on the runtime's workers rather than on the thread that waits for
/// it: a call's completion then wakes the coordinator on a worker that is already running,
/// not a parked thread (a futex and a context switch per call otherwise).
pub(crate) async fn execute_spawned(
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    config: RunConfig,
    signals: mpsc::UnboundedReceiver<Control>,
) -> RunReport {
    match tokio::spawn(execute(manifest, plan, config, signals)).await {
        Ok(report) => report,
        // Only a panic in the coordinator (a bug) gets here: it goes on as if not spawned.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Run `plan`. `signals` delivers [`Control`]s (SIGINT/SIGTERM, a reader gone). Returns when
/// every call has a result.
/// Each of the manifest's tools ready to invoke, sharing one HTTP pool (no more idle
/// connections per host than `plan`'s turn lane lets calls use at once) and the MCP sessions.
pub fn tool_impls(
    manifest: &Manifest,
    plan: &Plan,
    mcp: Option<Arc<crate::tools::mcp::McpHub>>,
) -> Vec<Arc<crate::tools::ToolImpl>> {
    let turn = plan
        .lanes
        .iter()
        .find(|l| l.key == crate::plan::LaneKey::Turn)
        .and_then(|l| l.limit);
    let ctx = crate::tools::ToolContext::for_tools(&manifest.tools, turn.map(|n| n as usize), mcp);
    manifest
        .tools
        .iter()
        .map(|t| crate::tools::ToolImpl::from_tool(t, &ctx))
        .collect()
}

pub async fn execute(
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    config: RunConfig,
    mut signals: mpsc::UnboundedReceiver<Control>,
) -> RunReport {
    let start = config.start.unwrap_or_else(Instant::now);
    let emitter = Emitter {
        tx: config.events.clone(),
        lanes: config.lane_events,
        base: config.segment.unwrap_or(0),
    };
    if config.segment.is_none() {
        emitter.emit(Event::RunStarted {
            run_id: config.run_id.clone(),
            total: plan.calls.len(),
            lanes: plan.lanes.iter().map(LaneInfo::from).collect(),
        });
    }
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let (cache_tx, cache_rx) = mpsc::unbounded_channel();
    let mut co = Coordinator::new(manifest, plan, &config, emitter, start, done_tx);
    co.cache_tx = Some(cache_tx);
    let (gate, verdicts) = co.start_gate(&config);
    let after = co.start_after_hook();
    co.run_loop(done_rx, verdicts, cache_rx, &mut signals).await;
    co.settle(gate, after, config).await
}

/// The idempotency key of a write call: stable for the call across retries, resume and
/// machines — its run, its id and its fingerprint.
pub(crate) fn idempotency_key(run_id: &str, call_id: &str, fp: &str) -> String {
    format!("{run_id}:{call_id}:{fp}")
}

/// A run id: time-ordered and unique enough to key idempotency across runs.
pub(crate) fn new_run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs:x}-{:08x}", fastrand::u32(..))
}
