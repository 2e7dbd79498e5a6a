//! The reporters: events in, text out — results, progress, plans, summaries, spans
//! (`report`) — and the run history they read and append (`history`).

pub(crate) mod history;
pub(crate) mod report;
