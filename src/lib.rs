//! flux-tools: run a batch of agent tool calls concurrently inside declared lanes.
pub mod batch;
pub mod duration;
pub mod error;
pub mod manifest;
pub mod plan;
pub mod reference;
pub mod schema;
pub mod template;
pub mod yaml;
