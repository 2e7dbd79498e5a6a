//! flux-tools runs a batch of agent tool calls concurrently, inside declared concurrency lanes,
//! and returns the results in the order they were asked for, with every failure classified.
//!
//! # Layout
//! - [`cli`]: the clap command line; [`config`]: discovery and I/O around it; [`app`]: the
//!   commands and exit codes.
//! - [`manifest`] (`tools.toml`), [`batch`] (the calls), [`reference`] (`${id.path}`),
//!   [`schema`] (argument guardrails), [`template`] (`${env:…}` and `{arg}` in the manifest),
//!   [`yaml`] (the only module that touches serde_yaml).
//! - [`plan`]: phases, edges, lanes and the simulated schedule — pure, no I/O.
//! - [`run`]: the scheduler and lanes. It emits [`events`] and never prints.
//! - [`report`]: events in, text out — results, progress, plans, summaries.
//! - [`error`]: diagnostics with locations and hints; exit codes.

#![warn(unreachable_pub)]

mod app;
pub mod batch;
mod cli;
mod duration;
pub mod error;
mod events;
pub mod hash;
mod history;
pub mod manifest;
pub mod model_formats;
pub mod plan;
pub mod reference;
mod report;
pub mod run;
mod schema;
mod template;
pub mod tools;
mod trace_context;
mod yaml;

#[cfg(test)]
mod layout_tests;

pub use app::{gateway_entry, main};
