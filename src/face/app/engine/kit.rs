//! What every batch of an engine shares — its tools, MCP sessions, cache, approvals and
//! reporters — as a kit, so that a face running many small runs at once (the gateway's
//! calls) builds each one's [`RunConfig`] the same way a batch's is built; and [`Scope`],
//! where one run stands among its face's runs.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::events::Event;
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::run::{self, Approvals, Approver, Cache, LaneStore, RunConfig};
use crate::tools::mcp::McpHub;
use crate::trace_context::TraceContext;

/// What every batch (or gateway call) of an engine shares.
pub(in crate::face::app) struct CallKit {
    pub(super) mcp: Option<Arc<McpHub>>,
    pub(super) events: Option<mpsc::UnboundedSender<Event>>,
    pub(super) lane_events: bool,
    pub(super) approvals: Approvals,
    pub(super) approver: Arc<dyn Approver>,
    pub(super) cache: Option<Arc<Cache>>,
    pub(super) tools: Arc<Vec<Arc<crate::tools::ToolImpl>>>,
}

/// Where one run stands within what its face runs: its id (idempotency keys), lane store,
/// place among the segments, clock, what was spent and called before it, and its trace.
pub(in crate::face::app) struct Scope {
    pub run_id: String,
    pub lanes: Arc<dyn LaneStore>,
    pub segment: Option<usize>,
    pub start: Option<Instant>,
    pub spent: f64,
    pub calls_made: u64,
    pub trace: Option<TraceContext>,
}

impl CallKit {
    /// The same kit for another manifest (the gateway's reload): its tools built anew, on the
    /// MCP sessions of `mcp`; events, approvals and the cache as they were.
    pub(in crate::face::app) fn for_manifest(
        &self,
        manifest: &Manifest,
        plan: &Plan,
        mcp: Option<Arc<McpHub>>,
    ) -> CallKit {
        CallKit {
            tools: Arc::new(run::tool_impls(manifest, plan, mcp.clone())),
            mcp,
            events: self.events.clone(),
            lane_events: self.lane_events,
            approvals: self.approvals.clone(),
            approver: self.approver.clone(),
            cache: self.cache.clone(),
        }
    }

    /// The configuration of one run in `scope`; `events`: where its events go instead of
    /// the engine's reporters (with lane events), `None`: the engine's.
    pub(in crate::face::app) fn config(
        &self,
        scope: Scope,
        events: Option<mpsc::UnboundedSender<Event>>,
    ) -> RunConfig {
        let (events, lane_events) = match events {
            Some(tx) => (Some(tx), true),
            None => (self.events.clone(), self.lane_events),
        };
        RunConfig {
            run_id: scope.run_id,
            lanes: scope.lanes,
            events,
            lane_events,
            mcp: self.mcp.clone(),
            approvals: self.approvals.clone(),
            approver: self.approver.clone(),
            journal: None,
            resume: None,
            retry_indeterminate: false,
            no_resend: false,
            record: false,
            replay: None,
            start: scope.start,
            spent: scope.spent,
            segment: scope.segment,
            cache: self.cache.clone(),
            calls_made: scope.calls_made,
            trace: scope.trace,
            tools: Some(self.tools.clone()),
            relay: None,
        }
    }
}
