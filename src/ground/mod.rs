//! The ground floor: types and helpers every layer shares — the events the runner emits,
//! diagnostics and exit codes, durations, digests, trace context, the one module that touches
//! serde_yaml, and argument schemas. Nothing here names a module above it.

pub(crate) mod duration;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod glob;
pub(crate) mod hash;
pub(crate) mod ids;
pub(crate) mod schema;
pub(crate) mod trace_context;
pub(crate) mod yaml;
