//! A stream of JSON Lines calls on stdin (`… | flux-tools run --stream`): calls start as they
//! arrive, results go out in call order as they resolve.
//!
//! The stream is cut into chunks: whatever lines have arrived (up to [`CHUNK`]) once the
//! first is there. Each chunk is planned against the run's one lane table and runs as a
//! *segment* of the run ([`Engine::spawn_segment`]) with the run's manifest, lane store, MCP
//! sessions, approvals, hooks, clock and deadline; its calls are numbered on from the
//! segments before it, so results, ids and error locations continue across chunks.
//!
//! A segment starts at once, beside the segments still running, when nothing in call order
//! forbids it: it has no `parallel_safe = false` call, no reference or `after` to a call
//! outside it, no write while a running segment has one (the write chain), no running
//! segment holds a `parallel_safe = false` call, and the run has no budget and is not
//! `fail_run` (both need one ledger of what ran first). Otherwise it waits for every running
//! segment to finish first — one more barrier, which can only make a run more ordered, never
//! less safe. A call may reference or be `after` a call of an earlier chunk that had an
//! explicit `id` (its output is kept; default-id calls are not, so memory is bounded by the
//! explicitly named calls).

use std::collections::{HashSet, VecDeque};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;

use super::engine::{Ending, Engine, RunShape};
use super::load_manifest;
use super::options::RunOptions;
use super::prepare::{open_lanes, start_mcp};
use super::terminal::TerminalApprover;
use crate::batch::{Batch, OnToolError, Reading};
use crate::cli::Args;
use crate::error::{Error, SourceFile};
use crate::events::{Event, LaneInfo, Outcome, Stats, Status};
use crate::history;
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{self, External, PlanOptions};
use crate::run::{self, lease, RunReport};
use crate::tools::ToolKind;

/// Most calls in one chunk.
pub const CHUNK: usize = 2048;
/// Most segments running at once: memory stays bounded by this many chunks however fast the
/// stream arrives (results go out in call order, so a later segment cannot get far ahead).
const MAX_RUNNING: usize = 8;
/// How long to wait for more lines before running what has arrived.
const GATHER: Duration = Duration::from_millis(5);

/// Read stdin's first non-empty line; `Some((blank lines before it, the line))` when it is a
/// JSON object (a JSON Lines stream), else the text read so far is put back for a whole-batch
/// read and `None` is returned.
pub(super) fn first_jsonl_line() -> Result<Option<(usize, String)>, Error> {
    let mut stdin = std::io::stdin().lock();
    let mut seen = String::new();
    let mut blank = 0;
    loop {
        let mut line = String::new();
        let n = stdin
            .read_line(&mut line)
            .map_err(|e| Error::io("cannot read stdin", e))?;
        if n == 0 {
            crate::config::unread_stdin(seen);
            return Ok(None);
        }
        if line.trim().is_empty() {
            seen.push_str(&line);
            blank += 1;
            continue;
        }
        // A call starts a stream; a one-line document (a model's reply as `model_dump_json()`
        // or curl writes it, or a batch document) is read whole.
        if serde_json::from_str::<Value>(&line).is_ok_and(|v| is_call(&v)) {
            let line = line.trim_end_matches(['\n', '\r']).to_string();
            return Ok(Some((blank, line)));
        }
        seen.push_str(&line);
        crate::config::unread_stdin(seen);
        return Ok(None);
    }
}

/// A JSON Lines call: an object with `tool` and no `calls`.
fn is_call(v: &Value) -> bool {
    v.get("tool").is_some() && v.get("calls").is_none()
}

/// The calls of stdin in chunks; each line with its 0-based line number.
pub(super) struct Chunks {
    lines: Receiver<(usize, String)>,
    /// When any is set, no more chunks are read (Ctrl-C, a closed stdout).
    stop: Vec<Arc<AtomicBool>>,
}

/// One chunk: its text and how many lines of the input came before it.
pub(super) struct Chunk {
    pub file: SourceFile,
    pub calls: usize,
}

impl Chunks {
    /// The stream whose first call is `first`, after `blank` blank lines.
    pub fn new((blank, first): (usize, String), stop: Vec<Arc<AtomicBool>>) -> Chunks {
        let (tx, rx) = sync_channel::<(usize, String)>(CHUNK * 2);
        std::thread::spawn(move || {
            if tx.send((blank, first)).is_err() {
                return;
            }
            for (n, line) in std::io::stdin().lock().lines().enumerate() {
                let Ok(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                if tx.send((blank + 1 + n, line)).is_err() {
                    break;
                }
            }
        });
        Chunks { lines: rx, stop }
    }
}

impl Iterator for Chunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        let (first_line, first) = loop {
            if self.stop.iter().any(|s| s.load(Ordering::SeqCst)) {
                return None;
            }
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => break line,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        };
        let mut text = first;
        let mut last_line = first_line;
        let mut calls = 1;
        while calls < CHUNK {
            match self.lines.recv_timeout(GATHER) {
                Ok((n, l)) => {
                    // Blank lines skipped by the reader keep their place, so a location
                    // names the line as the user counts it.
                    for _ in last_line..n {
                        text.push('\n');
                    }
                    text.push_str(&l);
                    last_line = n;
                    calls += 1;
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        Some(Chunk {
            file: SourceFile::new("<stdin>", text).after_lines(first_line),
            calls,
        })
    }
}

/// What a segment holds that decides whether the next may run beside it.
#[derive(Debug, Clone, Copy, Default)]
struct Traits {
    /// A `parallel_safe = false` call: nothing may overlap it.
    alone: bool,
    /// A write (the write chain runs across segments).
    writes: bool,
    /// A reference or `after` to a call outside the segment.
    outside: bool,
}

impl Traits {
    fn of(batch: &Batch, manifest: &Manifest) -> Traits {
        let ids: HashSet<&str> = batch.calls.iter().map(|c| c.id.as_str()).collect();
        let mut t = Traits::default();
        for c in &batch.calls {
            if let Some(tool) = manifest.tool(&c.tool) {
                t.alone |= !tool.parallel_safe;
                t.writes |= tool.is_write();
            }
            t.outside |= c.args.refs().any(|(_, r)| !ids.contains(r.target.as_str()))
                || c.after.iter().any(|a| !ids.contains(a.as_str()));
        }
        t
    }
}

/// A segment running.
struct Segment {
    handle: JoinHandle<RunReport>,
    traits: Traits,
    /// Its calls' ids, and whether each was named (named ones are kept for later references).
    ids: Vec<(String, bool)>,
}

/// The stream's ledger: segments running, what finished, how the run stands.
struct Ledger {
    running: VecDeque<Segment>,
    external: Arc<External>,
    failures: Vec<Status>,
    total: Option<Stats>,
    outcome: Outcome,
    /// The run has a call cap: segments count calls one after another.
    capped: bool,
    /// For the history: the widest segment's plan width, and the most calls a segment had in
    /// flight at once.
    width: usize,
    peak: usize,
    /// Every result, kept only when the run's spans are exported.
    kept: Option<Vec<crate::events::CallResult>>,
}

impl Ledger {
    /// Whether a segment with `next` traits must wait for every running one.
    fn must_wait(&self, next: Traits, opts: &PlanOptions) -> bool {
        let ledgered = opts.max_cost.is_some()
            || self.capped
            || opts.on_tool_error == Some(OnToolError::FailRun);
        ledgered
            || next.alone
            || next.outside
            || self
                .running
                .iter()
                .any(|s| s.traits.alone || (next.writes && s.traits.writes))
    }

    /// Take in the segments that finished (all of them with `wait`), in order.
    fn settle(&mut self, session: &mut Engine, rt: &tokio::runtime::Runtime, wait: bool) {
        while let Some(front) = self.running.front() {
            if !wait && !front.handle.is_finished() {
                break;
            }
            self.settle_first(session, rt);
        }
    }

    /// Wait for the oldest running segment and take it in.
    fn settle_first(&mut self, session: &mut Engine, rt: &tokio::runtime::Runtime) {
        let Some(seg) = self.running.pop_front() else {
            return;
        };
        let report = match rt.block_on(seg.handle) {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.take(session, seg.ids, report);
    }

    fn take(&mut self, session: &mut Engine, ids: Vec<(String, bool)>, report: RunReport) {
        session.spent = session.spent.max(report.spent);
        session.calls_made = session.calls_made.max(report.calls_made);
        let ext = Arc::make_mut(&mut self.external);
        self.peak = self.peak.max(history::peak_in_flight(&report.results));
        for ((id, named), res) in ids.into_iter().zip(&report.results) {
            if named {
                ext.insert(id, res.is_ok().then(|| res.output.clone()));
            }
            if !res.is_ok() {
                self.failures.push(res.status);
            }
        }
        match &mut self.total {
            Some(t) => run::stats::merge(t, report.stats),
            None => self.total = Some(report.stats),
        }
        if let Some(kept) = &mut self.kept {
            kept.extend(report.results);
        }
        match (self.outcome, report.outcome) {
            (_, Outcome::Completed) => {}
            // A budget refuses calls that do not fit; later (cheaper) ones may still run.
            (Outcome::Completed | Outcome::Paused, Outcome::BudgetExhausted) => {
                self.outcome = Outcome::BudgetExhausted
            }
            (Outcome::Completed, Outcome::Paused) => self.outcome = Outcome::Paused,
            (Outcome::BudgetExhausted, Outcome::Paused) => {}
            (Outcome::Completed | Outcome::BudgetExhausted | Outcome::Paused, ended) => {
                self.outcome = ended
            }
            // The run had ended already: the first reason stands.
            (Outcome::Failed | Outcome::DeadlineExceeded | Outcome::Interrupted, _) => {}
        }
    }

    /// Whether the run has ended (fail_run, a deadline, Ctrl-C).
    fn ended(&self) -> bool {
        !matches!(
            self.outcome,
            Outcome::Completed | Outcome::BudgetExhausted | Outcome::Paused
        )
    }
}

/// A stream's engine: every MCP tool annotated (which the stream calls is not known yet),
/// one lane table for all its chunks, and the run announced. Returns the plan options its
/// chunks are planned with (that table in them).
fn open_stream(
    args: &Args,
    run_opts: &RunOptions,
    rt: &tokio::runtime::Runtime,
) -> Result<(Engine, PlanOptions), Error> {
    let mut opts = run_opts.plan.clone();
    let mut manifest = load_manifest(args)?;
    let mcp_tools: Vec<String> = manifest
        .tools
        .iter()
        .filter(|t| matches!(t.kind, ToolKind::Mcp(_)))
        .map(|t| t.name.clone())
        .collect();
    let mcp = start_mcp(args, &mut manifest, &mcp_tools, rt)?;
    let mut table = plan::lane_table(&manifest, &opts);
    lease::borrow(&mut table, &manifest);
    let lanes = open_lanes(&run_opts.lane_store, &table, &manifest, rt)?;
    let infos = table
        .iter()
        .map(|l| LaneInfo {
            name: l.name.clone(),
            limit: l.limit,
            rate: l.rate.map(|r| r.to_string()),
        })
        .collect();
    opts.lanes = Some(table);
    let run_id = run::new_run_id();
    let approver = Arc::new(TerminalApprover);
    let engine = Engine::open(run_opts, manifest, mcp, lanes, run_id, approver, rt);
    engine.emit(Event::RunStarted {
        run_id: engine.run_id.clone(),
        total: 0,
        lanes: infos,
    });
    Ok((engine, opts))
}

/// A stream of JSON Lines: one session, its chunks run as segments, results written as they
/// resolve in call order.
pub(super) fn run_stream(
    args: &Args,
    run_opts: &RunOptions,
    first: (usize, String),
    rt: tokio::runtime::Runtime,
) -> Result<u8, Error> {
    if let Some(flag) = run_opts.files.whole_batch_option() {
        return Err(Error::Usage(format!(
            "{flag} needs a whole batch; it cannot be used with a --stream of JSON Lines on stdin"
        )));
    }
    let (mut session, mut opts) = open_stream(args, run_opts, &rt)?;
    let mut ledger = Ledger {
        running: VecDeque::new(),
        external: Arc::default(),
        failures: Vec::new(),
        total: None,
        outcome: Outcome::Completed,
        capped: opts.max_calls.is_some() || session.manifest.budget.max_calls.is_some(),
        width: 0,
        peak: 0,
        kept: session.otlp.is_some().then(Vec::new),
    };
    let tenant = opts.tenant.clone().unwrap_or_else(|| "default".into());
    let stop = vec![session.interrupted.clone(), session.drained.clone()];
    let mut seen = 0usize;
    let mut failed = None;
    for chunk in Chunks::new(first, stop) {
        let reading = Reading {
            format: InputFormat::Jsonl,
            literal: run_opts.reading.literal,
            id_offset: seen,
        };
        let batch = match Batch::parse_with(chunk.file, reading) {
            Ok((batch, _)) => batch,
            Err(d) => {
                failed = Some(Error::Invalid(d));
                break;
            }
        };
        let traits = Traits::of(&batch, &session.manifest);
        let wait = ledger.must_wait(traits, &opts);
        ledger.settle(&mut session, &rt, wait);
        while ledger.running.len() >= MAX_RUNNING {
            ledger.settle_first(&mut session, &rt);
        }
        if ledger.ended() {
            break;
        }
        opts.external = Some(ledger.external.clone());
        let plan = match plan::build(&session.manifest, &batch, &opts) {
            Ok(p) => p,
            Err(d) => {
                failed = Some(Error::Invalid(d));
                break;
            }
        };
        if session.keeps_history() {
            ledger.width = ledger.width.max(plan::simulate(&plan).width);
        }
        session.emit(Event::RunExtended {
            total: seen + chunk.calls,
        });
        let ids = batch
            .calls
            .iter()
            .map(|c| (c.id.clone(), c.explicit_id))
            .collect();
        let handle = session.spawn_segment(&rt, plan, seen);
        ledger.running.push_back(Segment {
            handle,
            traits,
            ids,
        });
        seen += chunk.calls;
    }
    ledger.settle(&mut session, &rt, true);
    if session.interrupted.load(Ordering::SeqCst) && !ledger.ended() {
        // Ctrl-C while the stream waited for its next line.
        ledger.outcome = Outcome::Interrupted;
    }
    finish_stream(session, ledger, rt, &tenant, failed)
}

/// The end of a stream: the run's last event, its spans, the engine closed, its history
/// line, the summary and the exit status.
fn finish_stream(
    session: Engine,
    mut ledger: Ledger,
    rt: tokio::runtime::Runtime,
    tenant: &str,
    failed: Option<Error>,
) -> Result<u8, Error> {
    let stats = ledger.total.take().unwrap_or_default();
    session.emit(Event::RunFinished {
        outcome: ledger.outcome,
        stats: Box::new(stats.clone()),
    });
    let ending = Ending {
        tenant,
        outcome: ledger.outcome,
        stats: &stats,
        results: ledger.kept.as_deref(),
        statuses: std::mem::take(&mut ledger.failures),
        shape: RunShape {
            width: ledger.width,
            input_format: InputFormat::Jsonl,
            usage: None,
        },
        peak_in_flight: ledger.peak,
    };
    session.send_spans(&rt, &ending);
    let drained = session.drained.load(Ordering::SeqCst);
    if let Some(e) = failed {
        session.close(rt);
        return Err(e);
    }
    session.append_history(&ending);
    let summary = session.summary(&ending, None);
    session.close(rt);
    let status = summary.print();
    if drained {
        return Ok(crate::error::EXIT_OK);
    }
    Ok(status)
}
