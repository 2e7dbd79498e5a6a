//! flux-tools runs a batch of agent tool calls concurrently, inside declared concurrency lanes,
//! and returns the results in the order they were asked for, with every failure classified.
//!
//! # Layout
//! The layers, lowest first (`ARCHITECTURE.md`; `layout_tests.rs` keeps them): the ground
//! (`events`, `error`, `duration`, `hash`, `trace_context`, `yaml` — the only module that
//! touches serde_yaml —, `schema`); the model (`template`, `model_formats`, `reference`,
//! `manifest`, `batch`); `plan` (pure, no I/O); `tools`; `run` (the scheduler and the lane
//! store: it emits events and never prints); the reporters (`history`, `report`); the face
//! (`cli`, then `app`).
//!
//! # Surface
//! Everything is `pub(crate)` unless the benchmarks, the fuzz targets or the tests use it
//! (`#![deny(unreachable_pub)]` keeps it so): the modules below that are `pub`, and the few
//! items re-exported at the end.

#![deny(unreachable_pub)]

// The layers, as folders, lowest first; their modules are named from the crate's root.
mod face;
mod ground;
mod model;
pub mod plan;
mod reporters;
pub mod run;
mod tools;

pub(crate) use face::{app, cli};
pub use ground::error;
pub(crate) use ground::{duration, events, glob, hash, ids, schema, trace_context, yaml};
pub(crate) use model::template;
pub use model::{batch, manifest, model_formats, reference};
pub(crate) use reporters::{history, report};

#[cfg(test)]
mod layout_tests;

pub use app::{gateway_entry, main};
/// The digest that names a manifest's lane folder (the tests look into it).
pub use hash::fnv;
/// What a run of a plan holds its tools in (the benchmarks build them once).
pub use tools::ToolImpl;
/// The tool kinds a manifest may use (the benchmarks and fuzz targets parse manifests).
pub use tools::KINDS;
