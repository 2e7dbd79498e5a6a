//! `flux-tools run` over a whole batch: the face that plans one batch, runs it on an
//! [`Engine`] (with the journal, a cassette and the terminal's approver), and writes every
//! output. `--stream` ([`super::stream`]) and `--turns` ([`super::turns`]) are the other faces
//! of the same engine; this module also picks between them.

use std::sync::Arc;

use super::engine::{Durability, Engine, RunShape};
use super::options::{RunOptions, Terminal};
use super::prepare::{read_inputs, Parts};
use super::print_warnings;
use super::stream::first_jsonl_line;
use super::terminal::TerminalApprover;
use crate::cli::{Args, RunArgs};
use crate::error::Error;
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::Plan;
use crate::run::{self, Cassette, Journal, Resume};

pub(super) fn run(args: &Args, r: &RunArgs, terminal: Terminal) -> Result<u8, Error> {
    let opts = RunOptions::resolve(args, r, terminal)?;
    if opts.turns {
        return super::turns::run_turns(&opts, super::runtime()?);
    }
    let stdin = matches!(opts.batch.as_deref(), None | Some("-"));
    let jsonl = matches!(opts.reading.format, InputFormat::Auto | InputFormat::Jsonl);
    if opts.stream && stdin && jsonl {
        if let Some(first) = first_jsonl_line()? {
            return super::stream::run_stream(&opts, first, super::runtime()?);
        }
    }
    run_whole(&opts)
}

/// A whole batch: one plan, one execute, every output.
///
/// A run that holds one call at a time gets a runtime of one worker: the thread that sees a
/// call end starts the next, with no hand-off to a second worker, and the next program is
/// not moved to the other core (see `benches/README.md`, tenth stop).
fn run_whole(opts: &RunOptions) -> Result<u8, Error> {
    let batch = (opts.batch.as_deref(), opts.terminal.stdin);
    let inputs = read_inputs(&opts.manifest, batch, opts.reading)?;
    let workers = inputs.one_at_a_time(&opts.plan).then_some(1);
    let rt = super::runtime_with(workers)?;
    let (manifest, mut plan, mcp) = inputs.plan(opts.quiet, &opts.plan, &rt)?;
    print_warnings(opts.quiet, &plan.warnings);
    let mut parts = Parts::build(opts, (manifest, mcp), plan.lanes.to_vec(), &rt)?;
    // The plan runs in the lanes the parts were built for (a parent's lent lanes borrowed).
    plan.lanes = Arc::new(parts.table.clone());
    let (mut run_id, journal, resume, journal_thread) = open_journal(opts, &parts.manifest, &plan)?;
    let replay = match &opts.files.replay {
        Some(path) => {
            let c = Cassette::load(path).map_err(Error::Usage)?;
            // Replay reports the recorded run: its id, idempotency keys and timings.
            run_id = c.run_id.clone();
            Some(Arc::new(c))
        }
        None => None,
    };
    let tenant = plan.settings.tenant.clone();
    let approver = Arc::new(TerminalApprover);
    parts.run_id = run_id;
    let mut engine = Engine::open(opts, parts, approver);
    engine.interrupt_on_signals(&rt);
    let shape = RunShape::of(&plan, &engine);
    let durability = Durability {
        journal: journal.clone(),
        resume,
        retry_indeterminate: opts.files.retry_indeterminate,
        record: opts.files.record.is_some(),
        replay,
    };
    let plan = Arc::new(plan);
    let report = engine.execute(&rt, plan.clone(), durability);
    let end = engine.report_end(&tenant, &report, &shape);
    engine.end_run(&rt, &end);
    let drained = engine.drained.load(std::sync::atomic::Ordering::SeqCst);
    let statuses: Vec<_> = report.results.iter().map(|r| r.status).collect();
    let summary = engine.summary(&end, &statuses, None);
    engine.close(rt);
    if let Some(j) = journal {
        j.record(serde_json::json!({"type": "end", "outcome": report.outcome}));
        drop(j);
        if let Some(t) = journal_thread {
            let _ = t.join();
        }
    }
    // Calls ran: a file that cannot be written is reported, but the results still go to
    // stdout and the exit status stays the run's (at least 1), never 2 ("nothing was run").
    let written = super::reporters::write_outputs(opts, &report);
    let status = summary.print();
    // The process ends right after this: the plan and the results are left to the exit rather
    // than freed one by one (100,000 calls: 60 of 620 ms on the coordinator and this thread,
    // after every result was already out).
    std::mem::forget((plan, report));
    // Nobody reads the results any more (`| head`): like a closed pipe, not a failure.
    if drained {
        return Ok(crate::error::EXIT_OK);
    }
    match written {
        Ok(()) => Ok(status),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(status.max(crate::error::EXIT_CALLS_FAILED))
        }
    }
}

/// Every `--approve ID@HASH` names a call the journal has waiting, with the hash it shows:
/// an approval for arguments nobody was shown runs nothing.
fn check_grants(opts: &RunOptions, path: &std::path::Path, res: &Resume) -> Result<(), Error> {
    for (id, hash) in opts.approvals.calls() {
        let shown = res.awaiting.iter().find(|a| a.id == id);
        let problem = match shown {
            Some(a) if a.hash == hash => continue,
            Some(a) => format!(
                "--approve {id}@{hash}: the journal shows call `{id}` waiting with arguments that hash to {}, not {hash}",
                a.hash
            ),
            None => format!("--approve {id}@{hash}: no call `{id}` awaits approval in this journal"),
        };
        return Err(Error::Usage(format!(
            "{problem} (see `flux-tools approvals {}`)",
            path.display()
        )));
    }
    Ok(())
}

type JournalSetup = (
    String,
    Option<Journal>,
    Option<Arc<Resume>>,
    Option<std::thread::JoinHandle<()>>,
);

/// `--journal` / `--resume`: the run id (the journal's when resuming), the journal writer and
/// what the earlier run recorded. A journal of another manifest or batch is refused.
fn open_journal(
    opts: &RunOptions,
    manifest: &Manifest,
    plan: &Plan,
) -> Result<JournalSetup, Error> {
    let manifest_fp = manifest.fingerprint();
    let resume = match &opts.files.resume {
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
            check_grants(opts, path, &res)?;
            Some(Arc::new(res))
        }
        None => None,
    };
    let run_id = resume
        .as_ref()
        .map_or_else(run::new_run_id, |r| r.run_id.clone());
    let path = opts.files.journal.as_ref().or(opts.files.resume.as_ref());
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
