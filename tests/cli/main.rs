//! The one integration test binary: runs the real `flux-tools` against batches and manifests.

mod cache;
mod chaos;
mod common;
mod completions;
mod compose;
mod errors;
mod formats;
mod gate;
mod hazards;
mod history;
mod hostile;
mod http;
mod http_server;
mod journal;
mod lanes;
mod limits;
mod mcp;
mod otlp;
mod outputs;
mod plan;
mod processes;
mod run;
mod sdk;
mod signals;
mod stream;
mod turns;
