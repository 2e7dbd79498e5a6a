//! What a tool kind is: the [`Kind`] trait that each kind's file implements for its settings,
//! and the [`Invoke`] trait for the thing that runs its calls. The registry in
//! [`super`] turns the list of kinds into [`KINDS`](super::KINDS) and
//! [`ToolImpl`](super::ToolImpl), so adding a kind is its file and one registration line, and
//! the compiler names every method the new kind must provide.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use toml::de::DeTable;

use super::{Failure, Invocation, Stop, ToolContext};
use crate::manifest::reader::Reader;
use crate::manifest::{Manifest, Site, Tool};

/// A tool kind's settings (`kind = "…"` and the fields it adds to `[tools.NAME]`).
pub trait Kind: Sized + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The `kind = "…"` value.
    const NAME: &'static str;
    /// The fields this kind adds to the common ones of every tool.
    const KEYS: &'static [&'static str];
    /// Arguments a call may always pass to steer this kind; the schema does not check them.
    const RESERVED: &'static [&'static str] = &[];
    /// A call may complete when first polled (no I/O): it is polled once where it is
    /// dispatched and finished without a task when it is done at once.
    const INLINE: bool = false;
    /// Each call runs a local process, so it stands in the `processes` lane.
    const SPAWNS_PROCESS: bool = false;
    /// Its server says whether a tool reads or writes (MCP annotations): an undeclared
    /// `effect` is learnt when the server is asked, not assumed to be a write.
    const ANNOUNCES_EFFECT: bool = false;
    /// What runs this kind's calls.
    type Runner: Invoke;

    /// Read this kind's fields from `t`; problems go to `r` with their locations.
    fn parse(r: &mut Reader<'_>, t: &DeTable<'_>, site: &Site<'_>) -> Self;
    /// Checks that need the whole manifest (a server that must be declared, …).
    fn check(&self, _tool: &Tool, _m: &Manifest, _r: &mut Reader<'_>) {}
    /// The `{argument}` placeholders its invocation fills.
    fn placeholders(&self) -> Vec<&str> {
        Vec::new()
    }
    /// What it invokes, in one line with secrets redacted: shown by `tools`, and part of a
    /// call's fingerprint (journal, cassette), so two settings that invoke differently differ.
    fn target(&self) -> String;
    /// Its settings as JSON for `tools --format json`, secrets redacted.
    fn settings(&self) -> Value;
    /// The backend its calls read and write when the tool names none and has no shared lanes
    /// (an MCP tool: its server). `None`: the tool itself.
    fn backend(&self) -> Option<String> {
        None
    }
    /// The latency `plan` assumes when the tool declares no `expected`.
    fn estimate(&self) -> Option<Duration> {
        None
    }
    /// Make the runner for `tool`; `Err` says why it cannot run (each call then fails with it).
    fn runner(&self, tool: &Tool, ctx: &ToolContext) -> Result<Self::Runner, String>;
}

/// Runs a kind's calls.
pub trait Invoke: Send + Sync + 'static {
    /// Invoke once. A large future should be boxed here: every call's task holds it.
    fn invoke<'a>(
        &'a self,
        inv: &'a Invocation,
        stop: &'a mut Stop,
    ) -> impl Future<Output = Result<Value, Failure>> + Send + 'a;
}

/// `impl Invoke` for a runner whose invocation is its inherent `async fn call`, boxed: the
/// future is large, and every call's task would otherwise be that large.
macro_rules! invoke_boxed {
    ($runner:ty) => {
        impl $crate::tools::Invoke for $runner {
            fn invoke<'a>(
                &'a self,
                inv: &'a $crate::tools::Invocation,
                stop: &'a mut $crate::tools::Stop,
            ) -> impl ::std::future::Future<
                Output = ::std::result::Result<::serde_json::Value, $crate::tools::Failure>,
            > + Send
                   + 'a {
                Box::pin(self.call(inv, stop))
            }
        }
    };
}
pub(crate) use invoke_boxed;
