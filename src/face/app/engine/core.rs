//! The engine's core: what every run of a process shares, whichever face drives it — the
//! manifest and its MCP sessions, the lane store, the run id and trace, approvals, the read
//! cache, the tools (built once: one HTTP pool, the MCP sessions), what runs now
//! ([`Controls`]) and where runs end ([`Finish`]). The CLI faces drive it through
//! [`super::Engine`], which adds the reporters' thread, the budget carried from batch to
//! batch and the summary; the gateway drives it directly: its calls are runs of this core's
//! [`CallKit`], and its calls and sessions end through the same [`Finish`].

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::kit::CallKit;
use super::RunShape;
use crate::app::controls::Controls;
use crate::app::finish::Finish;
use crate::app::options::{CacheUse, RunOptions};
use crate::app::prepare::Parts;
use crate::events::{Event, Outcome, Stats};
use crate::history;
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::run::{self, Approvals, Approver, Cache, Ended, LaneStore, RunEnd, RunReport};
use crate::tools::mcp::McpHub;
use crate::trace_context::TraceContext;

/// What every run of an engine shares.
pub(in crate::face::app) struct Core {
    pub manifest: Arc<Manifest>,
    mcp: Option<Arc<McpHub>>,
    pub(super) lanes: Arc<dyn LaneStore>,
    pub run_id: String,
    approvals: Approvals,
    /// Who answers approvals `--approve` did not (the face's: the terminal, for `run`).
    approver: Arc<dyn Approver>,
    /// Where events go (`None`: no reporter listens), and whether lane events are wanted.
    pub(super) events: Option<mpsc::UnboundedSender<Event>>,
    lane_events: bool,
    /// The read cache in the lane store (under `--no-cache` it answers nothing, but writes
    /// still mark their backends in it).
    cache: Option<Arc<Cache>>,
    /// The tools, ready to invoke, built for the first run and kept for the others.
    tools: Option<Arc<Vec<Arc<crate::tools::ToolImpl>>>>,
    /// What runs now.
    pub(super) controls: Arc<Controls>,
    /// Where its runs' spans and history lines go.
    finish: Arc<Finish>,
    /// The trace the run belongs to (`TRACEPARENT`, and whether its spans are exported).
    pub trace: Option<TraceContext>,
    /// `$TRACEPARENT`, for each run's span.
    traceparent: Option<String>,
    /// When the run began, on the wall clock (for spans) and on tokio's.
    pub started_wall: std::time::SystemTime,
    pub start: Instant,
}

impl Core {
    /// The core of `opts` on the parts they built; `events`: where the runs' events go,
    /// `controls`: what runs now (the face's, when it tells them things before the core exists).
    pub(in crate::face::app) fn open(
        opts: &RunOptions,
        parts: Parts,
        approver: Arc<dyn Approver>,
        (events, controls): (Option<mpsc::UnboundedSender<Event>>, Arc<Controls>),
    ) -> Core {
        let Parts {
            manifest,
            mcp,
            lanes,
            run_id,
            ..
        } = parts;
        let cache = Cache::with_lookups(
            lanes.cache_store(),
            &run_id,
            opts.cache == CacheUse::Refresh,
            opts.cache != CacheUse::Off,
        );
        let history = opts.history.clone().or_else(|| manifest.history.clone());
        let manifest = Arc::new(manifest);
        let finish = Finish::new(manifest.clone(), history, opts.otlp.clone(), opts.quiet);
        Core {
            manifest,
            mcp,
            lanes,
            run_id,
            approvals: opts.approvals.clone(),
            approver,
            events,
            lane_events: opts.live != crate::app::options::Live::Off,
            cache: Some(cache),
            tools: None,
            controls,
            finish: Arc::new(finish),
            trace: TraceContext::new(opts.traceparent.as_deref(), opts.otlp.is_some()),
            traceparent: opts.traceparent.clone(),
            started_wall: std::time::SystemTime::now(),
            start: Instant::now(),
        }
    }

    /// Start another run on this core (a `--turns` turn): a new run id (idempotency keys are
    /// per run) — the one the caller named, if any — and a new span in the same trace.
    pub(in crate::face::app) fn new_run(&mut self, named: Option<String>) {
        self.run_id = named.unwrap_or_else(run::new_run_id);
        self.started_wall = std::time::SystemTime::now();
        self.start = Instant::now();
        if let Some(t) = &self.trace {
            self.trace = TraceContext::new(self.traceparent.as_deref(), t.exported);
        }
    }

    /// The lane store the next runs use (a turn's own lane table, same store).
    pub(in crate::face::app) fn set_lanes(&mut self, lanes: Arc<dyn LaneStore>) {
        self.lanes = lanes;
    }

    /// What every run (a batch, a gateway call) of this core shares, built for the first.
    pub(in crate::face::app) fn kit(&mut self, plan: &Plan) -> Arc<CallKit> {
        let tools = self
            .tools
            .get_or_insert_with(|| {
                Arc::new(run::tool_impls(&self.manifest, plan, self.mcp.clone()))
            })
            .clone();
        Arc::new(CallKit {
            mcp: self.mcp.clone(),
            events: self.events.clone(),
            lane_events: self.lane_events,
            approvals: self.approvals.clone(),
            approver: self.approver.clone(),
            cache: self.cache.clone(),
            tools,
        })
    }

    /// Where this engine's runs end (the gateway's calls and sessions end there too).
    pub(in crate::face::app) fn finish(&self) -> Arc<Finish> {
        self.finish.clone()
    }

    /// What runs on this engine now (the gateway registers its calls there too).
    pub(in crate::face::app) fn controls(&self) -> Arc<Controls> {
        self.controls.clone()
    }

    /// Whether runs append a history line (a face may skip what only the history needs).
    pub(in crate::face::app) fn keeps_history(&self) -> bool {
        self.finish.keeps_history()
    }

    /// The end of the run now ending, with what it did (`results`: none when the face kept
    /// none; `peak_in_flight`: 0 until the face says).
    pub(in crate::face::app) fn run_end<'a>(
        &'a self,
        tenant: &'a str,
        outcome: Outcome,
        stats: &'a Stats,
        shape: &'a RunShape,
    ) -> RunEnd<'a> {
        RunEnd {
            subject: None,
            ended: Ended::Run,
            run_id: &self.run_id,
            tenant,
            input_format: shape.input_format.name(),
            outcome,
            started: self.started_wall,
            wall: std::time::Duration::from_millis(stats.wall_ms),
            stats,
            results: None,
            width: shape.width,
            peak_in_flight: 0,
            usage: shape.usage.as_ref(),
            trace: self.trace.as_ref(),
        }
    }

    /// The end of a run that was one batch (a whole batch, a turn): everything from its
    /// report.
    pub(in crate::face::app) fn report_end<'a>(
        &'a self,
        tenant: &'a str,
        report: &'a RunReport,
        shape: &'a RunShape,
    ) -> RunEnd<'a> {
        let mut end = self.run_end(tenant, report.outcome, &report.stats, shape);
        end.results = Some(&report.results);
        if self.keeps_history() {
            end.peak_in_flight = history::peak_in_flight(&report.results);
        }
        end
    }

    /// A run is over: its spans go out (if they go anywhere), and its one history line is
    /// appended.
    pub(in crate::face::app) fn end_run(&self, rt: &tokio::runtime::Runtime, end: &RunEnd<'_>) {
        rt.block_on(self.finish.finish(end));
    }

    /// Close: MCP sessions ended, and what the store still has to be told said; tasks that
    /// outlived the runs (none should) do not keep the process alive.
    pub(in crate::face::app) fn close(self, rt: tokio::runtime::Runtime) {
        if let Some(hub) = &self.mcp {
            rt.block_on(hub.shutdown());
        }
        // Permits given back as the last calls ended reach a shared store before the exit.
        rt.block_on(self.lanes.clone().settle());
        rt.shutdown_background();
    }
}
