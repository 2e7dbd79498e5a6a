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

pub mod cache;
mod call;
pub mod cassette;
mod end;
pub mod gate;
pub mod journal;
pub mod scheduler;
pub mod stats;
pub mod store;

pub use cache::Cache;
pub use cassette::Cassette;
pub use end::{Ended, RunEnd};
pub use gate::{ApprovalRequest, Approvals, Approver, Ruling};
pub use journal::{result_from_json, Journal, Resume};
pub use scheduler::{
    execute, execute_spawned, new_run_id, tool_impls, Control, RunConfig, RunReport,
};
pub use store::{redact_url, runtime_dir, Flow, LaneStore, LocalLanes, MemoryLanes, RedisLanes};
