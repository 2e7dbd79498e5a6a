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

pub mod app;
pub mod batch;
pub mod cli;
pub mod duration;
pub mod error;
pub mod events;
pub mod hash;
pub mod history;
pub mod manifest;
pub mod model_formats;
pub mod plan;
pub mod reference;
pub mod report;
pub mod run;
pub mod schema;
pub mod template;
pub mod tools;
pub mod trace_context;
pub mod yaml;

#[cfg(test)]
mod layout_tests;
