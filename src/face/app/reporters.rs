//! The reporters, assembled in one place (nextest's `ReporterBuilder` is the model): the
//! resolved options in, the live reporters out (the display on stderr, results streamed to
//! stdout as they resolve), and at the end of a run the outputs it asked for — stdout in its
//! format, `--trace`, `--record`, `--output` — chosen by one `match` that names every format.

use std::io::Write;

use super::options::{Live, RunOptions, Stdout};
use crate::app::config;
use crate::error::Error;
use crate::report::output::{self, RunDocument, StreamWriter};
use crate::report::progress::Progress;
use crate::report::{emit, timeline, Reporter};
use crate::run::RunReport;

/// The reporters that render a run as it goes. `on_broken`: stdout's reader went away.
pub(super) fn live(
    opts: &RunOptions,
    on_broken: impl Fn() + Send + 'static,
) -> Vec<Box<dyn Reporter>> {
    let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
    match opts.live {
        Live::Off => {}
        Live::Auto | Live::Always => reporters.push(Box::new(Progress::new())),
    }
    if opts.streaming {
        let render: Option<output::RenderFn> = match opts.stdout {
            Stdout::Emit(e) => Some(Box::new(move |res: &_| emit::item(e, res))),
            Stdout::Table { .. } | Stdout::Json | Stdout::Jsonl => None,
        };
        let out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
        reporters.push(Box::new(
            StreamWriter::new(out, render).on_broken(on_broken),
        ));
    }
    reporters
}

/// Results on stdout (unless streamed), then the files `--trace`, `--record` and `--output`
/// ask for. Every one is attempted; the first failure is returned.
pub(super) fn write_outputs(opts: &RunOptions, report: &RunReport) -> Result<(), Error> {
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
    if !opts.streaming {
        note(write_stdout(opts.stdout, report, &doc));
    }
    if let Some(path) = &opts.files.trace {
        let trace = timeline::chrome_trace(&report.run_id, &report.results);
        note(config::write_atomic_with(path, |w| {
            serde_json::to_writer(&mut *w, &trace)?;
            w.write_all(b"\n")
        }));
    }
    if let Some(path) = &opts.files.record {
        let doc = crate::run::cassette::document(
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
    if let Some(path) = &opts.files.output {
        note(config::write_atomic_with(path, |w| {
            output::write_json(w, &doc)
        }));
    }
    first.map_or(Ok(()), Err)
}

/// The results on stdout in the format asked for (a closed stdout is not an error).
fn write_stdout(stdout: Stdout, report: &RunReport, doc: &RunDocument<'_>) -> Result<(), Error> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let res = match stdout {
        Stdout::Emit(e) => emit::write(&mut out, e, &report.results),
        Stdout::Json => output::write_json(&mut out, doc),
        Stdout::Table { color } => output::write_table(&mut out, doc, color),
        // Streamed as they resolved; a whole batch's JSON Lines are written the same way.
        Stdout::Jsonl => output::write_jsonl(&mut out, doc),
    };
    match res.and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Error::io("cannot write to stdout", e)),
    }
}
