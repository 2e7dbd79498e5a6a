//! The planner: from a manifest and a batch to a [`Plan`] — phases, edges with their reasons,
//! the lanes each call stands in, and a simulated schedule. Pure and synchronous: no I/O, no
//! clocks, so it is tested exhaustively and `plan` can never run anything.

mod graph;
mod schedule;

pub use graph::{
    build, CallPlan, Edge, EdgeReason, External, LaneKey, LaneSpec, Phase, Plan, PlanOptions,
    RunSettings, ASSUMED_LATENCY,
};
pub use schedule::{critical_path, simulate, Estimate};
