//! `flux-tools run`: the one run pipeline, for a whole batch and for a stream of JSON Lines.
//!
//! Both go through the same steps: the options ([`options`]), the manifest with its MCP
//! sessions started and annotations applied, the lane store ([`open_lanes`]), a [`Session`]
//! (run id, approvals, the terminal approver, signals, the reporters on their own thread), one
//! `execute` per batch (a whole batch is one; a stream's chunks are many, sharing the
//! session's lanes, budget, clock and deadline), then the outputs, the summary and the exit
//! code ([`super::exit_code`]). Only what needs the whole batch (journal, resume, cassettes,
//! trace, `--output`) is refused for a stream.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::plan::{load_plan, start_mcp};
use super::stream::{first_jsonl_line, Chunks};
use super::terminal::TerminalApprover;
use super::{exit_code, load_manifest, print_warnings, runtime};
use crate::batch::{Batch, Reading};
use crate::cli::{Args, LaneStoreChoice, ProgressChoice, ResultsFormat, RunArgs};
use crate::config;
use crate::error::Error;
use crate::events::{Event, Outcome, Stats, Status};
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{self, External, LaneSpec, Plan, PlanOptions};
use crate::report::emit;
use crate::report::output::{self, RunDocument, StreamWriter};
use crate::report::progress::Progress;
use crate::report::{self, Reporter};
use crate::run::cassette::Cassette;
use crate::run::journal::{self, Journal, Resume};
use crate::run::lanes::{LaneStore, LocalLanes, MemoryLanes, RedisLanes};
use crate::run::{self, lease, RunConfig, RunReport};
use crate::tools::mcp::McpHub;
use crate::tools::ToolKind;

/// How long the event consumer lets events gather after each round.
const REPORTER_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

pub(super) fn run(args: &Args, r: &RunArgs) -> Result<u8, Error> {
    let format = r.format.unwrap_or(if std::io::stdout().is_terminal() {
        ResultsFormat::Table
    } else {
        ResultsFormat::Jsonl
    });
    let opts = options(r)?;
    for path in [&r.output, &r.record, &r.trace].into_iter().flatten() {
        config::check_output_path(path)?;
    }
    let rt = runtime()?;
    let stdin = matches!(r.batch.as_deref(), None | Some("-"));
    if r.stream && stdin && matches!(r.input_format, InputFormat::Auto | InputFormat::Jsonl) {
        if let Some(first) = first_jsonl_line()? {
            return run_stream(args, r, opts, first, rt);
        }
    }
    run_whole(args, r, opts, format, rt)
}

/// How to read the batch `--input-format` and `--literal` name.
pub(super) fn reading(format: InputFormat, literal: bool) -> Reading {
    Reading {
        format,
        literal,
        id_offset: 0,
    }
}

/// The command line's settings for planning.
fn options(r: &RunArgs) -> Result<PlanOptions, Error> {
    let deadline = match &r.deadline {
        Some(d) => {
            Some(crate::duration::parse(d).map_err(|e| Error::Usage(format!("--deadline: {e}")))?)
        }
        None => None,
    };
    if r.max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
        return Err(Error::Usage(
            "--max-cost must be a non-negative number".into(),
        ));
    }
    if let Some(t) = &r.tenant {
        crate::batch::check_id(t)
            .map_err(|e| Error::Usage(format!("--tenant: {}", e.replace("call id", "tenant"))))?;
    }
    Ok(PlanOptions {
        tenant: r.tenant.clone(),
        max_concurrent_tools: r.max_concurrent_tools,
        on_tool_error: r.on_tool_error,
        deadline,
        max_cost: r.max_cost,
        external: None,
        max_processes: Some(config::process_cap(r.max_processes)),
        lanes: None,
    })
}

/// The lane store `--lane-store` names, for `lanes`.
fn open_lanes(
    choice: &LaneStoreChoice,
    lanes: &[LaneSpec],
    manifest: &Manifest,
    rt: &tokio::runtime::Runtime,
) -> Result<Arc<dyn LaneStore>, Error> {
    Ok(match choice {
        LaneStoreChoice::Memory => Arc::new(MemoryLanes::new(lanes)),
        LaneStoreChoice::Local => Arc::new(
            LocalLanes::new(lanes, &manifest.path).map_err(|e| Error::Usage(e.to_string()))?,
        ),
        LaneStoreChoice::Redis(url) => Arc::new(
            rt.block_on(RedisLanes::connect(
                url,
                lanes,
                &manifest.path.display().to_string(),
            ))
            .map_err(|e| Error::Usage(e.to_string()))?,
        ),
    })
}

/// What every batch of one run shares.
struct Session {
    manifest: Arc<Manifest>,
    mcp: Option<Arc<McpHub>>,
    lanes: Arc<dyn LaneStore>,
    run_id: String,
    approvals: crate::run::gate::Approvals,
    lane_events: bool,
    events: Option<mpsc::UnboundedSender<Event>>,
    consumer: Option<std::thread::JoinHandle<()>>,
    /// Signals go to whichever batch is running.
    signals: Arc<std::sync::Mutex<Option<mpsc::UnboundedSender<()>>>>,
    start: Instant,
    spent: f64,
}

/// The durable parts of a run over a whole batch (none for a stream).
#[derive(Default)]
struct Durability {
    journal: Option<Journal>,
    resume: Option<Arc<Resume>>,
    retry_indeterminate: bool,
    record: bool,
    replay: Option<Arc<Cassette>>,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    fn open(
        r: &RunArgs,
        manifest: Manifest,
        mcp: Option<Arc<McpHub>>,
        lanes: Arc<dyn LaneStore>,
        run_id: String,
        streaming: bool,
        rt: &tokio::runtime::Runtime,
    ) -> Session {
        let show_progress = match r.progress {
            ProgressChoice::Always => true,
            ProgressChoice::Never => false,
            ProgressChoice::Auto => {
                std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
            }
        };
        let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
        if show_progress {
            reporters.push(Box::new(Progress::new(
                r.progress == ProgressChoice::Always,
            )));
        }
        if streaming {
            let render: Option<output::RenderFn> = r
                .emit
                .map(|e| Box::new(move |res: &_| emit::item(e, res)) as output::RenderFn);
            reporters.push(Box::new(StreamWriter::new(
                std::io::BufWriter::with_capacity(1 << 16, std::io::stdout()),
                render,
            )));
        }
        let (events, consumer) = if reporters.is_empty() {
            (None, None)
        } else {
            let (tx, rx) = mpsc::unbounded_channel::<Event>();
            (
                Some(tx),
                Some(std::thread::spawn(move || consume(rx, reporters))),
            )
        };
        let signals: Arc<std::sync::Mutex<Option<mpsc::UnboundedSender<()>>>> = Arc::default();
        let current = signals.clone();
        let (sig_tx, mut sig_rx) = mpsc::unbounded_channel::<()>();
        rt.spawn(async move {
            while sig_rx.recv().await.is_some() {
                if let Some(tx) = current.lock().ok().and_then(|c| c.clone()) {
                    let _ = tx.send(());
                }
            }
        });
        rt.block_on(async { spawn_signal_forwarder(sig_tx) });
        Session {
            manifest: Arc::new(manifest),
            mcp,
            lanes,
            run_id,
            approvals: r.approve.clone().unwrap_or_default(),
            lane_events: show_progress,
            events,
            consumer,
            signals,
            start: Instant::now(),
            spent: 0.0,
        }
    }

    /// Run one batch of the run to its end.
    fn execute(&mut self, rt: &tokio::runtime::Runtime, plan: Plan, d: Durability) -> RunReport {
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        if let Ok(mut c) = self.signals.lock() {
            *c = Some(tx);
        }
        let config = RunConfig {
            run_id: self.run_id.clone(),
            lanes: self.lanes.clone(),
            events: self.events.clone(),
            lane_events: self.lane_events,
            mcp: self.mcp.clone(),
            approvals: self.approvals.clone(),
            approver: Arc::new(TerminalApprover),
            journal: d.journal,
            resume: d.resume,
            retry_indeterminate: d.retry_indeterminate,
            record: d.record,
            replay: d.replay,
            start: Some(self.start),
            spent: self.spent,
        };
        let manifest = self.manifest.clone();
        let report = rt.block_on(run::execute_spawned(manifest, Arc::new(plan), config, rx));
        self.spent = report.spent;
        report
    }

    /// End the run: MCP sessions closed, every event rendered.
    fn close(mut self, rt: tokio::runtime::Runtime) {
        if let Some(hub) = &self.mcp {
            rt.block_on(hub.shutdown());
        }
        // Tasks that outlived the run (none should) must not keep the process alive.
        rt.shutdown_background();
        self.events = None;
        if let Some(c) = self.consumer.take() {
            let _ = c.join();
        }
    }
}

/// Feed events to the reporters until the run ends.
fn consume(mut rx: mpsc::UnboundedReceiver<Event>, mut reporters: Vec<Box<dyn Reporter>>) {
    while let Some(ev) = rx.blocking_recv() {
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
        // Let events gather for a moment: one wake-up per millisecond at most, rather than a
        // futex and a context switch per call when calls finish thousands a second.
        std::thread::sleep(REPORTER_PAUSE);
    }
}

/// A whole batch: one plan, one execute, every output.
fn run_whole(
    args: &Args,
    r: &RunArgs,
    opts: PlanOptions,
    format: ResultsFormat,
    rt: tokio::runtime::Runtime,
) -> Result<u8, Error> {
    let (manifest, mut plan, mcp) = load_plan(
        args,
        r.batch.as_deref(),
        &opts,
        reading(r.input_format, r.literal),
        &rt,
    )?;
    print_warnings(args, &plan.warnings);
    lease::borrow(&mut plan.lanes, &manifest);
    let lanes = open_lanes(&r.lane_store, &plan.lanes, &manifest, &rt)?;
    let (mut run_id, journal, resume, journal_thread) = open_journal(r, &manifest, &plan)?;
    let replay = match &r.replay {
        Some(path) => {
            let c = Cassette::load(path).map_err(Error::Usage)?;
            // Replay reports the recorded run: its id, idempotency keys and timings.
            run_id = c.run_id.clone();
            Some(Arc::new(c))
        }
        None => None,
    };
    let streaming = r.stream || (format == ResultsFormat::Jsonl && r.emit.is_none());
    let mut session = Session::open(r, manifest, mcp, lanes, run_id, streaming, &rt);
    let durability = Durability {
        journal: journal.clone(),
        resume,
        retry_indeterminate: r.retry_indeterminate,
        record: r.record.is_some(),
        replay,
    };
    let report = session.execute(&rt, plan, durability);
    session.close(rt);
    if let Some(j) = journal {
        j.record(serde_json::json!({"type": "end", "outcome": report.outcome}));
        drop(j);
        if let Some(t) = journal_thread {
            let _ = t.join();
        }
    }
    write_outputs(args, r, format, streaming, &report)?;
    let statuses: Vec<Status> = report.results.iter().map(|r| r.status).collect();
    summary(args, report.outcome, &report.stats, &statuses);
    Ok(exit_code(report.outcome, report.stats.failed))
}

/// A stream of JSON Lines: the same session for every chunk, results written as they come.
fn run_stream(
    args: &Args,
    r: &RunArgs,
    mut opts: PlanOptions,
    first: (usize, String),
    rt: tokio::runtime::Runtime,
) -> Result<u8, Error> {
    for (set, flag) in [
        (r.output.is_some(), "--output"),
        (
            r.journal.is_some() || r.resume.is_some(),
            "--journal/--resume",
        ),
        (
            r.record.is_some() || r.replay.is_some(),
            "--record/--replay",
        ),
        (r.trace.is_some(), "--trace"),
    ] {
        if set {
            return Err(Error::Usage(format!("{flag} needs a whole batch; it cannot be used with a --stream of JSON Lines on stdin")));
        }
    }
    let mut manifest = load_manifest(args)?;
    // Which tools the stream will call is not known yet: every MCP tool is looked up.
    let mcp_tools: Vec<String> = manifest
        .tools
        .iter()
        .filter(|t| matches!(t.kind, ToolKind::Mcp(_)))
        .map(|t| t.name.clone())
        .collect();
    let mcp = start_mcp(args, &mut manifest, &mcp_tools, &rt)?;
    let mut table = plan::lane_table(&manifest, &opts);
    lease::borrow(&mut table, &manifest);
    let lanes = open_lanes(&r.lane_store, &table, &manifest, &rt)?;
    opts.lanes = Some(table);
    let run_id = run::scheduler::new_run_id();
    let mut session = Session::open(r, manifest, mcp, lanes, run_id, true, &rt);
    let mut external: Arc<External> = Arc::default();
    let (mut seen, mut failures) = (0usize, Vec::<Status>::new());
    let mut total: Option<Stats> = None;
    let mut outcome = Outcome::Completed;
    let mut failed = None;
    for chunk in Chunks::new(first) {
        let reading = Reading {
            format: InputFormat::Jsonl,
            literal: r.literal,
            id_offset: seen,
        };
        let parsed = Batch::parse_with(chunk.file, reading).and_then(|(batch, _)| {
            opts.external = Some(external.clone());
            plan::build(&session.manifest, &batch, &opts).map(|p| (batch, p))
        });
        let (batch, plan) = match parsed {
            Ok(x) => x,
            Err(d) => {
                failed = Some(Error::Invalid(d));
                break;
            }
        };
        let report = session.execute(&rt, plan, Durability::default());
        let ext = Arc::make_mut(&mut external);
        for (c, res) in batch.calls.iter().zip(&report.results) {
            if c.explicit_id {
                ext.insert(c.id.clone(), res.is_ok().then(|| res.output.clone()));
            }
            if !res.is_ok() {
                failures.push(res.status);
            }
        }
        seen += chunk.calls;
        match &mut total {
            Some(t) => run::stats::merge(t, report.stats),
            None => total = Some(report.stats),
        }
        match report.outcome {
            Outcome::Completed => {}
            // A budget refuses calls that do not fit; later (cheaper) ones may still run.
            Outcome::BudgetExhausted => outcome = Outcome::BudgetExhausted,
            ended => {
                outcome = ended;
                break;
            }
        }
    }
    session.close(rt);
    if let Some(e) = failed {
        return Err(e);
    }
    let stats = total.unwrap_or_default();
    summary(args, outcome, &stats, &failures);
    Ok(exit_code(outcome, stats.failed))
}

/// Results on stdout (unless streamed), and the files `--trace`, `--record` and `--output` ask for.
fn write_outputs(
    args: &Args,
    r: &RunArgs,
    format: ResultsFormat,
    streamed: bool,
    report: &RunReport,
) -> Result<(), Error> {
    let doc = RunDocument {
        run_id: &report.run_id,
        outcome: report.outcome,
        results: &report.results,
        stats: &report.stats,
    };
    if let Some(path) = &r.trace {
        let trace = report::timeline::chrome_trace(&report.run_id, &report.results);
        config::write_atomic_with(path, |w| write_json_line(w, &trace))?;
    }
    if let Some(path) = &r.record {
        let doc = run::cassette::document(
            &report.run_id,
            &report.results,
            &report.fingerprints,
            &report.recorded_args,
        );
        config::write_atomic_with(path, |w| {
            serde_json::to_writer_pretty(&mut *w, &doc)?;
            w.write_all(b"\n")
        })?;
    }
    if let Some(path) = &r.output {
        config::write_atomic_with(path, |w| output::write_json(w, &doc))?;
    }
    if streamed {
        return Ok(());
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let res = match (r.emit, format) {
        (Some(e), _) => emit::write(&mut out, e, &report.results),
        (None, ResultsFormat::Json) => output::write_json(&mut out, &doc),
        _ => output::write_table(&mut out, &doc, config::use_color(args.color)),
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Error::io("cannot write to stdout", e)),
    }
}

/// The one-line summary and the lane lines on stderr.
fn summary(args: &Args, outcome: Outcome, stats: &Stats, statuses: &[Status]) {
    if args.quiet {
        return;
    }
    eprintln!("{}", report::summary::line(outcome, stats, statuses));
    for l in report::summary::lane_lines(stats) {
        eprintln!("  {l}");
    }
}

/// `value` as one line of compact JSON.
fn write_json_line(w: &mut dyn Write, value: &serde_json::Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, value)?;
    w.write_all(b"\n")
}

type JournalSetup = (
    String,
    Option<Journal>,
    Option<Arc<Resume>>,
    Option<std::thread::JoinHandle<()>>,
);

/// `--journal` / `--resume`: the run id (the journal's when resuming), the journal writer and
/// what the earlier run recorded. A journal of another manifest or batch is refused.
fn open_journal(r: &RunArgs, manifest: &Manifest, plan: &Plan) -> Result<JournalSetup, Error> {
    let manifest_fp = journal::manifest_fingerprint(&manifest.file.text);
    let resume = match &r.resume {
        Some(path) => {
            let res = Resume::load(path).map_err(Error::Usage)?;
            if res.manifest != manifest_fp {
                return Err(Error::Usage(format!(
                    "journal `{}` was written with a different manifest; it cannot be resumed with {}",
                    path.display(),
                    manifest.name()
                )));
            }
            if !res.ids.is_empty() && !plan.calls.iter().any(|c| res.ids.contains(&c.id)) {
                return Err(Error::Usage(format!(
                    "journal `{}` belongs to a different batch: none of its calls are in this one",
                    path.display()
                )));
            }
            Some(Arc::new(res))
        }
        None => None,
    };
    let run_id = resume
        .as_ref()
        .map_or_else(run::scheduler::new_run_id, |r| r.run_id.clone());
    let path = r.journal.as_ref().or(r.resume.as_ref());
    let (journal, thread) = match path {
        Some(p) => {
            let (j, t) = Journal::open(p).map_err(Error::Usage)?;
            if resume.is_some() {
                j.record(serde_json::json!({"type": "resume", "run_id": run_id}));
            } else {
                j.record(
                    serde_json::json!({"type": "run", "run_id": run_id, "manifest": manifest_fp}),
                );
            }
            (Some(j), Some(t))
        }
        None => (None, None),
    };
    Ok((run_id, journal, resume, thread))
}

/// Forward SIGINT and SIGTERM to the scheduler: the first stops gracefully, the second at once.
fn spawn_signal_forwarder(tx: mpsc::UnboundedSender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if tx.send(()).is_err() {
                break;
            }
        }
    });
}
