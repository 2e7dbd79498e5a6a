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
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::engine::{Engine, RunShape};
use super::options::RunOptions;
use super::prepare::{start_mcp, Parts};
use super::terminal::TerminalApprover;
use crate::batch::{Batch, Reading};
use crate::error::Error;
use crate::events::{Event, LaneInfo, Outcome};
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{self, PlanOptions};

mod chunks;
mod ledger;

pub(super) use chunks::first_jsonl_line;
use chunks::Chunks;
use ledger::{Ledger, Segment, Traits};

/// Most calls in one chunk.
pub(super) const CHUNK: usize = 2048;
/// Most segments running at once: memory stays bounded by this many chunks however fast the
/// stream arrives (results go out in call order, so a later segment cannot get far ahead).
const MAX_RUNNING: usize = 8;
/// How long to wait for more lines before running what has arrived.
const GATHER: Duration = Duration::from_millis(5);

/// A stream's engine: every MCP tool annotated (which the stream calls is not known yet),
/// one lane table for all its chunks, and the run announced. Returns the plan options its
/// chunks are planned with (that table in them), and the tools `tools.lock` holds back.
fn open_stream(
    run_opts: &RunOptions,
    rt: &tokio::runtime::Runtime,
) -> Result<(Engine, PlanOptions, HashSet<String>), Error> {
    let mut opts = run_opts.plan.clone();
    let mut manifest =
        Manifest::load(&run_opts.manifest, crate::tools::KINDS).map_err(Error::Invalid)?;
    let mcp = start_mcp(run_opts.quiet, &mut manifest, None, rt)?;
    let held = super::prepare::held_back(&run_opts.manifest, &manifest, mcp.clone(), rt)?;
    let parts = Parts::of_manifest(run_opts, manifest, mcp, rt)?;
    let infos = parts.table.iter().map(LaneInfo::from).collect();
    opts.lanes = Some(crate::plan::LaneSeed::new(parts.table.clone()));
    let approver = Arc::new(TerminalApprover);
    let engine = Engine::open(run_opts, parts, approver);
    engine.interrupt_on_signals(rt);
    engine.emit(Event::RunStarted {
        run_id: engine.core.run_id.clone(),
        total: 0,
        lanes: infos,
    });
    Ok((engine, opts, held))
}

/// A stream of JSON Lines: one session, its chunks run as segments, results written as they
/// resolve in call order.
pub(super) fn run_stream(
    run_opts: &RunOptions,
    first: (usize, String),
    rt: tokio::runtime::Runtime,
) -> Result<u8, Error> {
    if let Some(flag) = run_opts.files.whole_batch_option() {
        return Err(Error::Usage(format!(
            "{flag} needs a whole batch; it cannot be used with a --stream of JSON Lines on stdin"
        )));
    }
    let (mut session, mut opts, held) = open_stream(run_opts, &rt)?;
    let mut ledger = Ledger {
        running: VecDeque::new(),
        external: Arc::default(),
        failures: Vec::new(),
        total: None,
        outcome: Outcome::Completed,
        capped: opts.max_calls.is_some() || session.core.manifest.budget.max_calls.is_some(),
        width: 0,
        peak: 0,
        kept: session.core.finish().exports().then(Vec::new),
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
        let traits = Traits::of(&batch, &session.core.manifest);
        let wait = ledger.must_wait(traits, &opts);
        ledger.settle(&mut session, &rt, wait);
        while ledger.running.len() >= MAX_RUNNING {
            ledger.settle_first(&mut session, &rt);
        }
        if ledger.ended() {
            break;
        }
        opts.external = Some(ledger.external.clone());
        let plan = match plan::build(&session.core.manifest, &batch, &opts) {
            Ok(mut p) => {
                super::prepare::hold_back(&mut p, &held);
                p
            }
            Err(d) => {
                failed = Some(Error::Invalid(d));
                break;
            }
        };
        if session.core.keeps_history() {
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
    let shape = RunShape {
        width: ledger.width,
        input_format: InputFormat::Jsonl,
        usage: None,
    };
    let mut end = session.core.run_end(tenant, ledger.outcome, &stats, &shape);
    end.results = ledger.kept.as_deref();
    end.peak_in_flight = ledger.peak;
    let finish = session.core.finish();
    rt.block_on(finish.spans(&end));
    let drained = session.drained.load(Ordering::SeqCst);
    if let Some(e) = failed {
        session.close(rt);
        return Err(e);
    }
    // A stream that failed part-way (a segment that would not plan) leaves no history line.
    finish.record(&end);
    let summary = session.summary(&end, &ledger.failures, None);
    session.close(rt);
    let status = summary.print();
    if drained {
        return Ok(crate::error::EXIT_OK);
    }
    Ok(status)
}
