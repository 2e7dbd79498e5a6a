//! Tool kinds: one file each, registered in one line of [`kinds!`] below.
//!
//! A kind's file owns everything about it: its settings type (a [`Kind`]: manifest fields and
//! their parsing, validation, placeholders, the target that goes into fingerprints, reserved
//! arguments, whether it can complete inline, its `plan` estimate) and its runner (an
//! [`Invoke`]). The registry generates [`ToolKind`] (a tool's settings, one variant per kind)
//! and [`ToolImpl`] (a tool ready to invoke), and dispatches every question to the kind, so
//! nothing else matches on a kind's name.
//!
//! This module sits below the manifest and the runner: the manifest reads a kind's fields
//! through [`ToolKind::parse`], the planner asks [`ToolKind`] about placeholders and processes,
//! and the scheduler invokes [`ToolImpl`]s. Kinds use the manifest's TOML [`Reader`] and the
//! plan's call data; they never touch the scheduler, lanes or reporters.

mod invoke;
mod kind;
pub(crate) mod reaper;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toml::de::DeTable;

pub(crate) use invoke::{
    parse_output, Failure, Invocation, Progress, Relay, RunInfo, Stop, StopCause, StopLevel,
    ToolContext,
};
pub(crate) use kind::{Invoke, Kind, Site};

use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::{Manifest, Tool};

/// The registry: one line a kind — its module (declared here), its variant and its settings
/// type.
macro_rules! kinds {
    ($($vis:vis mod $module:ident => $variant:ident($spec:ident)),* $(,)?) => {
        $($vis mod $module;)*
        $(use $module::$spec;)*

        /// A tool's kind and its own settings.
        #[derive(Debug, Clone)]
        pub enum ToolKind {
            $($variant($spec),)*
        }

        /// A tool, ready to invoke.
        pub enum ToolImpl {
            $($variant(<$spec as Kind>::Runner),)*
            /// A tool that cannot run here; each call fails with this message.
            Unsupported(String),
        }

        impl ToolKind {
            /// Every `kind = "…"` value, in registration order.
            pub const NAMES: &'static [&'static str] = &[$(<$spec as Kind>::NAME),*];

            /// The fields kind `name` adds to a tool's table.
            pub fn keys_of(name: &str) -> Option<&'static [&'static str]> {
                $(if name == <$spec as Kind>::NAME {
                    return Some(<$spec as Kind>::KEYS);
                })*
                None
            }

            /// Read the settings of kind `name`; `None` when no kind has that name.
            pub fn parse(
                name: &str,
                r: &mut Reader<'_>,
                t: &DeTable<'_>,
                site: &Site<'_>,
            ) -> Option<ToolKind> {
                $(if name == <$spec as Kind>::NAME {
                    return Some(ToolKind::$variant(<$spec as Kind>::parse(r, t, site)));
                })*
                None
            }

            pub fn name(&self) -> &'static str {
                match self {
                    $(ToolKind::$variant(_) => <$spec as Kind>::NAME,)*
                }
            }

            pub fn reserved(&self) -> &'static [&'static str] {
                match self {
                    $(ToolKind::$variant(_) => <$spec as Kind>::RESERVED,)*
                }
            }

            pub fn spawns_process(&self) -> bool {
                match self {
                    $(ToolKind::$variant(_) => <$spec as Kind>::SPAWNS_PROCESS,)*
                }
            }

            pub fn announces_effect(&self) -> bool {
                match self {
                    $(ToolKind::$variant(_) => <$spec as Kind>::ANNOUNCES_EFFECT,)*
                }
            }

            pub fn check(&self, tool: &Tool, m: &Manifest, r: &mut Reader<'_>) {
                match self {
                    $(ToolKind::$variant(s) => s.check(tool, m, r),)*
                }
            }

            pub fn placeholders(&self) -> Vec<&str> {
                match self {
                    $(ToolKind::$variant(s) => s.placeholders(),)*
                }
            }

            pub fn target(&self) -> String {
                match self {
                    $(ToolKind::$variant(s) => s.target(),)*
                }
            }

            pub fn settings(&self) -> Value {
                match self {
                    $(ToolKind::$variant(s) => s.settings(),)*
                }
            }

            pub fn backend(&self) -> Option<String> {
                match self {
                    $(ToolKind::$variant(s) => s.backend(),)*
                }
            }

            pub fn estimate(&self) -> Option<Duration> {
                match self {
                    $(ToolKind::$variant(s) => s.estimate(),)*
                }
            }
        }

        impl ToolImpl {
            pub fn from_tool(tool: &Tool, ctx: &ToolContext) -> Arc<ToolImpl> {
                Arc::new(match &tool.kind {
                    $(ToolKind::$variant(s) => match s.runner(tool, ctx) {
                        Ok(r) => ToolImpl::$variant(r),
                        Err(e) => ToolImpl::Unsupported(e),
                    },)*
                })
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

kinds! {
    pub(crate) mod command => Command(CommandSpec),
    pub(crate) mod http => Http(HttpSpec),
    pub(crate) mod mcp => Mcp(McpSpec),
    mod scripted => Scripted(ScriptedSpec),
}
