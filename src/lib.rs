//! flux-tools runs a batch of agent tool calls concurrently, inside declared concurrency lanes,
//! and returns the results in the order they were asked for, with every failure classified.
//!
//! # Layout
//! The layers, lowest first (`ARCHITECTURE.md`; `layout_tests.rs` keeps them): the ground
//! (`events`, `error`, `duration`, `hash`, `trace_context`, `yaml` — the only module that
//! touches serde_yaml —, `schema`); the model (`template`, `model_formats`, `reference`,
//! `manifest`, `batch`, `lock`); `plan` (pure, no I/O); `tools`; `run` (the scheduler and the lane
//! store: it emits events and never prints); the reporters (`history`, `report`); the face
//! (`cli`, then `app`).
//!
//! # Surface
//! A list, not whole modules: every module is private, and the items the benchmarks, the fuzz
//! targets and the tests use are re-exported at the end, one by one. Everything else is
//! `pub(crate)` (`#![deny(unreachable_pub)]` keeps it so).

#![deny(unreachable_pub)]

// The layers, as folders, lowest first; their modules are named from the crate's root.
mod face;
mod ground;
mod model;
mod plan;
mod reporters;
mod run;
mod store;
mod tools;

pub(crate) use face::{app, cli};
pub(crate) use ground::error;
pub(crate) use ground::{duration, events, glob, hash, ids, schema, trace_context, yaml};
pub(crate) use model::template;
pub(crate) use model::{batch, lock, manifest, model_formats, reference};
pub(crate) use reporters::{history, report};

#[cfg(test)]
mod layout_tests;

// The public surface, as a list: what the benchmarks, the fuzz targets and the tests use (the
// Python package drives the binary). Nothing else is `pub` (`unreachable_pub` keeps it so).

/// The program itself, and the gateway's reading of a message (a fuzz target).
pub use app::{gateway_entry, main};
/// Where a batch, a manifest or a model's reply is read from (line and column of an error).
pub use ground::error::SourceFile;
/// The digest that names a manifest's lane folder (the tests look into it).
pub use hash::fnv;
/// A batch of calls, and how its input is read.
pub use model::batch::{Batch, Call, Reading};
/// The manifest: the tools, lanes and servers a batch may use.
pub use model::manifest::Manifest;
/// A model's reply: which provider wrote it, and its tool calls.
pub use model::model_formats::{detect as detect_reply, read as read_reply, InputFormat};
/// A call's arguments, with references to earlier results.
pub use model::reference::{Args, StrTemplate};
/// Planning: a batch and a manifest become a plan of calls in lanes.
pub use plan::{build as build_plan, simulate as simulate_plan, Estimate, Plan, PlanOptions};
/// Running a plan: its tools, the lane store it holds its places in, its report.
pub use run::{
    execute, runtime_dir, tool_impls, LaneStore, LocalLanes, MemoryLanes, Move, RunConfig, Sample,
    Why,
};
/// What a run holds its tools in (the benchmarks build them once), and the tool kinds a
/// manifest may use.
pub use tools::{ToolImpl, KINDS};
