//! What the manifest knows of tool kinds without knowing any: a kind's settings behind
//! [`KindSettings`], and the registry ([`Kinds`], one [`KindEntry`] a kind) that reads them.
//!
//! The kinds themselves live a layer up, one file each under `tools/`; their registry hands
//! this list to [`Manifest::load`](super::Manifest::load). So the model never names a kind,
//! the planner asks a tool's settings what it needs (placeholders, processes, estimates), and
//! the runner turns settings back into its own type ([`Tool::settings_of`](super::Tool)).

use std::any::Any;
use std::fmt::Debug;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use toml::de::DeTable;

use super::reader::Reader;
use super::{Manifest, Tool};

/// Where a `[tools.NAME]` table stands, for a kind reading its settings from it.
pub struct Site<'a> {
    /// The tool's name (the manifest key).
    pub name: &'a str,
    /// `[tools.NAME]`, for messages.
    pub ctx: &'a str,
    /// The key's byte span, for diagnostics about missing fields.
    pub span: Range<usize>,
    /// The manifest's folder: relative paths resolve against it.
    pub base: &'a Path,
}

/// A tool's kind-specific settings, as every layer above the manifest asks about them.
pub trait KindSettings: Debug + Send + Sync + 'static {
    /// The `kind = "…"` value.
    fn name(&self) -> &'static str;
    /// Arguments a call may always pass to steer this kind; the schema does not check them.
    fn reserved(&self) -> &'static [&'static str];
    /// Each call runs a local process, so it stands in the `processes` lane.
    fn spawns_process(&self) -> bool;
    /// Its server says whether a tool reads or writes (MCP annotations).
    fn announces_effect(&self) -> bool;
    /// Checks that need the whole manifest (a server that must be declared, …).
    fn check(&self, tool: &Tool, m: &Manifest, r: &mut Reader<'_>);
    /// The `{argument}` placeholders its invocation fills.
    fn placeholders(&self) -> Vec<&str>;
    /// What it invokes, in one line with secrets redacted (part of a call's fingerprint).
    fn target(&self) -> String;
    /// Its settings as JSON for `tools --format json`, secrets redacted.
    fn settings(&self) -> Value;
    /// The backend its calls read and write when the tool names none (`None`: the tool).
    fn backend(&self) -> Option<String>;
    /// The latency `plan` assumes when the tool declares no `expected`.
    fn estimate(&self) -> Option<Duration>;
    /// The settings as their own type, for the kind's runner (and a face that asks about one
    /// kind, as the MCP gateway does about its servers' tools).
    fn as_any(&self) -> &dyn Any;
}

/// One registered kind: its name, the fields it adds to a tool's table, and how it reads them.
pub struct KindEntry {
    pub name: &'static str,
    pub keys: &'static [&'static str],
    #[allow(clippy::type_complexity)]
    pub parse: fn(&mut Reader<'_>, &DeTable<'_>, &Site<'_>) -> Box<dyn KindSettings>,
}

/// The registry of kinds a manifest may use, in registration order.
pub(crate) type Kinds = [KindEntry];

/// The kind called `name`.
pub(super) fn find<'k>(kinds: &'k Kinds, name: &str) -> Option<&'k KindEntry> {
    kinds.iter().find(|k| k.name == name)
}
