//! The plan's types: what the planner produces and the runner and reporters read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::OnToolError;
use crate::error::Diagnostic;
use crate::manifest::Rate;
use crate::reference::Args;

/// What the command line adds to or overrides in a batch.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub tenant: Option<String>,
    pub max_concurrent_tools: Option<u32>,
    pub on_tool_error: Option<OnToolError>,
    pub deadline: Option<Duration>,
    pub max_cost: Option<f64>,
    /// `--max-calls` (replaces the manifest's; the batch may only narrow).
    pub max_calls: Option<u32>,
    /// Calls settled before this batch (earlier chunks of a stream) that references and
    /// `after` may name: their output, or `None` when they failed.
    pub external: Option<Arc<External>>,
    /// The most `command` calls in flight at once (the `processes` lane), from the machine's
    /// limits and `--max-processes`.
    pub max_processes: Option<u32>,
    /// Lanes to start the plan's lane table with (see [`lane_table`](super::lane_table)): a
    /// stream plans each chunk against the same table, so a lane has the same index in every
    /// chunk and one lane store serves them all.
    pub lanes: Option<super::lanes::LaneSeed>,
}

/// Outputs of calls outside the batch, by id (`None`: the call did not succeed).
pub(crate) type External = HashMap<String, Option<serde_json::Value>>;

/// Run-wide settings after narrowing.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub tenant: String,
    pub on_tool_error: OnToolError,
    pub run_deadline: Option<Duration>,
    pub tool_call_deadline: Option<Duration>,
    pub max_cost: Option<f64>,
    /// The most calls the run may make (cache hits do not count).
    pub max_calls: Option<u32>,
    /// Which calls are ordered for their side effects.
    pub hazards: crate::manifest::Hazards,
}

/// Why one call waits for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeReason {
    /// An argument references the other call's output: it must succeed.
    Reference,
    /// A declared business ordering: it must succeed.
    After,
    /// The previous write in call order: it must have resolved.
    WriteChain,
    /// A write waits for an earlier read of a backend it shares (no write under a read): the
    /// read must have resolved.
    #[serde(rename = "read→write")]
    ReadThenWrite,
    /// A read waits for the latest earlier write of a backend it shares (no stale read): the
    /// write must have resolved.
    #[serde(rename = "write→read")]
    WriteThenRead,
    /// A write of a tool that allows concurrent writes waits for the plain write before it on
    /// a backend they share, and a plain write for the concurrent writes before it: the write
    /// must have resolved.
    #[serde(rename = "write→write")]
    WriteThenWrite,
}

impl EdgeReason {
    /// Whether the dependency must have succeeded (not merely resolved).
    pub fn needs_success(self) -> bool {
        matches!(self, EdgeReason::Reference | EdgeReason::After)
    }
}

/// `to` waits for `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub reason: EdgeReason,
    /// For a read/write hazard: the shared backend, an index into [`Plan::backends`].
    pub backend: Option<u32>,
}

/// Which limit a lane is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LaneKey {
    Tenant(String),
    BatchTenant(String),
    Turn,
    Tool(String),
    BatchTool(String),
    Shared(String),
    /// What the machine can hold: `command` calls in flight (from `ulimit -n`/`-u`).
    Processes,
}

impl LaneKey {
    /// The name users see: `tenant:acme`, `turn`, `tool:search`, `lane:partner-api`.
    pub fn display(&self) -> String {
        match self {
            LaneKey::Tenant(t) => format!("tenant:{t}"),
            LaneKey::BatchTenant(t) => format!("tenant:{t} (batch)"),
            LaneKey::Turn => "turn".into(),
            LaneKey::Tool(t) => format!("tool:{t}"),
            LaneKey::BatchTool(t) => format!("tool:{t} (batch)"),
            LaneKey::Shared(l) => format!("lane:{l}"),
            LaneKey::Processes => "processes".into(),
        }
    }

    /// Whether the lane is shared with other runs (tenant, tool, shared) or this run's own.
    pub fn across_runs(&self) -> bool {
        matches!(
            self,
            LaneKey::Tenant(_) | LaneKey::Tool(_) | LaneKey::Shared(_)
        )
    }
}

/// One lane this run uses.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneSpec {
    pub key: LaneKey,
    pub name: String,
    /// Its limit; for a learned one, the ceiling.
    pub limit: Option<u32>,
    /// `concurrency = "auto"`: the limit moves with what the backend answers, in these bounds.
    pub auto: Option<crate::manifest::AutoLimit>,
    /// A learned lane's last limit in the history (`plan` simulates with it).
    pub learned: Option<u32>,
    pub rate: Option<Rate>,
    pub burst: Option<u32>,
    /// Held for us by the run that started this one (`FLUX_TOOLS_LEASE`): the lane is this
    /// run's own copy, limited to what the parent holds, and never queues behind the parent.
    pub borrowed: bool,
}

impl From<&LaneSpec> for crate::events::LaneInfo {
    fn from(l: &LaneSpec) -> crate::events::LaneInfo {
        crate::events::LaneInfo {
            name: l.name.clone(),
            limit: l.planned(),
            auto: l.auto.is_some(),
            rate: l.rate.map(|r| r.to_string()),
        }
    }
}

impl LaneSpec {
    /// What the lane is sure to allow: its limit, or a learned one's floor (`min`).
    pub fn floor(&self) -> Option<u32> {
        self.auto.map(|a| a.min).or(self.limit)
    }

    /// The limit a schedule is simulated with: its limit, or a learned one's last learned
    /// limit (else its start).
    pub fn planned(&self) -> Option<u32> {
        (self.auto)
            .map(|a| self.learned.unwrap_or(a.start))
            .or(self.limit)
    }
}

/// A phase: a contiguous range of calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    pub start: usize,
    pub end: usize,
    /// A lone call to a `parallel_safe = false` tool.
    pub alone: bool,
}

/// One call, planned.
#[derive(Debug, Clone)]
pub struct CallPlan {
    pub index: usize,
    pub id: String,
    /// The tool's position in the manifest (`None` only for an invalid call naming no tool).
    pub tool: Option<usize>,
    pub tool_name: String,
    /// The name the call used when it was not the manifest's (a model calling a tool by its
    /// exported name, `db_getOrders`): answers that name the tool (Gemini's) use it.
    pub called_as: Option<String>,
    pub phase: usize,
    pub edges: Vec<Edge>,
    /// Lane indices into [`Plan::lanes`], in acquisition order (shared by a tool's calls).
    pub lanes: std::sync::Arc<[usize]>,
    pub args: std::sync::Arc<Args>,
    pub weight: u32,
    pub write: bool,
    pub idempotent: bool,
    pub cost: f64,
    /// Expected latency, and whether it came from the manifest (`false` = assumed).
    pub estimate: Duration,
    pub estimate_known: bool,
    /// Ids outside the batch this call references or is `after` (they must have succeeded).
    pub external_deps: Vec<String>,
    /// Why the call cannot be made (a model's unknown tool, bad arguments, …): it is answered
    /// `invalid_call` and never dispatched.
    pub invalid: Option<String>,
}

impl CallPlan {
    /// A call that names no tool the manifest has: answered `invalid_call`.
    pub fn invalid(index: usize, call: &crate::batch::Call, phase: usize) -> CallPlan {
        CallPlan {
            index,
            id: call.id.clone(),
            tool: None,
            tool_name: call.tool.clone(),
            called_as: None,
            phase,
            edges: Vec::new(),
            lanes: std::sync::Arc::new([]),
            args: call.args.clone(),
            weight: 0,
            write: false,
            idempotent: true,
            cost: 0.0,
            estimate: Duration::ZERO,
            estimate_known: true,
            external_deps: Vec::new(),
            invalid: Some(String::new()),
        }
    }

    /// The kind an invalid call is answered with: `unknown_tool` when it names no tool that is
    /// served, else `invalid_call`.
    pub(crate) fn refusal_kind(&self) -> crate::events::ErrorKind {
        match self.tool {
            None => crate::events::ErrorKind::UnknownTool,
            Some(_) => crate::events::ErrorKind::InvalidCall,
        }
    }

    /// Make it a call that is never dispatched, for `why`: invalid calls take no lanes and
    /// wait for nothing — they are answered at once (`invalid_call`).
    pub(crate) fn refuse(&mut self, why: String) {
        self.invalid = Some(why);
        self.lanes = std::sync::Arc::new([]);
        self.edges.clear();
        self.weight = 0;
        self.cost = 0.0;
        // Answered at once: it takes no time in the estimate.
        self.estimate = Duration::ZERO;
        self.estimate_known = true;
    }
}

/// The plan of a batch.
#[derive(Debug, Clone)]
pub struct Plan {
    pub settings: RunSettings,
    pub calls: Vec<CallPlan>,
    pub phases: Vec<Phase>,
    pub lanes: Arc<Vec<LaneSpec>>,
    pub warnings: Vec<Diagnostic>,
    /// Call id → position, made the first time a reference is resolved (a batch without
    /// references never pays for it). A built plan holds every call of its batch, so a
    /// call's position in `calls` is its `index` and an edge's `from` indexes `calls` directly.
    pub ids: std::sync::OnceLock<HashMap<String, usize>>,
    /// Calls settled before this batch that its calls may reference (see [`PlanOptions`]).
    pub external: Option<Arc<External>>,
    /// The backends read/write hazard edges name.
    pub backends: Vec<String>,
    /// What the batch was read as, and a model reply's token usage (for the run history).
    pub input_format: crate::model_formats::InputFormat,
    pub usage: Option<crate::model_formats::Usage>,
    /// The batch's `run_id`, and a model reply's own id: who names the run (see
    /// `face::app::run_ids`).
    pub run_id: Option<String>,
    pub reply_id: Option<String>,
    /// The idempotency key its caller gave a plan of one call (`mcp serve`: the client's
    /// `_meta.idempotencyKey`), sent upstream instead of the derived one.
    pub given_key: Option<String>,
    /// Its one call was sent before and cut off in flight (a gateway replica died mid-call, a
    /// task taken over): a write with a probe (`verify`) is settled by it before anything is
    /// sent again.
    pub cut_off_before: bool,
}

impl Plan {
    /// The position of the call named `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        let ids = self
            .ids
            .get_or_init(|| self.calls.iter().map(|c| (c.id.clone(), c.index)).collect());
        ids.get(id).copied()
    }

    /// Hold back every call of a tool `held` names (by its exported name: `tools.lock` does
    /// not pin its definition as it is now): answered `unknown_tool` with `why` of its tool,
    /// as for a tool that is not served, never dispatched; the other calls run.
    pub(crate) fn hold_back(
        &mut self,
        held: &std::collections::HashSet<String>,
        why: impl Fn(&str) -> String,
    ) {
        for c in &mut self.calls {
            let name = crate::manifest::export_name(&c.tool_name);
            if c.invalid.is_none() && held.contains(&name) {
                c.refuse(why(&name));
                c.tool = None;
            }
        }
    }
}

/// Latency assumed for a tool that declares neither `expected` nor `latency`.
pub(crate) const ASSUMED_LATENCY: Duration = Duration::from_millis(100);
