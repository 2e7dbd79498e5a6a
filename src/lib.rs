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

mod app;
pub mod batch;
mod cli;
mod duration;
pub mod error;
mod events;
mod hash;
mod history;
pub mod manifest;
pub mod model_formats;
pub mod plan;
pub mod reference;
mod report;
pub mod run;
mod schema;
mod template;
mod tools;
mod trace_context;
mod yaml;

#[cfg(test)]
mod layout_tests;

pub use app::{gateway_entry, main};
/// The digest that names a manifest's lane folder (the tests look into it).
pub use hash::fnv;
/// What a run of a plan holds its tools in (the benchmarks build them once).
pub use tools::ToolImpl;
