//! `flux-tools run --turns`: one process answers turn after turn. Each line of stdin is a turn
//! — a model's reply in any supported format, or a batch document on one line — planned and
//! run as a whole batch (its own run id, budget, deadline, `fail_run` and results), and
//! answered with exactly one line on stdout, flushed at once: the `--emit` answer, or the
//! results document as compact JSON. What costs time to set up is kept for the life of the
//! process: the MCP sessions (a server that died is started again for the next turn), the
//! tools with their HTTP connection pool, the lane store's connection and files (and, in
//! memory, the permits and rate buckets of lanes every run shares) and the read cache.
//!
//! A line that is not a turn is answered with an error line, and the next turn runs. The exit
//! status is the highest of the turns' statuses (2 for a turn that could not be read).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::engine::{Durability, Engine, RunShape};
use super::options::{RunOptions, Stdout};
use super::prepare::Parts;
use super::print_warnings;
use super::terminal::TerminalApprover;
use crate::batch::Batch;
use crate::error::{Diagnostic, Error, SourceFile, EXIT_INVALID, EXIT_OK};
use crate::manifest::Manifest;
use crate::plan;
use crate::plan::lease;
use crate::report::emit::{self, Emit};
use crate::report::output::RunDocument;
use crate::run::LaneStore;
use crate::run::{self, RunReport};
use crate::tools::mcp::{self, McpHub};
use crate::tools::McpSpec;

/// How often the wait for the next turn looks for Ctrl-C.
const POLL: Duration = Duration::from_millis(50);

pub(super) fn run_turns(opts: &RunOptions, rt: tokio::runtime::Runtime) -> Result<u8, Error> {
    refuse_whole_run_options(opts)?;
    let mut manifest =
        Manifest::load(&opts.manifest, crate::tools::KINDS).map_err(Error::Invalid)?;
    // Servers start on first use (a whole server at once, for its tools); a tool's
    // annotations are applied the first time a turn uses it.
    let hub = mcp::hub_for(&manifest);
    if let Some(hub) = &hub {
        super::prepare::learn_whole(opts.quiet, &mut manifest, hub, &rt);
    }
    // What `tools.lock` holds back is held back from every turn.
    let held = super::prepare::held_back(&opts.manifest, &manifest, hub.clone(), &rt)?;
    let parts = Parts::of_manifest(opts, manifest, hub.clone(), &rt)?;
    let store = parts.lanes.clone();
    // Each turn's answer is one line this face writes itself: nothing streams.
    let opts = RunOptions {
        streaming: false,
        ..opts.clone()
    };
    let approver = Arc::new(TerminalApprover);
    let mut session = Engine::open(&opts, parts, approver);
    session.interrupt_on_signals(&rt);
    let mut turns = Turns {
        opts: &opts,
        store,
        hub,
        annotated: HashSet::new(),
        held,
        worst: EXIT_OK,
        out: std::io::BufWriter::new(std::io::stdout()),
    };
    let lines = read_lines();
    let mut n = 0usize;
    loop {
        let line = match lines.recv_timeout(POLL) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) if session.interrupted.load(Ordering::SeqCst) => {
                turns.worst = turns.worst.max(crate::error::EXIT_INTERRUPTED);
                break;
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        n += 1;
        let answered = turns.turn(&mut session, &rt, n, line);
        if !answered || session.drained.load(Ordering::SeqCst) {
            // Nobody reads the answers any more: like a closed pipe, not a failure.
            turns.worst = EXIT_OK;
            break;
        }
        if session.interrupted.load(Ordering::SeqCst) {
            break;
        }
    }
    session.close(rt);
    Ok(turns.worst)
}

/// What lasts from one turn to the next.
struct Turns<'a> {
    opts: &'a RunOptions,
    /// The lane store as opened; each turn gets it for its own lane table.
    store: Arc<dyn LaneStore>,
    hub: Option<Arc<McpHub>>,
    /// MCP tools whose servers' annotations are applied to the manifest already.
    annotated: HashSet<String>,
    /// The tools `tools.lock` holds back (judged when the session opened).
    held: HashSet<String>,
    worst: u8,
    out: std::io::BufWriter<std::io::Stdout>,
}

impl Turns<'_> {
    /// Run turn `n` and write its answer. `false`: stdout is gone.
    fn turn(
        &mut self,
        session: &mut Engine,
        rt: &tokio::runtime::Runtime,
        n: usize,
        line: Result<String, String>,
    ) -> bool {
        if let Some(hub) = &self.hub {
            rt.block_on(hub.revive());
        }
        let prepared = line
            .map_err(|e| vec![Diagnostic::error(e)])
            .and_then(|text| self.prepare(session, rt, n, text));
        let (plan, shape) = match prepared {
            Ok(p) => p,
            Err(diags) => {
                self.worst = self.worst.max(EXIT_INVALID);
                return self.write(&error_line(n, &diags));
            }
        };
        session.new_run(super::run::named_run_id(self.opts, &plan, Some(n)));
        let tenant = plan.settings.tenant.clone();
        let report = session.execute(rt, Arc::new(plan), Durability::default());
        let end = session.core.report_end(&tenant, &report, &shape);
        session.core.end_run(rt, &end);
        let label = format!("turn {n}: ");
        let statuses: Vec<_> = report.results.iter().map(|r| r.status).collect();
        let status = session.summary(&end, &statuses, Some(&label)).print();
        self.worst = self.worst.max(status);
        self.write(&answer(self.emit(), &report))
    }

    /// The `--emit` answers, if asked for.
    fn emit(&self) -> Option<Emit> {
        match self.opts.stdout {
            Stdout::Emit(e) => Some(e),
            Stdout::Table { .. } | Stdout::Json | Stdout::Jsonl => None,
        }
    }

    /// Read, annotate and plan turn `n`; its lane store is set on the session.
    fn prepare(
        &mut self,
        session: &mut Engine,
        rt: &tokio::runtime::Runtime,
        n: usize,
        text: String,
    ) -> Result<(plan::Plan, RunShape), Vec<Diagnostic>> {
        let file = SourceFile::new(format!("<turn {n}>"), text);
        let (batch, warnings) = Batch::parse_with(file, self.opts.reading)?;
        self.annotate(session, rt, &batch)?;
        let mut plan = plan::build(&session.core.manifest, &batch, &self.opts.plan)?;
        super::prepare::hold_back(&mut plan, &self.held);
        print_warnings(self.opts.quiet, &warnings);
        print_warnings(self.opts.quiet, &plan.warnings);
        lease::borrow(
            &mut std::sync::Arc::<Vec<_>>::make_mut(&mut plan.lanes)[..],
            &session.core.manifest,
            self.opts.lease.as_deref(),
        );
        let lanes = self
            .store
            .for_lanes(&plan.lanes, &run::Flow::default())
            .map_err(|e| vec![Diagnostic::error(e.to_string())])?;
        session.core.set_lanes(lanes);
        let shape = RunShape::of(&plan, session);
        Ok((plan, shape))
    }

    /// Apply the annotations of the MCP tools this turn is the first to use.
    fn annotate(
        &mut self,
        session: &mut Engine,
        rt: &tokio::runtime::Runtime,
        batch: &Batch,
    ) -> Result<(), Vec<Diagnostic>> {
        let Some(hub) = &self.hub else { return Ok(()) };
        let mut new: Vec<String> = batch
            .calls
            .iter()
            .filter_map(|c| session.core.manifest.tool(&c.tool))
            .filter(|t| t.settings_of::<McpSpec>().is_some() && !self.annotated.contains(&t.name))
            .map(|t| t.name.clone())
            .collect();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        let manifest: &mut Manifest = Arc::make_mut(&mut session.core.manifest);
        let diags = rt.block_on(mcp::annotate(manifest, hub, &new));
        if diags.iter().any(Diagnostic::is_error) {
            return Err(diags);
        }
        print_warnings(self.opts.quiet, &diags);
        self.annotated.extend(new);
        Ok(())
    }

    /// One line on stdout, flushed. `false`: nobody reads it.
    fn write(&mut self, line: &str) -> bool {
        self.out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush())
            .is_ok()
    }
}

/// A turn's answer on one line: what `--emit` writes (compact; `null` for a provider that
/// takes no empty answer), else the results document.
fn answer(emit: Option<Emit>, report: &RunReport) -> String {
    match emit {
        Some(e) => {
            emit::document(e, &report.results).map_or_else(|| "null".into(), |d| d.to_string())
        }
        None => serde_json::to_string(&RunDocument {
            run_id: &report.run_id,
            outcome: report.outcome,
            results: &report.results,
            stats: &report.stats,
        })
        .unwrap_or_else(|e| error_line(0, &[Diagnostic::error(e.to_string())])),
    }
}

/// The answer to a line that is not a turn: `{"turn": N, "error": "…", "diagnostics": […]}`.
fn error_line(n: usize, diags: &[Diagnostic]) -> String {
    let errors: Vec<&Diagnostic> = diags.iter().filter(|d| d.is_error()).collect();
    let first = errors
        .first()
        .map_or_else(String::new, |d| d.message.clone());
    let all: Vec<Value> = errors
        .iter()
        .map(|d| {
            json!({
                "message": d.message,
                "line": d.location.as_ref().map(|l| l.line),
                "column": d.location.as_ref().map(|l| l.col),
                "hint": d.hint,
            })
        })
        .collect();
    json!({"turn": n, "error": first, "diagnostics": all}).to_string()
}

/// Stdin's lines, read on their own thread (so Ctrl-C is seen while the next turn is awaited);
/// blank lines are skipped, a line that is not UTF-8 is an error for its turn.
fn read_lines() -> Receiver<Result<String, String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut buf = Vec::new();
            match stdin.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = match String::from_utf8(buf) {
                Ok(s) if s.trim().is_empty() => continue,
                Ok(s) => Ok(s.trim_end_matches(['\n', '\r']).to_string()),
                Err(_) => Err("the turn is not UTF-8 text".to_string()),
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Options that belong to one run over a whole batch.
fn refuse_whole_run_options(opts: &RunOptions) -> Result<(), Error> {
    let whole = opts.files.whole_batch_option();
    if let Some(flag) = whole.or(opts.stream.then_some("--stream")) {
        return Err(Error::Usage(format!(
            "{flag} cannot be used with --turns: each turn is a run of its own (use --history to keep a line per turn)"
        )));
    }
    if opts.batch.as_deref().is_some_and(|b| b != "-") {
        return Err(Error::Usage(
            "--turns reads its turns from stdin, one per line; give no BATCH (or -)".into(),
        ));
    }
    Ok(())
}
