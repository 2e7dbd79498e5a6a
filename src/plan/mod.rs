//! The planner: from a manifest and a batch to a [`Plan`] — phases, edges with their reasons,
//! the lanes each call stands in, and a simulated schedule. Pure and synchronous: no I/O, no
//! clocks, so it is tested exhaustively and `plan` can never run anything.
//!
//! Layout: [`model`](self) the types; `graph` the build steps (ids, tools, phases, edges,
//! cycles, the write chain); `lanes` the lane table and narrowed settings; `checks` the
//! guardrail on literal arguments, weights and fan-out warnings; `schedule` the simulation;
//! `lease` the lanes a nested run borrows from the call that started it.

mod checks;
pub(crate) mod claims;
mod graph;
#[cfg(test)]
mod hazard_tests;
mod lanes;
pub(crate) mod lease;
mod model;
mod schedule;

pub(crate) use claims::{backend_claims, Claim};
pub use graph::build;
pub(crate) use lanes::{lane_table, LaneSeed};
pub(crate) use model::{
    CallPlan, Edge, EdgeReason, External, LaneKey, LaneSpec, RunSettings, ASSUMED_LATENCY,
};
pub use model::{Plan, PlanOptions};
pub(crate) use schedule::critical_path;
pub use schedule::{simulate, Estimate};
