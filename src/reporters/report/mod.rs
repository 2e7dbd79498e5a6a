//! Reporters: everything a user sees. They consume [`Event`](crate::events::Event)s and finished results and
//! render them — results on stdout (jsonl, json, table), progress and summaries on stderr.
//! Nothing here spawns, sleeps or schedules.

pub(crate) mod approvals;
pub(crate) mod definitions;
pub(crate) mod emit;
pub(crate) mod history;
pub(crate) mod mcp_import;
pub(crate) mod otlp;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod summary;
pub(crate) mod term;
pub(crate) mod timeline;
pub(crate) mod tools;

use crate::events::Event;

/// Something that renders events as they happen.
pub(crate) trait Reporter: Send {
    fn handle(&mut self, event: &Event);
    /// Called whenever no event is waiting: push out anything buffered.
    fn flush(&mut self) {}
}
