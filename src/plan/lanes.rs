//! The lanes a call stands in, in the fixed acquisition order (tenant, the batch's tenant
//! copy, turn, tool, the batch's tool copy, shared lanes by name, processes), and the
//! run-wide settings after the batch and the command line narrow the manifest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{LaneKey, LaneSpec, PlanOptions, RunSettings};
use crate::batch::{narrow, Batch, OnToolError};
use crate::error::Diagnostic;
use crate::manifest::{AutoLimit, Hazards, Manifest, Rate, Tool};

/// A lane table plans start from, indexed once: a stream plans each chunk, and the gateway
/// each call, against the same table, so a lane has the same index in every plan and one lane
/// store serves them all — and a table of many lanes (a whole server's tools) is not indexed
/// again for every call.
#[derive(Debug, Clone)]
pub struct LaneSeed(Arc<Seeded>);

#[derive(Debug)]
struct Seeded {
    specs: Arc<Vec<LaneSpec>>,
    ids: BTreeMap<LaneKey, usize>,
}

impl LaneSeed {
    pub fn new(specs: Vec<LaneSpec>) -> LaneSeed {
        let ids = (specs.iter().enumerate())
            .map(|(i, l)| (l.key.clone(), i))
            .collect();
        LaneSeed(Arc::new(Seeded {
            specs: Arc::new(specs),
            ids,
        }))
    }

    /// Its lanes, in table order.
    pub fn specs(&self) -> &[LaneSpec] {
        &self.0.specs
    }
}

/// The run's lanes, each once, indexed by the order they were first needed.
pub(super) struct LaneTable {
    /// The lanes it added to the seed's (all of them, with no seed).
    lanes: Vec<LaneSpec>,
    /// The table it started from, indexed: its lanes come first.
    seed: Option<LaneSeed>,
    /// The added lanes' indices.
    ids: BTreeMap<LaneKey, usize>,
    tenant: usize,
    batch_tenant: Option<usize>,
    turn: usize,
    /// Per tool (by position): its calls' lanes, made once and shared by every call.
    of_tool: Vec<Option<Arc<[usize]>>>,
}

impl LaneTable {
    /// The table for `settings`, starting from `seed` when given (a stream's fixed table).
    pub(super) fn new(
        manifest: &Manifest,
        batch: &Batch,
        settings: &RunSettings,
        turn: Option<u32>,
        seed: Option<&LaneSeed>,
    ) -> LaneTable {
        let mut t = LaneTable {
            lanes: Vec::new(),
            seed: seed.cloned(),
            ids: BTreeMap::new(),
            tenant: 0,
            batch_tenant: None,
            turn: 0,
            of_tool: Vec::new(),
        };
        let tenant = settings.tenant.clone();
        t.tenant = t.intern(
            LaneKey::Tenant(tenant.clone()),
            manifest.concurrency.per_tenant,
            None,
            None,
            None,
        );
        t.batch_tenant = batch
            .concurrency
            .per_tenant
            .filter(|b| manifest.concurrency.per_tenant.is_none_or(|m| *b < m))
            .map(|b| t.intern(LaneKey::BatchTenant(tenant), Some(b), None, None, None));
        t.turn = t.intern(LaneKey::Turn, turn, None, None, None);
        t
    }

    fn intern(
        &mut self,
        key: LaneKey,
        limit: Option<u32>,
        rate: Option<Rate>,
        burst: Option<u32>,
        auto: Option<AutoLimit>,
    ) -> usize {
        let seeded = self.seed.as_ref().and_then(|s| s.0.ids.get(&key));
        if let Some(&i) = seeded.or_else(|| self.ids.get(&key)) {
            return i;
        }
        let i = self.seed.as_ref().map_or(0, |s| s.0.specs.len()) + self.lanes.len();
        self.lanes.push(LaneSpec {
            name: key.display(),
            key: key.clone(),
            limit,
            auto,
            learned: None,
            rate,
            burst,
            borrowed: false,
        });
        self.ids.insert(key, i);
        i
    }

    /// Every lane, in index order: the seed's own table, shared, when no lane was added.
    pub(super) fn into_lanes(self) -> Arc<Vec<LaneSpec>> {
        match self.seed {
            Some(seed) if self.lanes.is_empty() => seed.0.specs.clone(),
            Some(seed) => Arc::new(seed.0.specs.iter().cloned().chain(self.lanes).collect()),
            None => Arc::new(self.lanes),
        }
    }

    /// The lanes of a call to tool `t`, in acquisition order.
    pub(super) fn of_tool(
        &mut self,
        manifest: &Manifest,
        batch: &Batch,
        opts: &PlanOptions,
        t: usize,
        warnings: &mut Vec<Diagnostic>,
    ) -> Arc<[usize]> {
        if let Some(Some(l)) = self.of_tool.get(t) {
            return l.clone();
        }
        let tool = &manifest.tools[t];
        let mut l = vec![self.tenant];
        l.extend(self.batch_tenant);
        l.push(self.turn);
        let per_tool = manifest.concurrency.per_tool.get(&tool.name).copied();
        let auto = manifest.concurrency.per_tool_auto.get(&tool.name).copied();
        l.push(self.intern(LaneKey::Tool(tool.name.clone()), per_tool, None, None, auto));
        if let Some(&b) = batch.concurrency.per_tool.get(&tool.name) {
            if per_tool.is_none_or(|m| b < m) {
                l.push(self.intern(
                    LaneKey::BatchTool(tool.name.clone()),
                    Some(b),
                    None,
                    None,
                    None,
                ));
            } else if per_tool.is_some_and(|m| b > m) {
                warnings.push(
                    Diagnostic::warning(format!(
                        "the batch asks for per_tool.{} = {b}, wider than the manifest's {}; clamped",
                        tool.name,
                        per_tool.unwrap_or(0)
                    ))
                    .in_file(&batch.file.name),
                );
            }
        }
        self.shared_and_processes(manifest, tool, opts, &mut l);
        let l: Arc<[usize]> = l.into();
        if self.of_tool.len() <= t {
            self.of_tool.resize(t + 1, None);
        }
        self.of_tool[t] = Some(l.clone());
        l
    }

    fn shared_and_processes(
        &mut self,
        manifest: &Manifest,
        tool: &Tool,
        opts: &PlanOptions,
        l: &mut Vec<usize>,
    ) {
        for name in &tool.lanes {
            if let Some(d) = manifest.lanes.get(name) {
                l.push(self.intern(
                    LaneKey::Shared(name.clone()),
                    d.concurrency,
                    d.rate,
                    d.burst,
                    d.auto,
                ));
            }
        }
        if let (true, Some(cap)) = (tool.kind.spawns_process(), opts.max_processes) {
            l.push(self.intern(LaneKey::Processes, Some(cap), None, None, None));
        }
    }
}

/// Every lane a batch of no settings of its own could use with `manifest` and `opts`: the
/// table a stream of JSON Lines calls (which carry no batch settings) plans every chunk with.
pub(crate) fn lane_table(manifest: &Manifest, opts: &PlanOptions) -> Vec<LaneSpec> {
    let batch = Batch::empty("<stream>");
    let mut warnings = Vec::new();
    let (settings, turn) = settings(manifest, &batch, opts, &mut warnings);
    let mut table = LaneTable::new(manifest, &batch, &settings, turn, None);
    for t in 0..manifest.tools.len() {
        table.of_tool(manifest, &batch, opts, t, &mut warnings);
    }
    Arc::unwrap_or_clone(table.into_lanes())
}

/// The run-wide settings and the turn lane's limit, after narrowing.
pub(super) fn settings(
    manifest: &Manifest,
    batch: &Batch,
    opts: &PlanOptions,
    warnings: &mut Vec<Diagnostic>,
) -> (RunSettings, Option<u32>) {
    let file = &batch.file.name;
    let tenant = opts
        .tenant
        .clone()
        .or_else(|| batch.tenant.clone())
        .unwrap_or_else(|| "default".into());
    let turn = narrow(
        manifest.concurrency.max_concurrent_tools,
        batch.concurrency.max_concurrent_tools,
        "max_concurrent_tools",
        warnings,
        file,
    );
    let turn = match (turn, opts.max_concurrent_tools) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(b) = batch.concurrency.per_tenant {
        narrow(
            manifest.concurrency.per_tenant,
            Some(b),
            "per_tenant",
            warnings,
            file,
        );
    }
    let settings = RunSettings {
        tenant,
        on_tool_error: opts
            .on_tool_error
            .or(batch.on_tool_error)
            .unwrap_or(OnToolError::Surface),
        run_deadline: min_opt(
            min_opt(manifest.deadline.run, batch.run_deadline),
            opts.deadline,
        ),
        tool_call_deadline: min_opt(manifest.deadline.tool_call, batch.tool_call_deadline),
        max_cost: opts.max_cost.or(batch.max_cost),
        max_calls: max_calls(manifest, batch, opts, warnings),
        hazards: hazards(manifest, batch, warnings),
    };
    (settings, turn)
}

/// `max_calls`: `--max-calls` in place of the manifest's, then the batch's if it is lower (a
/// batch asking for more is warned and kept to the cap).
fn max_calls(
    manifest: &Manifest,
    batch: &Batch,
    opts: &PlanOptions,
    warnings: &mut Vec<Diagnostic>,
) -> Option<u32> {
    let cap = opts.max_calls.or(manifest.budget.max_calls);
    match (cap, batch.max_calls) {
        (Some(c), Some(b)) if b > c => {
            warnings.push(
                Diagnostic::warning(format!(
                    "the batch asks for budget.max_calls = {b}, above the cap of {c}; kept {c}"
                ))
                .in_file(&batch.file.name)
                .hint("a batch can lower the call cap, never raise it"),
            );
            Some(c)
        }
        (c, b) => b.or(c),
    }
}

/// The manifest's `hazards`, made stricter (never looser) by the batch.
fn hazards(manifest: &Manifest, batch: &Batch, warnings: &mut Vec<Diagnostic>) -> Hazards {
    let m = manifest.concurrency.hazards;
    match batch.concurrency.hazards {
        Some(b) if b < m => {
            warnings.push(
                Diagnostic::warning(
                    "the batch asks for hazards = writes, looser than the manifest's backend; kept backend",
                )
                .in_file(&batch.file.name)
                .hint("a batch can make ordering stricter, never looser"),
            );
            m
        }
        Some(b) => b.max(m),
        None => m,
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
