//! Tool kinds: one file each, registered in one line of [`kinds!`] below.
//!
//! A kind's file owns everything about it: its settings type (a [`Kind`]: manifest fields and
//! their parsing, validation, placeholders, the target that goes into fingerprints, reserved
//! arguments, whether it can complete inline, its `plan` estimate) and its runner (an
//! [`Invoke`]). The registry generates [`KINDS`] (what the manifest reads tools with: each
//! kind's name, fields and parser, its settings behind the model's
//! [`KindSettings`](crate::manifest::KindSettings)) and [`ToolImpl`] (a tool ready to invoke,
//! one variant a kind, dispatched statically on the hot path), so nothing else matches on a
//! kind's name.
//!
//! This layer sits above the model and the plan, below the runner: the manifest is handed
//! [`KINDS`] by the face and never names a kind, the planner asks a tool's settings about
//! placeholders and processes, and the scheduler invokes [`ToolImpl`]s. Kinds use the
//! manifest's TOML [`Reader`] and the plan's call data; they never touch the scheduler, lanes or
//! reporters.

mod groups;
mod invoke;
mod kind;
pub(crate) mod quota;
pub(crate) mod reaper;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toml::de::DeTable;

pub(crate) use invoke::{
    parse_output, Behalf, Failure, Invocation, Progress, Relay, RunInfo, Stop, StopCause,
    StopLevel, ToolContext,
};
pub(crate) use kind::{Invoke, Kind};

use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::{KindEntry, KindSettings, Kinds, Manifest, Site, Tool};

/// The registry: one line a kind — its module (declared here), its variant and its settings
/// type.
macro_rules! kinds {
    ($($vis:vis mod $module:ident => $variant:ident($spec:ident)),* $(,)?) => {
        $($vis mod $module;)*
        $(pub(crate) use $module::$spec;)*

        /// Every kind, for the manifest to read tools of, in registration order.
        pub static KINDS: &Kinds = &[$(KindEntry {
            name: <$spec as Kind>::NAME,
            keys: <$spec as Kind>::KEYS,
            parse: parse_kind::<$spec>,
        }),*];

        /// A tool, ready to invoke.
        pub enum ToolImpl {
            $($variant(<$spec as Kind>::Runner),)*
            /// A tool that cannot run here; each call fails with this message.
            Unsupported(String),
        }

        impl ToolImpl {
            pub fn from_tool(tool: &Tool, ctx: &ToolContext) -> Arc<ToolImpl> {
                let settings = tool.kind.as_any();
                $(if let Some(s) = settings.downcast_ref::<$spec>() {
                    return Arc::new(match Kind::runner(s, tool, ctx) {
                        Ok(r) => ToolImpl::$variant(r),
                        Err(e) => ToolImpl::Unsupported(e),
                    });
                })*
                let kind = tool.kind.name();
                Arc::new(ToolImpl::Unsupported(format!("tool kind `{kind}` is not registered")))
            }

            /// Whether a call may complete when first polled (see [`Kind::INLINE`]).
            pub fn inline(&self) -> bool {
                match self {
                    $(ToolImpl::$variant(_) => <$spec as Kind>::INLINE,)*
                    ToolImpl::Unsupported(_) => false,
                }
            }

            pub async fn invoke(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
                match self {
                    $(ToolImpl::$variant(r) => r.invoke(inv, stop).await,)*
                    ToolImpl::Unsupported(msg) => Err(Failure::failed(ErrorKind::SpawnFailed, msg.clone())),
                }
            }
        }
    };
}

/// Read kind `K`'s settings, for its registry entry.
fn parse_kind<K: Kind>(
    r: &mut Reader<'_>,
    t: &DeTable<'_>,
    site: &Site<'_>,
) -> Box<dyn KindSettings> {
    Box::new(K::parse(r, t, site))
}

/// Every kind's settings answer the manifest's and the planner's questions through its [`Kind`].
impl<K: Kind> KindSettings for K {
    fn name(&self) -> &'static str {
        K::NAME
    }
    fn reserved(&self) -> &'static [&'static str] {
        K::RESERVED
    }
    fn spawns_process(&self) -> bool {
        K::SPAWNS_PROCESS
    }
    fn announces_effect(&self) -> bool {
        K::ANNOUNCES_EFFECT
    }
    fn check(&self, tool: &Tool, m: &Manifest, r: &mut Reader<'_>) {
        Kind::check(self, tool, m, r)
    }
    fn placeholders(&self) -> Vec<&str> {
        Kind::placeholders(self)
    }
    fn target(&self) -> String {
        Kind::target(self)
    }
    fn settings(&self) -> Value {
        Kind::settings(self)
    }
    fn backend(&self) -> Option<String> {
        Kind::backend(self)
    }
    fn estimate(&self) -> Option<Duration> {
        Kind::estimate(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

kinds! {
    pub(crate) mod command => Command(CommandSpec),
    pub(crate) mod http => Http(HttpSpec),
    pub(crate) mod mcp => Mcp(McpSpec),
    mod scripted => Scripted(ScriptedSpec),
}
