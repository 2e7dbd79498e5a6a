//! Reporters: everything a user sees. They consume [`Event`](crate::events::Event)s and finished results and
//! render them — results on stdout (jsonl, json, table), progress and summaries on stderr.
//! Nothing here spawns, sleeps or schedules.

pub mod approvals;
pub mod definitions;
pub mod emit;
pub mod history;
pub mod mcp_import;
pub mod otlp;
pub mod output;
pub mod plan;
pub mod progress;
pub mod summary;
pub mod term;
pub mod timeline;
pub mod tools;

use crate::events::Event;

/// Something that renders events as they happen.
pub trait Reporter: Send {
    fn handle(&mut self, event: &Event);
    /// Called whenever no event is waiting: push out anything buffered.
    fn flush(&mut self) {}
}
