//! The runner: executes a [`Plan`](crate::plan::Plan).
//!
//! Design — who owns what:
//! - [`scheduler`] owns all run state in one task (the coordinator): which calls are ready,
//!   the serial pre-dispatch steps (resolve references, guardrail, budget) done one call at a
//!   time in call order, phase barriers, `on_tool_error`, deadlines and signals. It emits
//!   [`Event`](crate::events::Event)s and never prints.
//! - Each dispatched call is one task: it takes its lanes in the fixed order through a
//!   [`store::LaneStore`], invokes its [`tools::ToolImpl`] (retrying transient failures of
//!   idempotent tools), classifies how it ended, and sends the result back to the coordinator.
//! - Stopping flows one way: the coordinator flips a `watch` channel (graceful, then force);
//!   every invocation sees it through its [`tools::Stop`] and cleans up before returning.

pub(crate) mod cache;
mod call;
pub(crate) mod cassette;
mod end;
pub(crate) mod gate;
pub(crate) mod journal;
pub(crate) mod scheduler;
pub(crate) mod stats;
pub(crate) mod store;

pub(crate) use cache::Cache;
pub(crate) use cassette::Cassette;
pub(crate) use end::{Ended, RunEnd};
pub(crate) use gate::{ApprovalRequest, Approvals, Approver, Ruling};
pub(crate) use journal::{open_shared, result_from_json, Journal, Resume};
pub(crate) use scheduler::{execute_spawned, new_run_id, Control, RunReport};
pub(crate) use store::{redact_url, Flow, RedisLanes};

/// What the benchmarks drive directly (a run of a plan, outside any face).
pub use scheduler::{execute, tool_impls, RunConfig};
pub use store::{runtime_dir, LaneStore, LocalLanes, MemoryLanes, Move, Sample, Why};
