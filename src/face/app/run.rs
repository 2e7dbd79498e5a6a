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
        no_resend: opts.files.no_resend,
        record: opts.files.record.is_some(),
        replay,
    };
    let plan = Arc::new(plan);
    let report = engine.execute(&rt, plan.clone(), durability);
    let end = engine.core.report_end(&tenant, &report, &shape);
    engine.core.end_run(&rt, &end);
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

/// Who names a run, first that applies: `--run-id` (turn `n` of `--turns` is `ID-n`), the
/// batch's `run_id`, the model reply's own id with `--run-id-from-reply` (one that is not a
/// valid id is hashed into `reply-…`). `None`: a fresh id (or a resumed journal's).
pub(super) fn named_run_id(opts: &RunOptions, plan: &Plan, turn: Option<usize>) -> Option<String> {
    if let Some(id) = &opts.run_id {
        return Some(match turn {
            Some(n) => format!("{id}-{n}"),
            None => id.clone(),
        });
    }
    if let Some(id) = &plan.run_id {
        return Some(id.clone());
    }
    let reply = plan.reply_id.as_ref().filter(|_| opts.run_id_from_reply)?;
    Some(match crate::ids::check_id("run id", reply) {
        Ok(()) => reply.clone(),
        Err(_) => format!("reply-{}", crate::hash::fnv_hex(reply.as_bytes())),
    })
}

/// Every `--approve ID@HASH` names a call the journal has waiting, with the hash it shows:
/// an approval for arguments nobody was shown runs nothing.
fn check_grants(opts: &RunOptions, shown: &str, res: &Resume) -> Result<(), Error> {
    for (id, hash) in opts.approvals.calls() {
        let waiting = res.awaiting.iter().find(|a| a.id == id);
        let problem = match waiting {
            Some(a) if a.hash == hash => continue,
            Some(a) => format!(
                "--approve {id}@{hash}: the journal shows call `{id}` waiting with arguments that hash to {}, not {hash}",
                a.hash
            ),
            None => format!("--approve {id}@{hash}: no call `{id}` awaits approval in this journal"),
        };
        return Err(Error::Usage(format!(
            "{problem} (see `flux-tools approvals {shown}`)"
        )));
    }
    Ok(())
}

/// An earlier run's journal fits this one: the same manifest, the same batch (some call in
/// common), the same run id if one is named, approvals that name what it shows.
fn check_resume(
    opts: &RunOptions,
    shown: &str,
    res: &Resume,
    (manifest, plan): (&Manifest, &Plan),
    named: Option<&str>,
) -> Result<(), Error> {
    if res.manifest != manifest.fingerprint() {
        return Err(Error::Usage(format!(
            "journal `{shown}` was written with a different manifest; it cannot be resumed with {}",
            manifest.name()
        )));
    }
    if !res.ids.is_empty() && !plan.calls.iter().any(|c| res.ids.contains(&c.id)) {
        return Err(Error::Usage(format!(
            "journal `{shown}` belongs to a different batch: none of its calls are in this one"
        )));
    }
    if let Some(named) = named.filter(|n| *n != res.run_id) {
        return Err(Error::Usage(format!(
            "journal `{shown}` is run {}'s, not {named}'s\nhint: resume it without naming the run, or name run {}",
            res.run_id, res.run_id
        )));
    }
    check_grants(opts, shown, res)
}

type JournalSetup = (
    String,
    Option<Journal>,
    Option<Arc<Resume>>,
    Option<std::thread::JoinHandle<()>>,
);

/// `--journal` / `--resume`: the run id (the named one, else the journal's when resuming),
/// the journal writer and what the earlier run recorded. A journal of another manifest or
/// batch is refused.
fn open_journal(
    opts: &RunOptions,
    manifest: &Manifest,
    plan: &Plan,
) -> Result<JournalSetup, Error> {
    let named = named_run_id(opts, plan, None);
    let files = [&opts.files.journal, &opts.files.resume];
    let urls: Vec<&str> = files
        .iter()
        .filter_map(|f| f.as_deref()?.to_str())
        .filter(|f| f.starts_with("redis://") || f.starts_with("rediss://"))
        .collect();
    if !urls.is_empty() {
        return open_shared_journal(opts, (manifest, plan), &urls, named);
    }
    let resume = match &opts.files.resume {
        Some(path) => {
            let res = Resume::load(path).map_err(Error::Usage)?;
            let shown = path.display().to_string();
            check_resume(opts, &shown, &res, (manifest, plan), named.as_deref())?;
            Some(Arc::new(res))
        }
        None => None,
    };
    let run_id = match (&resume, named) {
        (Some(r), _) => r.run_id.clone(),
        (None, Some(named)) => named,
        (None, None) => run::new_run_id(),
    };
    let path = opts.files.journal.as_ref().or(opts.files.resume.as_ref());
    let (journal, thread) = match path {
        Some(p) => {
            let (j, t) = Journal::open(p).map_err(Error::Usage)?;
            j.record(start_record(&run_id, manifest, resume.is_some()));
            (Some(j), Some(t))
        }
        None => (None, None),
    };
    Ok((run_id, journal, resume, thread))
}

/// A journal's first record of this run: `run` (its id and manifest), or `resume`.
fn start_record(run_id: &str, manifest: &Manifest, resumed: bool) -> serde_json::Value {
    if resumed {
        serde_json::json!({"type": "resume", "run_id": run_id})
    } else {
        serde_json::json!({"type": "run", "run_id": run_id, "manifest": manifest.fingerprint()})
    }
}

/// The journal in Redis: the run (named, or new) is owned by this process once any other
/// that runs it is done; what earlier attempts recorded is resumed.
fn open_shared_journal(
    opts: &RunOptions,
    (manifest, plan): (&Manifest, &Plan),
    urls: &[&str],
    named: Option<String>,
) -> Result<JournalSetup, Error> {
    let url = urls[0];
    let shown = run::redact_url(url);
    let journal_file = opts.files.journal.as_ref().and_then(|j| j.to_str());
    if urls.len()
        != usize::from(opts.files.journal.is_some()) + usize::from(opts.files.resume.is_some())
        || urls.iter().any(|u| *u != url)
        || journal_file.is_some_and(|j| j != url)
    {
        return Err(Error::Usage(
            "--journal and --resume name different journals: a run in Redis is resumed from and journaled to the same URL".into(),
        ));
    }
    let run_id = match (named, opts.files.resume.is_some()) {
        (Some(id), _) => id,
        (None, false) => run::new_run_id(),
        (None, true) => {
            return Err(Error::Usage(format!(
                "--resume {shown}: a journal in Redis holds many runs; name the one to resume with --run-id"
            )))
        }
    };
    let tenant = plan.settings.tenant.as_str();
    let quiet = opts.quiet;
    let on_wait = |msg: &str| {
        if !quiet {
            eprintln!("note: {msg}");
        }
    };
    let shared = run::open_shared(url, &shown, tenant, &run_id, &on_wait).map_err(Error::Usage)?;
    if !quiet {
        for w in &shared.warnings {
            eprintln!("warning: {w}");
        }
    }
    let shown_run = format!("{shown} (run {run_id})");
    let resume = match shared.resume {
        Some(res) => {
            check_resume(opts, &shown_run, &res, (manifest, plan), None)?;
            Some(Arc::new(res))
        }
        None if opts.files.resume.is_some() => {
            return Err(Error::Usage(format!(
                "--resume {shown}: no journal of run {run_id} is there (tenant {tenant})"
            )))
        }
        None => None,
    };
    shared
        .journal
        .record(start_record(&run_id, manifest, resume.is_some()));
    Ok((run_id, Some(shared.journal), resume, Some(shared.thread)))
}
