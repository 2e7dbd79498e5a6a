//! The commands: each turns a [`Config`](crate::config)-resolved command line into work and an
//! exit code. This is the edge where typed errors become messages on stderr.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser};
use tokio::sync::mpsc;

use crate::batch::Batch;
use crate::cli::{Args, Command, Emit, Format, McpCommand, PlanArgs, ProgressChoice, RunArgs};
use crate::config;
use crate::error::{self, render_all, Diagnostic, Error};
use crate::events::{Event, Outcome};
use crate::manifest::Manifest;
use crate::model_formats::InputFormat;
use crate::plan::{self, Plan, PlanOptions};
use crate::report::output::{self, RunDocument, StreamWriter};
use crate::report::progress::Progress;
use crate::report::{self, Reporter};
use crate::run::cassette::Cassette;
use crate::run::gate::Approvals;
use crate::run::journal::{self, Journal, Resume};
use crate::run::lanes::{LaneStore, LocalLanes, MemoryLanes, RedisLanes};
use crate::run::{self, lease, RunConfig};
use crate::tools::mcp::{self, McpHub};
use crate::tools::ToolKind;

/// Entry point used by `main`.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let quiet = args.quiet;
    match dispatch(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            let _ = quiet;
            if matches!(e, Error::Invalid(_)) {
                eprint!("{text}");
            } else {
                eprintln!("error: {text}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

fn dispatch(args: Args) -> Result<u8, Error> {
    match &args.command {
        Command::Completions { shell } => {
            let mut cmd = Args::command();
            clap_complete::generate(*shell, &mut cmd, "flux-tools", &mut std::io::stdout());
            Ok(error::EXIT_OK)
        }
        Command::Tools => tools(&args),
        Command::Report { results, svg } => report_cmd(results, svg),
        Command::Mcp {
            command: McpCommand::Import { server },
        } => mcp_import(&args, server),
        Command::Validate { batches } => validate(&args, batches),
        Command::Plan(p) => plan_cmd(&args, p),
        Command::Run(r) => run_cmd(&args, r),
    }
}

fn stdout_write(bytes: &[u8]) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("cannot write to stdout", e))
}

fn load_manifest(args: &Args) -> Result<Manifest, Error> {
    let path = config::manifest_path(args.manifest.as_deref())?;
    Manifest::load(&path).map_err(Error::Invalid)
}

fn print_warnings(args: &Args, warnings: &[Diagnostic]) {
    if !args.quiet && !warnings.is_empty() {
        eprint!("{}", render_all(warnings));
    }
}

fn tools(args: &Args) -> Result<u8, Error> {
    let m = load_manifest(args)?;
    let text = match args.format {
        Some(Format::Json | Format::Jsonl) => format!("{}\n", report::tools::to_json(&m)),
        Some(Format::Dot | Format::Mermaid) => {
            return Err(Error::Usage("`tools` prints a table or json".into()))
        }
        _ => report::tools::to_table(&m),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

fn report_cmd(results: &std::path::Path, svg: &std::path::Path) -> Result<u8, Error> {
    config::check_output_path(svg)?;
    let text = std::fs::read_to_string(results)
        .map_err(|e| Error::io(format!("cannot read `{}`", results.display()), e))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "`{}` is not a results document (run with --format json or --output): {e}",
            results.display()
        ))
    })?;
    let list = doc["results"]
        .as_array()
        .ok_or_else(|| Error::Usage(format!("`{}` has no `results`", results.display())))?;
    let mut parsed = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        parsed.push(journal::result_from_json(r.clone()).ok_or_else(|| {
            Error::Usage(format!(
                "`{}`: result #{i} is not a flux-tools result",
                results.display()
            ))
        })?);
    }
    let picture = report::timeline::svg(
        doc["run_id"].as_str().unwrap_or(""),
        doc["outcome"].as_str().unwrap_or(""),
        &parsed,
    );
    config::write_atomic(svg, picture.as_bytes())?;
    Ok(error::EXIT_OK)
}

fn mcp_import(args: &Args, server: &str) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    if !manifest.mcp_servers.contains_key(server) {
        let hint = error::suggest(server, manifest.mcp_servers.keys().map(String::as_str))
            .unwrap_or_else(|| {
                "declare it: [mcp_servers.NAME] command = [...] or url = \"...\"".into()
            });
        return Err(Error::Usage(format!(
            "{} has no [mcp_servers.{server}]\nhint: {hint}",
            manifest.name()
        )));
    }
    let rt = runtime()?;
    let hub = McpHub::new(&manifest.mcp_servers);
    let tools = rt.block_on(hub.tools(server));
    rt.block_on(hub.shutdown());
    let tools = tools.map_err(Error::Usage)?;
    stdout_write(mcp::import_toml(server, &tools).as_bytes())?;
    Ok(error::EXIT_OK)
}

fn validate(args: &Args, batches: &[std::path::PathBuf]) -> Result<u8, Error> {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    let path = config::manifest_path(args.manifest.as_deref())?;
    let manifest = match Manifest::load(&path) {
        Ok(m) => {
            diags.extend(m.warnings.iter().cloned());
            summary.push(format!("{}: {} tools", m.name(), m.tools.len()));
            Some(m)
        }
        Err(d) => {
            diags.extend(d);
            None
        }
    };
    for b in batches {
        let file = match config::read_batch(Some(&b.to_string_lossy())) {
            Ok(f) => f,
            Err(e) => {
                diags.push(Diagnostic::error(e.to_string()).in_file(&b.to_string_lossy()));
                continue;
            }
        };
        match Batch::parse(file) {
            Ok((batch, warnings)) => {
                diags.extend(warnings);
                if let Some(m) = &manifest {
                    match plan::build(m, &batch, &PlanOptions::default()) {
                        Ok(p) => {
                            diags.extend(p.warnings.iter().filter(|w| !w.is_error()).cloned());
                            summary.push(format!(
                                "{}: {} calls in {} phases",
                                batch.file.name,
                                p.calls.len(),
                                p.phases.len()
                            ));
                        }
                        Err(d) => diags.extend(d),
                    }
                }
            }
            Err(d) => diags.extend(d),
        }
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    diags.sort_by_key(|d| d.severity);
    if matches!(args.format, Some(Format::Json | Format::Jsonl)) {
        let doc = serde_json::json!({
            "valid": errors == 0,
            "errors": errors,
            "diagnostics": diags.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        });
        stdout_write(format!("{doc}\n").as_bytes())?;
    } else {
        let shown: Vec<Diagnostic> = diags
            .iter()
            .filter(|d| d.is_error() || !args.quiet)
            .cloned()
            .collect();
        eprint!("{}", render_all(&shown));
        if errors == 0 && !args.quiet {
            eprintln!("ok: {}", summary.join("; "));
        } else if errors > 0 {
            eprintln!("{errors} error{} found", if errors == 1 { "" } else { "s" });
        }
    }
    Ok(if errors > 0 {
        error::EXIT_INVALID
    } else {
        error::EXIT_OK
    })
}

/// How long the event consumer lets events gather after each round (see `run_cmd`).
const REPORTER_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}

/// Load the manifest and batch and plan them. When the manifest has MCP tools, their servers
/// are started first so that tool annotations can default `effect` and `idempotent`; the
/// sessions are returned for the run to reuse.
fn build_plan(
    args: &Args,
    batch_arg: Option<&str>,
    opts: &PlanOptions,
    input: InputFormat,
    rt: &tokio::runtime::Runtime,
) -> Result<(Manifest, Plan, Option<Arc<McpHub>>), Error> {
    let mut manifest = load_manifest(args)?;
    let file = config::read_batch(batch_arg)?;
    let (batch, warnings) = Batch::parse_as(file, input).map_err(Error::Invalid)?;
    let hub = manifest
        .tools
        .iter()
        .any(|t| matches!(t.kind, ToolKind::Mcp(_)))
        .then(|| McpHub::new(&manifest.mcp_servers));
    if let Some(hub) = &hub {
        let used: Vec<String> = batch.calls.iter().map(|c| c.tool.clone()).collect();
        let diags = rt.block_on(mcp::annotate(&mut manifest, hub, &used));
        if diags.iter().any(Diagnostic::is_error) {
            rt.block_on(hub.shutdown());
            return Err(Error::Invalid(diags));
        }
        print_warnings(args, &diags);
    }
    let plan = match plan::build(&manifest, &batch, opts) {
        Ok(p) => p,
        Err(d) => {
            if let Some(hub) = &hub {
                rt.block_on(hub.shutdown());
            }
            return Err(Error::Invalid(d));
        }
    };
    print_warnings(args, &warnings);
    Ok((manifest, plan, hub))
}

fn plan_cmd(args: &Args, p: &PlanArgs) -> Result<u8, Error> {
    let opts = PlanOptions {
        tenant: p.tenant.clone(),
        max_concurrent_tools: p.max_concurrent_tools,
        ..Default::default()
    };
    let rt = runtime()?;
    let (manifest, plan, hub) = build_plan(args, p.batch.as_deref(), &opts, p.input_format, &rt)?;
    if let Some(hub) = hub {
        rt.block_on(hub.shutdown());
    }
    print_warnings(args, &plan.warnings);
    let est = plan::simulate(&plan);
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Json
    });
    let text = match format {
        Format::Table => report::plan::to_table(&plan, &est),
        Format::Json | Format::Jsonl => {
            let mut out = std::io::stdout().lock();
            report::plan::write_json(&mut out, &plan, &est, &manifest, format == Format::Json)
                .map_err(|e| Error::io("cannot write to stdout", e))?;
            return Ok(error::EXIT_OK);
        }
        Format::Dot => report::plan::to_dot(&plan, &est),
        Format::Mermaid => report::plan::to_mermaid(&plan),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

fn run_cmd(args: &Args, r: &RunArgs) -> Result<u8, Error> {
    let format = config::results_format(args.format)?;
    if let Some(out) = &r.output {
        config::check_output_path(out)?;
    }
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
    let opts = PlanOptions {
        tenant: r.tenant.clone(),
        max_concurrent_tools: r.max_concurrent_tools,
        on_tool_error: r.on_tool_error,
        deadline,
        max_cost: r.max_cost,
        external: None,
        max_processes: Some(config::process_cap(r.max_processes)),
    };
    if r.stream
        && matches!(r.batch.as_deref(), None | Some("-"))
        && matches!(r.input_format, InputFormat::Auto | InputFormat::Jsonl)
    {
        if let Some(first) = crate::stream::first_jsonl_line()? {
            return crate::stream::run_stream(args, r, opts, first);
        }
    }
    let runtime = runtime()?;
    let (manifest, plan, mcp) =
        build_plan(args, r.batch.as_deref(), &opts, r.input_format, &runtime)?;
    print_warnings(args, &plan.warnings);
    let mut plan = plan;
    lease::borrow(&mut plan, &manifest);
    let lanes: Arc<dyn LaneStore> = match r.lane_store.as_str() {
        "memory" => Arc::new(MemoryLanes::new(&plan.lanes)),
        "local" => Arc::new(
            LocalLanes::new(&plan.lanes, &manifest.path)
                .map_err(|e| Error::Usage(e.to_string()))?,
        ),
        url if url.starts_with("redis://") || url.starts_with("rediss://") => Arc::new(
            runtime
                .block_on(RedisLanes::connect(
                    url,
                    &plan.lanes,
                    &manifest.path.display().to_string(),
                ))
                .map_err(|e| Error::Usage(e.to_string()))?,
        ),
        other => {
            return Err(Error::Usage(format!(
                "--lane-store `{other}`: use local, memory or redis://HOST:PORT[/DB]"
            )))
        }
    };
    let (mut run_id, journal, resume, journal_thread) = open_journal(r, &manifest, &plan)?;
    if let Some(path) = &r.record {
        config::check_output_path(path)?;
    }
    for path in [&r.trace].into_iter().flatten() {
        config::check_output_path(path)?;
    }
    let replay = match &r.replay {
        Some(path) => {
            let c = Cassette::load(path).map_err(Error::Usage)?;
            // Replay reports the recorded run: its id, idempotency keys and timings.
            run_id = c.run_id.clone();
            Some(Arc::new(c))
        }
        None => None,
    };
    let manifest = Arc::new(manifest);
    let plan = Arc::new(plan);

    let show_progress = match r.progress {
        ProgressChoice::Always => true,
        ProgressChoice::Never => false,
        ProgressChoice::Auto => std::io::stderr().is_terminal() && std::env::var_os("CI").is_none(),
    };
    let streaming = r.stream || (format == Format::Jsonl && r.emit.is_none());

    let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
    if show_progress {
        reporters.push(Box::new(Progress::new(
            r.progress == ProgressChoice::Always,
        )));
    }
    if streaming {
        let render: Option<output::RenderFn> = match r.emit {
            Some(Emit::Openai) => Some(Box::new(output::openai_message)),
            Some(Emit::Anthropic) => Some(Box::new(output::anthropic_block)),
            None => None,
        };
        reporters.push(Box::new(StreamWriter::new(
            std::io::BufWriter::with_capacity(1 << 16, std::io::stdout()),
            render,
        )));
    }
    let listening = !reporters.is_empty();
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let consumer = std::thread::spawn(move || {
        while let Some(ev) = rx.blocking_recv() {
            for rep in reporters.iter_mut() {
                rep.handle(&ev);
            }
            // Handle whatever else is already waiting, then flush once: streamed lines go out
            // as soon as the run pauses, without a write per line when it does not.
            while let Ok(ev) = rx.try_recv() {
                for rep in reporters.iter_mut() {
                    rep.handle(&ev);
                }
            }
            for rep in reporters.iter_mut() {
                rep.flush();
            }
            // Let events gather for a moment: one wake-up per millisecond at most, rather than
            // a futex and a context switch per call when calls finish thousands a second.
            std::thread::sleep(REPORTER_PAUSE);
        }
    });

    let report = runtime.block_on(async {
        let (sig_tx, sig_rx) = mpsc::unbounded_channel();
        spawn_signal_forwarder(sig_tx);
        let config = RunConfig {
            run_id: run_id.clone(),
            lanes: lanes.clone(),
            events: listening.then_some(tx),
            lane_events: show_progress,
            mcp: mcp.clone(),
            approvals: r
                .approve
                .as_deref()
                .map(Approvals::parse)
                .unwrap_or_default(),
            journal: journal.clone(),
            resume: resume.clone(),
            retry_indeterminate: r.retry_indeterminate,
            record: r.record.is_some(),
            replay: replay.clone(),
        };
        let report = run::execute_spawned(manifest.clone(), plan.clone(), config, sig_rx).await;
        if let Some(hub) = &mcp {
            hub.shutdown().await;
        }
        report
    });
    // Tasks that outlived the run (none should) must not keep the process alive.
    runtime.shutdown_background();
    if let Some(j) = journal {
        j.record(serde_json::json!({"type": "end", "outcome": report.outcome}));
        drop(j);
        if let Some(t) = journal_thread {
            let _ = t.join();
        }
    }
    let _ = consumer.join();

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
    if !streaming {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        let res = match (r.emit, format) {
            (Some(Emit::Openai), _) => {
                let msgs: Vec<serde_json::Value> =
                    report.results.iter().map(output::openai_message).collect();
                serde_json::to_writer_pretty(&mut out, &msgs)
                    .map_err(std::io::Error::from)
                    .and_then(|_| out.write_all(b"\n"))
            }
            (Some(Emit::Anthropic), _) => {
                let blocks: Vec<serde_json::Value> =
                    report.results.iter().map(output::anthropic_block).collect();
                let msg = serde_json::json!({"role": "user", "content": blocks});
                serde_json::to_writer_pretty(&mut out, &msg)
                    .map_err(std::io::Error::from)
                    .and_then(|_| out.write_all(b"\n"))
            }
            (None, Format::Json) => output::write_json(&mut out, &doc),
            _ => output::write_table(&mut out, &doc, config::use_color(args.color)),
        };
        match res.and_then(|_| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.map_err(|e| Error::io("cannot write to stdout", e))?,
        }
    }
    if !args.quiet {
        let statuses: Vec<_> = report.results.iter().map(|r| r.status).collect();
        eprintln!(
            "{}",
            report::summary::line(report.outcome, &report.stats, &statuses)
        );
        for l in report::summary::lane_lines(&report.stats) {
            eprintln!("  {l}");
        }
    }
    Ok(match report.outcome {
        Outcome::Completed if report.stats.failed == 0 => error::EXIT_OK,
        Outcome::Completed => error::EXIT_CALLS_FAILED,
        Outcome::Interrupted => error::EXIT_INTERRUPTED,
        _ => error::EXIT_ENDED_EARLY,
    })
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
pub(crate) fn spawn_signal_forwarder(tx: mpsc::UnboundedSender<()>) {
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
