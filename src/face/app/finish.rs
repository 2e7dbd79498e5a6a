//! Where every face's runs end: [`Finish`] sends a [`RunEnd`]'s spans (when it has a trace,
//! its results, and somewhere to send them) and appends its history line (when runs keep a
//! history) — for a batch, a stream and a turn, and for the gateway's calls (spans) and
//! sessions (history lines). The history record is made and appended here and nowhere else,
//! and spans are exported here and nowhere else. A collector that is away, or a history that
//! cannot be written, is a warning, never the run's failure.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::history;
use crate::manifest::Manifest;
use crate::report::otlp;
use crate::run::{Ended, RunEnd};

/// How runs end: where their spans and history lines go.
pub(crate) struct Finish {
    manifest: Arc<Manifest>,
    /// Where each run's history line goes (`--history`, else the manifest's).
    history: Option<PathBuf>,
    /// Where spans go: `Some(None)` for `OTEL_EXPORTER_OTLP_*`, `Some(Some(url))` for
    /// `--otlp URL`, `None`: nowhere.
    otlp: Option<Option<String>>,
    quiet: bool,
    /// Whether a gateway call's spans failed to go out already (said once: a gateway makes
    /// many small runs).
    served_failed: AtomicBool,
}

impl Finish {
    pub(crate) fn new(
        manifest: Arc<Manifest>,
        history: Option<PathBuf>,
        otlp: Option<Option<String>>,
        quiet: bool,
    ) -> Finish {
        Finish {
            manifest,
            history,
            otlp,
            quiet,
            served_failed: AtomicBool::new(false),
        }
    }

    /// Whether runs append a history line (a face may skip measuring what only the history
    /// needs).
    pub(crate) fn keeps_history(&self) -> bool {
        self.history.is_some()
    }

    /// Whether spans go anywhere (a face keeps its results for them only then).
    pub(crate) fn exports(&self) -> bool {
        self.otlp.is_some()
    }

    /// The run is over: its spans, then its history line.
    pub(crate) async fn finish(&self, end: &RunEnd<'_>) {
        self.spans(end).await;
        self.record(end);
    }

    /// Send the run's spans, if it has any and they go anywhere.
    pub(crate) async fn spans(&self, end: &RunEnd<'_>) {
        let Some(target) = &self.otlp else { return };
        if !end.has_spans() {
            return;
        }
        let Err(e) = otlp::export(target.as_deref(), end).await else {
            return;
        };
        if self.quiet {
            return;
        }
        match end.ended {
            Ended::ServedCall => {
                if !self.served_failed.swap(true, Ordering::Relaxed) {
                    eprintln!("warning: mcp serve: a call's span {e} (said once)");
                }
            }
            Ended::Run | Ended::Session => eprintln!("warning: the run's spans {e}"),
        }
    }

    /// Send a gateway's decision on its catalog as a span (`catalog.changed TOOL`, …), when
    /// spans go anywhere; a collector that is away is said once, as for calls.
    pub(crate) async fn event(&self, name: String, attributes: Vec<opentelemetry::KeyValue>) {
        let Some(target) = &self.otlp else { return };
        let Err(e) = otlp::export_event(target.as_deref(), name, attributes).await else {
            return;
        };
        if !self.quiet && !self.served_failed.swap(true, Ordering::Relaxed) {
            eprintln!("warning: mcp serve: a span {e} (said once)");
        }
    }

    /// Append the run's history line, if it leaves one and runs keep a history.
    pub(crate) fn record(&self, end: &RunEnd<'_>) {
        let Some(path) = &self.history else { return };
        if !end.has_record() {
            return;
        }
        let record = history::Record::of(end, &self.manifest);
        if let Err(err) = history::append(path, &record) {
            if !self.quiet {
                let who = match end.ended {
                    Ended::Session => "mcp serve: ",
                    Ended::Run | Ended::ServedCall => "",
                };
                let path = Path::display(path);
                eprintln!("warning: {who}cannot append to the history `{path}`: {err}");
            }
        }
    }
}
