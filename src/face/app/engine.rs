//! The engine every face drives: opened once from [`RunOptions`] and what the face hands in
//! (the approver), it holds what every batch of one run shares — the manifest and its MCP
//! sessions, the lane store, the run id, approvals, the reporters (on their own thread), the
//! clock, the budget spent so far, the read cache, and the controls (SIGINT/SIGTERM and a
//! closed stdout reach every batch that is running). It accepts work — a whole batch
//! ([`Engine::execute`]), a stream's segment ([`Engine::spawn_segment`]), a turn (a new run
//! on the same engine, [`Engine::new_run`]) — and ends each run the same way
//! ([`Engine::end_run`]: its spans and its one history record; [`Engine::summary`]: the
//! summary and the exit status), then closes once ([`Engine::close`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::controls::{Controls, Running};
use super::finish::Finish;
use super::options::{CacheUse, RunOptions};
use crate::events::{Event, Outcome, Stats, Status};
use crate::history;
use crate::manifest::Manifest;
use crate::model_formats::{InputFormat, Usage};
use crate::plan::Plan;
use crate::report::Reporter;
use crate::run::{self, Control, Ended, RunConfig, RunEnd, RunReport};
use crate::run::{Approvals, Approver, Cache, Cassette, Journal, LaneStore, Resume};
use crate::tools::mcp::McpHub;
use crate::trace_context::TraceContext;

/// How long the event consumer lets events gather after each round.
const REPORTER_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
/// How many empty looks, a pause apart, before the reporters' thread parks until the next event.
const REPORTER_IDLE_LOOKS: u32 = 3;

/// What every batch of one run shares.
pub(super) struct Engine {
    pub manifest: Arc<Manifest>,
    mcp: Option<Arc<McpHub>>,
    lanes: Arc<dyn LaneStore>,
    pub run_id: String,
    approvals: Approvals,
    lane_events: bool,
    events: Option<mpsc::UnboundedSender<Event>>,
    consumer: Option<std::thread::JoinHandle<()>>,
    controls: Arc<Controls>,
    /// Set when stdout went away: nothing more is dispatched, and the run exits 0.
    pub drained: Arc<AtomicBool>,
    /// Set on SIGINT/SIGTERM: a stream stops reading.
    pub interrupted: Arc<AtomicBool>,
    pub start: Instant,
    /// What the run has spent (carried from one batch to the next).
    pub spent: f64,
    /// Calls the run has made (carried from one batch to the next, against `max_calls`).
    pub calls_made: u64,
    /// The read cache in the lane store (under `--no-cache` it answers nothing, but writes
    /// still mark their backends in it).
    cache: Option<Arc<Cache>>,
    /// The trace the run belongs to (`TRACEPARENT`, and whether its spans are exported).
    pub trace: Option<TraceContext>,
    /// When the run began, on the wall clock (for spans).
    pub started_wall: std::time::SystemTime,
    /// The tools, ready to invoke, built for the first batch and kept for the others (one HTTP
    /// pool, the MCP sessions).
    tools: Option<Arc<Vec<Arc<crate::tools::ToolImpl>>>>,
    /// Who answers approvals `--approve` did not (the face's: the terminal, for `run`).
    approver: Arc<dyn Approver>,
    /// `$TRACEPARENT`, for each run's span.
    traceparent: Option<String>,
    /// Where its runs' spans and history lines go.
    finish: Arc<Finish>,
    quiet: bool,
}

/// What the history needs of a run besides its report: the shape its plan had.
#[derive(Debug, Clone)]
pub(super) struct RunShape {
    pub width: usize,
    pub input_format: InputFormat,
    pub usage: Option<Usage>,
}

impl RunShape {
    /// The shape of `plan`, for an engine that keeps a history (the simulated schedule that
    /// gives the width is not free at 100,000 calls: without a history it is not run).
    pub(super) fn of(plan: &Plan, engine: &Engine) -> RunShape {
        RunShape {
            width: if engine.finish.keeps_history() {
                crate::plan::simulate(plan).width
            } else {
                0
            },
            input_format: plan.input_format,
            usage: plan.usage.clone(),
        }
    }
}

/// A run's summary lines (none under `--quiet`) and exit status.
pub(super) struct Summary {
    lines: Vec<String>,
    pub status: u8,
}

impl Summary {
    /// The lines on stderr; the exit status.
    pub(super) fn print(self) -> u8 {
        for l in &self.lines {
            eprintln!("{l}");
        }
        self.status
    }
}

/// What every batch of an engine shares — its tools, MCP sessions, cache, approvals and
/// reporters — held apart from the engine so that a face running many small runs at once
/// (the gateway's calls) builds each one's [`RunConfig`] the same way a batch's is built.
pub(super) struct CallKit {
    mcp: Option<Arc<McpHub>>,
    events: Option<mpsc::UnboundedSender<Event>>,
    lane_events: bool,
    approvals: Approvals,
    approver: Arc<dyn Approver>,
    cache: Option<Arc<Cache>>,
    tools: Arc<Vec<Arc<crate::tools::ToolImpl>>>,
}

/// Where one run stands within what its face runs: its id (idempotency keys), lane store,
/// place among the segments, clock, what was spent and called before it, and its trace.
pub(super) struct Scope {
    pub run_id: String,
    pub lanes: Arc<dyn LaneStore>,
    pub segment: Option<usize>,
    pub start: Option<Instant>,
    pub spent: f64,
    pub calls_made: u64,
    pub trace: Option<TraceContext>,
}

impl CallKit {
    /// The same kit for another manifest (the gateway's reload): its tools built anew, on the
    /// MCP sessions of `mcp`; events, approvals and the cache as they were.
    pub(super) fn for_manifest(
        &self,
        manifest: &Manifest,
        plan: &Plan,
        mcp: Option<Arc<McpHub>>,
    ) -> CallKit {
        CallKit {
            tools: Arc::new(run::tool_impls(manifest, plan, mcp.clone())),
            mcp,
            events: self.events.clone(),
            lane_events: self.lane_events,
            approvals: self.approvals.clone(),
            approver: self.approver.clone(),
            cache: self.cache.clone(),
        }
    }

    /// The configuration of one run in `scope`; `events`: where its events go instead of
    /// the engine's reporters (with lane events), `None`: the engine's.
    pub(super) fn config(
        &self,
        scope: Scope,
        events: Option<mpsc::UnboundedSender<Event>>,
    ) -> RunConfig {
        let (events, lane_events) = match events {
            Some(tx) => (Some(tx), true),
            None => (self.events.clone(), self.lane_events),
        };
        RunConfig {
            run_id: scope.run_id,
            lanes: scope.lanes,
            events,
            lane_events,
            mcp: self.mcp.clone(),
            approvals: self.approvals.clone(),
            approver: self.approver.clone(),
            journal: None,
            resume: None,
            retry_indeterminate: false,
            record: false,
            replay: None,
            start: scope.start,
            spent: scope.spent,
            segment: scope.segment,
            cache: self.cache.clone(),
            calls_made: scope.calls_made,
            trace: scope.trace,
            tools: Some(self.tools.clone()),
            relay: None,
        }
    }
}

/// The durable parts of a run over a whole batch (none for a stream).
#[derive(Default)]
pub(super) struct Durability {
    pub journal: Option<Journal>,
    pub resume: Option<Arc<Resume>>,
    pub retry_indeterminate: bool,
    pub record: bool,
    pub replay: Option<Arc<Cassette>>,
}

impl Engine {
    /// Start the reporters (a face that stops on SIGINT/SIGTERM says so:
    /// [`Engine::interrupt_on_signals`]).
    pub(super) fn open(
        opts: &RunOptions,
        manifest: Manifest,
        mcp: Option<Arc<McpHub>>,
        lanes: Arc<dyn LaneStore>,
        run_id: String,
        approver: Arc<dyn Approver>,
    ) -> Engine {
        let controls: Arc<Controls> = Arc::default();
        let drained = Arc::new(AtomicBool::new(false));
        let (c, d) = (controls.clone(), drained.clone());
        let reporters = super::reporters::live(opts, move || {
            d.store(true, Ordering::SeqCst);
            c.tell(Control::Drain);
        });
        if opts.streaming {
            watch_reader(controls.clone(), drained.clone());
        }
        let (events, consumer) = if reporters.is_empty() {
            (None, None)
        } else {
            let (tx, rx) = mpsc::unbounded_channel::<Event>();
            let consumer = std::thread::spawn(move || consume(rx, reporters));
            (Some(tx), Some(consumer))
        };
        let interrupted = Arc::new(AtomicBool::new(false));
        let cache = Cache::with_lookups(
            lanes.cache_store(),
            &run_id,
            opts.cache == CacheUse::Refresh,
            opts.cache != CacheUse::Off,
        );
        let history = opts.history.clone().or_else(|| manifest.history.clone());
        let manifest = Arc::new(manifest);
        let finish = Finish::new(manifest.clone(), history, opts.otlp.clone(), opts.quiet);
        Engine {
            manifest,
            mcp,
            approvals: opts.approvals.clone(),
            lane_events: opts.live != super::options::Live::Off,
            events,
            consumer,
            controls,
            drained,
            interrupted,
            start: Instant::now(),
            spent: 0.0,
            calls_made: 0,
            cache: Some(cache),
            trace: TraceContext::new(opts.traceparent.as_deref(), opts.otlp.is_some()),
            started_wall: std::time::SystemTime::now(),
            tools: None,
            lanes,
            run_id,
            approver,
            traceparent: opts.traceparent.clone(),
            finish: Arc::new(finish),
            quiet: opts.quiet,
        }
    }

    /// SIGINT and SIGTERM reach every run of this engine: the first stops them gracefully,
    /// the second at once (the CLI faces; the gateway drains on its own terms).
    pub(super) fn interrupt_on_signals(&self, rt: &tokio::runtime::Runtime) {
        let (controls, interrupted) = (self.controls.clone(), self.interrupted.clone());
        let mut signals = rt.block_on(async { super::signals::subscribe() });
        rt.spawn(async move {
            loop {
                super::signals::next(&mut signals).await;
                interrupted.store(true, Ordering::SeqCst);
                controls.tell(Control::Interrupt);
            }
        });
    }

    /// Start another run in this process (a `--turns` turn): a new run id (idempotency keys
    /// are per run) and a new span in the same trace.
    pub(super) fn new_run(&mut self) {
        self.run_id = run::new_run_id();
        self.started_wall = std::time::SystemTime::now();
        self.start = Instant::now();
        self.spent = 0.0;
        self.calls_made = 0;
        if let Some(t) = &self.trace {
            self.trace = TraceContext::new(self.traceparent.as_deref(), t.exported);
        }
    }

    /// The lane store the next batches use (a turn's own lane table, same store).
    pub(super) fn set_lanes(&mut self, lanes: Arc<dyn LaneStore>) {
        self.lanes = lanes;
    }

    /// Tell the reporters something the batches do not (a stream's start, growth and end).
    pub(super) fn emit(&self, e: Event) {
        if let Some(tx) = &self.events {
            let _ = tx.send(e);
        }
    }

    /// What every batch (or every gateway call) of this engine shares, built for the first.
    pub(super) fn kit(&mut self, plan: &Plan) -> Arc<CallKit> {
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

    /// The configuration of one batch, and its control channel (registered with the others).
    fn config(
        &mut self,
        plan: &Plan,
        d: Durability,
        segment: Option<usize>,
    ) -> (RunConfig, Running, mpsc::UnboundedReceiver<Control>) {
        let kit = self.kit(plan);
        let (running, rx) = self.controls.enter();
        if self.drained.load(Ordering::SeqCst) {
            self.controls.tell(Control::Drain);
        }
        let scope = Scope {
            run_id: self.run_id.clone(),
            lanes: self.lanes.clone(),
            segment,
            start: Some(self.start),
            spent: self.spent,
            calls_made: self.calls_made,
            trace: self.trace.clone(),
        };
        let mut config = kit.config(scope, None);
        config.journal = d.journal;
        config.resume = d.resume;
        config.retry_indeterminate = d.retry_indeterminate;
        config.record = d.record;
        config.replay = d.replay;
        (config, running, rx)
    }

    /// Run a whole batch to its end. The caller may keep a clone of `plan`: then the run
    /// ends without freeing it (see `run_whole`).
    pub(super) fn execute(
        &mut self,
        rt: &tokio::runtime::Runtime,
        plan: Arc<Plan>,
        d: Durability,
    ) -> RunReport {
        let (config, running, rx) = self.config(&plan, d, None);
        let manifest = self.manifest.clone();
        let report = rt.block_on(run::execute_spawned(manifest, plan, config, rx));
        drop(running);
        self.spent = report.spent;
        self.calls_made = report.calls_made;
        report
    }

    /// Start one segment of a stream (its calls numbered from `base` in the run); it runs
    /// beside whatever segments are running.
    pub(super) fn spawn_segment(
        &mut self,
        rt: &tokio::runtime::Runtime,
        plan: Plan,
        base: usize,
    ) -> JoinHandle<RunReport> {
        let (config, running, rx) = self.config(&plan, Durability::default(), Some(base));
        let manifest = self.manifest.clone();
        rt.spawn(async move {
            let report = run::execute(manifest, Arc::new(plan), config, rx).await;
            drop(running);
            report
        })
    }

    /// End the run: MCP sessions closed, every event rendered.
    pub(super) fn close(mut self, rt: tokio::runtime::Runtime) {
        if let Some(hub) = &self.mcp {
            rt.block_on(hub.shutdown());
        }
        // Permits given back as the last calls ended reach a shared store before the exit.
        rt.block_on(self.lanes.clone().settle());
        // Tasks that outlived the run (none should) must not keep the process alive.
        rt.shutdown_background();
        self.events = None;
        if let Some(c) = self.consumer.take() {
            // Out of its pause at once: the last lines go out now, not a pause or two later.
            c.thread().unpark();
            let _ = c.join();
        }
    }
}

impl Engine {
    /// Where this engine's runs end (the gateway's calls and sessions end there too).
    pub(super) fn finish(&self) -> Arc<Finish> {
        self.finish.clone()
    }

    /// What runs on this engine now (the gateway registers its calls there too).
    pub(super) fn controls(&self) -> Arc<Controls> {
        self.controls.clone()
    }

    /// Whether runs append a history line (a face may skip what only the history needs).
    pub(super) fn keeps_history(&self) -> bool {
        self.finish.keeps_history()
    }

    /// The end of the run now ending, with what it did (`results`: none when the face kept
    /// none; `peak_in_flight`: 0 until the face says).
    pub(super) fn run_end<'a>(
        &'a self,
        tenant: &'a str,
        outcome: Outcome,
        stats: &'a Stats,
        shape: &'a RunShape,
    ) -> RunEnd<'a> {
        RunEnd {
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
    pub(super) fn report_end<'a>(
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
    pub(super) fn end_run(&self, rt: &tokio::runtime::Runtime, end: &RunEnd<'_>) {
        rt.block_on(self.finish.finish(end));
    }

    /// The run's summary — one line and the lane lines, after `label` (e.g. `turn 3: `) —
    /// and its exit status. Printed by [`Summary::print`] (a face prints it after its
    /// outputs).
    pub(super) fn summary(
        &self,
        end: &RunEnd<'_>,
        statuses: &[Status],
        label: Option<&str>,
    ) -> Summary {
        let mut lines = Vec::new();
        if !self.quiet {
            let line = crate::report::summary::line(end.outcome, end.stats, statuses);
            lines.push(format!("{}{line}", label.unwrap_or("")));
            for l in crate::report::summary::lane_lines(end.stats) {
                lines.push(format!("  {l}"));
            }
        }
        Summary {
            lines,
            status: super::exit_code(end.outcome, end.stats.failed),
        }
    }
}

/// Feed events to the reporters until the run ends.
///
/// Events are taken in batches, one wake-up a millisecond at most, and the thread parks only
/// once a few looks in a row found nothing: while calls keep finishing, a call's completion
/// never has to wake this thread (a futex and a context switch a call otherwise). Its pauses
/// are `park_timeout`s, which [`Engine::close`] cuts short: a run's last lines and its end
/// are seen as soon as the run is over, and once every sender is gone it does not pause again
/// (a one-call run ended about 2 ms later before).
fn consume(mut rx: mpsc::UnboundedReceiver<Event>, mut reporters: Vec<Box<dyn Reporter>>) {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut idle = 0;
    loop {
        let first = if idle >= REPORTER_IDLE_LOOKS {
            rx.blocking_recv()
        } else {
            match rx.try_recv() {
                Ok(ev) => Some(ev),
                Err(TryRecvError::Empty) => {
                    idle += 1;
                    std::thread::park_timeout(REPORTER_PAUSE);
                    continue;
                }
                Err(TryRecvError::Disconnected) => None,
            }
        };
        let Some(ev) = first else { break };
        idle = 0;
        for rep in reporters.iter_mut() {
            rep.handle(&ev);
        }
        // Handle whatever else is already waiting, then flush once: streamed lines go out as
        // soon as the run pauses, without a write per line when it does not.
        while let Ok(ev) = rx.try_recv() {
            for rep in reporters.iter_mut() {
                rep.handle(&ev);
            }
        }
        for rep in reporters.iter_mut() {
            rep.flush();
        }
        if !rx.is_closed() {
            std::thread::park_timeout(REPORTER_PAUSE);
        }
    }
}

/// When stdout is a pipe, notice at once when its reader goes away (`| head -1`), not at the
/// next write: nothing more is dispatched, and the run ends when its calls in flight do.
fn watch_reader(controls: Arc<Controls>, drained: Arc<AtomicBool>) {
    use std::os::fd::AsRawFd;
    let fd = std::io::stdout().as_raw_fd();
    // SAFETY: fstat on our own stdout into a zeroed struct; failure is reported by the result.
    let is_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_pipe {
        return;
    }
    std::thread::spawn(move || loop {
        let mut p = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own; with no events asked for, it returns only when
        // the pipe's reader has closed (POLLERR/POLLHUP), or on an error.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            drained.store(true, Ordering::SeqCst);
            controls.tell(Control::Drain);
            return;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    });
}
