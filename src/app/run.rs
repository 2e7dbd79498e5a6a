//! `flux-tools run`: the one run pipeline, for a whole batch and for a stream of JSON Lines.
//!
//! Both go through the same steps: the options ([`options`]), the manifest with its MCP
//! sessions started and annotations applied, the lane store ([`open_lanes`]), a
//! [`Session`](super::session::Session) (run id, approvals, the terminal approver, signals,
//! the reporters on their own thread), one `execute` per batch (a whole batch is one; a
//! stream's segments are many — [`super::stream`] — sharing the session's lanes, budget, clock
//! and deadline), then the outputs, the summary and the exit code ([`super::exit_code`]).
//! Only what needs the whole batch (journal, resume, cassettes, trace, `--output`) is refused
//! for a stream.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use super::plan::load_plan;
use super::session::{Durability, Session};
use super::stream::first_jsonl_line;
use super::{exit_code, print_warnings, runtime};
use crate::batch::Reading;
use crate::cli::{Args, LaneStoreChoice, ResultsFormat, RunArgs};
use crate::config;
use crate::error::Error;
use crate::events::{Outcome, Stats, Status};
use crate::history;
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{LaneSpec, Plan, PlanOptions};
use crate::report;
use crate::report::emit;
use crate::report::output::{self, RunDocument};
use crate::run::{self, lease, RunReport};
use crate::run::{Cassette, Journal, LaneStore, LocalLanes, MemoryLanes, RedisLanes, Resume};

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
    if r.turns {
        return super::turns::run_turns(args, r, opts, rt);
    }
    let stdin = matches!(r.batch.as_deref(), None | Some("-"));
    if r.stream && stdin && matches!(r.input_format, InputFormat::Auto | InputFormat::Jsonl) {
        if let Some(first) = first_jsonl_line()? {
            return super::stream::run_stream(args, r, opts, first, rt);
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
        max_calls: r.max_calls,
        external: None,
        max_processes: Some(config::process_cap(r.max_processes)),
        lanes: None,
    })
}

/// The lane store `--lane-store` names, for `lanes`.
pub(super) fn open_lanes(
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
    let history = history_path(r, &manifest).map(|path| HistoryNote {
        path,
        width: crate::plan::simulate(&plan).width,
        input_format: plan.input_format,
        usage: plan.usage.clone(),
        tenant: plan.settings.tenant.clone(),
    });
    let tenant = plan.settings.tenant.clone();
    let mut session = Session::open(r, manifest, mcp, lanes, run_id, streaming, &rt);
    let durability = Durability {
        journal: journal.clone(),
        resume,
        retry_indeterminate: r.retry_indeterminate,
        record: r.record.is_some(),
        replay,
    };
    let report = session.execute(&rt, plan, durability);
    session.export_spans(
        &rt,
        args.quiet,
        &tenant,
        report.outcome.as_str(),
        std::time::Duration::from_millis(report.stats.wall_ms),
        &report.results,
    );
    let drained = session.drained.load(std::sync::atomic::Ordering::SeqCst);
    let manifest = session.manifest.clone();
    session.close(rt);
    if let Some(h) = history {
        h.append(args, &manifest, &report);
    }
    if let Some(j) = journal {
        j.record(serde_json::json!({"type": "end", "outcome": report.outcome}));
        drop(j);
        if let Some(t) = journal_thread {
            let _ = t.join();
        }
    }
    // Calls ran: a file that cannot be written is reported, but the results still go to
    // stdout and the exit status stays the run's (at least 1), never 2 ("nothing was run").
    let written = write_outputs(args, r, format, streaming, &report);
    let statuses: Vec<Status> = report.results.iter().map(|r| r.status).collect();
    summary(args, report.outcome, &report.stats, &statuses);
    // Nobody reads the results any more (`| head`): like a closed pipe, not a failure.
    if drained {
        return Ok(crate::error::EXIT_OK);
    }
    let code = exit_code(report.outcome, report.stats.failed);
    match written {
        Ok(()) => Ok(code),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(code.max(crate::error::EXIT_CALLS_FAILED))
        }
    }
}

/// Where this run's history line goes: `--history` (or `$FLUX_TOOLS_HISTORY`), else the
/// manifest's `[history] path`.
pub(super) fn history_path(r: &RunArgs, manifest: &Manifest) -> Option<std::path::PathBuf> {
    r.history.clone().or_else(|| manifest.history.clone())
}

/// What the history needs of a run besides its report.
pub(super) struct HistoryNote {
    pub path: std::path::PathBuf,
    pub width: usize,
    pub input_format: InputFormat,
    pub usage: Option<crate::model_formats::Usage>,
    pub tenant: String,
}

impl HistoryNote {
    /// Append the run's line. The run is over: a history that cannot be written is a warning.
    pub(super) fn append(&self, args: &Args, manifest: &Manifest, report: &RunReport) {
        let facts = history::RunFacts {
            run_id: &report.run_id,
            tenant: &self.tenant,
            input_format: self.input_format.name(),
            outcome: report.outcome.as_str(),
            width: self.width,
            peak_in_flight: history::peak_in_flight(&report.results),
            stats: &report.stats,
            usage: self.usage.as_ref(),
        };
        append_history(args, &self.path, &history::Record::of(&facts, manifest));
    }
}

/// Append a run's line. The run is over: a history that cannot be written is a warning.
pub(super) fn append_history(args: &Args, path: &std::path::Path, record: &history::Record) {
    if let Err(e) = history::append(path, record) {
        if !args.quiet {
            eprintln!(
                "warning: cannot append to the history `{}`: {e}",
                path.display()
            );
        }
    }
}

/// Results on stdout (unless streamed), then the files `--trace`, `--record` and `--output` ask
/// for. Every one is attempted; the first failure is returned.
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
    let mut first: Option<Error> = None;
    let mut note = |res: Result<(), Error>| {
        if let Err(e) = res {
            first.get_or_insert(e);
        }
    };
    if !streamed {
        note(write_stdout(args, r, format, report, &doc));
    }
    if let Some(path) = &r.trace {
        let trace = report::timeline::chrome_trace(&report.run_id, &report.results);
        note(config::write_atomic_with(path, |w| {
            write_json_line(w, &trace)
        }));
    }
    if let Some(path) = &r.record {
        let doc = run::cassette::document(
            &report.run_id,
            &report.results,
            &report.fingerprints,
            &report.recorded_args,
        );
        note(config::write_atomic_with(path, |w| {
            serde_json::to_writer_pretty(&mut *w, &doc)?;
            w.write_all(b"\n")
        }));
    }
    if let Some(path) = &r.output {
        note(config::write_atomic_with(path, |w| {
            output::write_json(w, &doc)
        }));
    }
    first.map_or(Ok(()), Err)
}

/// The results on stdout in the format asked for (a closed stdout is not an error).
fn write_stdout(
    args: &Args,
    r: &RunArgs,
    format: ResultsFormat,
    report: &RunReport,
    doc: &RunDocument<'_>,
) -> Result<(), Error> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let res = match (r.emit, format) {
        (Some(e), _) => emit::write(&mut out, e, &report.results),
        (None, ResultsFormat::Json) => output::write_json(&mut out, doc),
        _ => output::write_table(&mut out, doc, config::use_color(args.color)),
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Error::io("cannot write to stdout", e)),
    }
}

/// The one-line summary and the lane lines on stderr.
pub(super) fn summary(args: &Args, outcome: Outcome, stats: &Stats, statuses: &[Status]) {
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

/// Every `--approve ID@HASH` names a call the journal has waiting, with the hash it shows:
/// an approval for arguments nobody was shown runs nothing.
fn check_grants(r: &RunArgs, path: &std::path::Path, res: &Resume) -> Result<(), Error> {
    let Some(approvals) = &r.approve else {
        return Ok(());
    };
    for (id, hash) in approvals.calls() {
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
fn open_journal(r: &RunArgs, manifest: &Manifest, plan: &Plan) -> Result<JournalSetup, Error> {
    let manifest_fp = manifest.fingerprint();
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
            check_grants(r, path, &res)?;
            Some(Arc::new(res))
        }
        None => None,
    };
    let run_id = resume
        .as_ref()
        .map_or_else(run::new_run_id, |r| r.run_id.clone());
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
