//! A finished run as one record, [`RunEnd`]: what its history line and its spans are both
//! made of (the reporters read it; the face's `Finish` hands it to them), for every face — a
//! batch, a stream, a turn, and the gateway's calls and sessions.

use std::time::{Duration, SystemTime};

use crate::events::{CallResult, Outcome, Stats};
use crate::model_formats::Usage;
use crate::trace_context::TraceContext;

/// What ended, which says what it leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A run of a face (a batch, a stream, a turn): a history line, and a run span over
    /// its calls' spans.
    Run,
    /// One call of the gateway: its span only, the child of the client's (the session
    /// keeps the history).
    ServedCall,
    /// A gateway session (or an hour of one): a history line only (its calls sent their
    /// spans as they ended).
    Session,
}

/// A finished run.
pub(crate) struct RunEnd<'a> {
    pub ended: Ended,
    pub run_id: &'a str,
    pub tenant: &'a str,
    /// Who made its calls, when a gateway's caller named a subject (a JWT's `sub`).
    pub subject: Option<&'a str>,
    /// How its calls came (`yaml`, `jsonl`, `openai`…; `mcp` for the gateway).
    pub input_format: &'a str,
    pub outcome: Outcome,
    /// When it began on the wall clock, and how long it took.
    pub started: SystemTime,
    pub wall: Duration,
    pub stats: &'a Stats,
    /// Each call's result, when the face kept them (spans are made of them).
    pub results: Option<&'a [CallResult]>,
    /// The widest its plan could run, and the most calls it had in flight at once.
    pub width: usize,
    pub peak_in_flight: usize,
    pub usage: Option<&'a Usage>,
    /// The trace it belongs to (`None`: its spans go nowhere).
    pub trace: Option<&'a TraceContext>,
}

impl RunEnd<'_> {
    /// Whether it leaves a history line.
    pub(crate) fn has_record(&self) -> bool {
        self.ended != Ended::ServedCall
    }

    /// Whether it has spans to send: a trace, and results to make them of.
    pub(crate) fn has_spans(&self) -> bool {
        self.ended != Ended::Session && self.trace.is_some() && self.results.is_some()
    }
}
