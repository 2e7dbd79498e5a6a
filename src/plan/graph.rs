//! Building a [`Plan`]: validate a batch against the manifest (every problem, located), split
//! it into phases, derive each call's edges and lanes.
//!
//! Phases: consecutive `parallel_safe` calls share one; a call to a `parallel_safe = false`
//! tool is a phase alone. Edges inside a phase: references and `after` (must succeed) and the
//! write chain (the previous write must have resolved). Lanes are listed in the fixed
//! acquisition order: tenant, the batch's tenant copy, turn, tool, the batch's tool copy,
//! then shared lanes by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::batch::{narrow, Batch, OnToolError};
use crate::error::{suggest, Diagnostic};
use crate::manifest::{Manifest, Rate};
use crate::reference::Args;
use crate::schema::ProblemKind;

/// What the command line adds to or overrides in a batch.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub tenant: Option<String>,
    pub max_concurrent_tools: Option<u32>,
    pub on_tool_error: Option<OnToolError>,
    pub deadline: Option<Duration>,
    pub max_cost: Option<f64>,
    /// Calls settled before this batch (earlier chunks of a stream) that references and
    /// `after` may name: their output, or `None` when they failed.
    pub external: Option<Arc<External>>,
    /// The most `command` calls in flight at once (the `processes` lane), from the machine's
    /// limits and `--max-processes`.
    pub max_processes: Option<u32>,
}

/// Outputs of calls outside the batch, by id (`None`: the call did not succeed).
pub type External = HashMap<String, Option<serde_json::Value>>;

/// Run-wide settings after narrowing.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub tenant: String,
    pub on_tool_error: OnToolError,
    pub run_deadline: Option<Duration>,
    pub tool_call_deadline: Option<Duration>,
    pub max_cost: Option<f64>,
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
}

impl EdgeReason {
    /// Whether the dependency must have succeeded (not merely resolved).
    pub fn needs_success(self) -> bool {
        !matches!(self, EdgeReason::WriteChain)
    }
}

/// `to` waits for `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub reason: EdgeReason,
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
    pub limit: Option<u32>,
    pub rate: Option<Rate>,
    pub burst: Option<u32>,
    /// Held for us by the run that started this one (`FLUX_TOOLS_LEASE`): the lane is this
    /// run's own copy, limited to what the parent holds, and never queues behind the parent.
    pub borrowed: bool,
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
    pub tool: usize,
    pub tool_name: String,
    pub phase: usize,
    pub edges: Vec<Edge>,
    /// Lane indices into [`Plan::lanes`], in acquisition order.
    pub lanes: Vec<usize>,
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
}

/// The plan of a batch.
#[derive(Debug, Clone)]
pub struct Plan {
    pub settings: RunSettings,
    pub calls: Vec<CallPlan>,
    pub phases: Vec<Phase>,
    pub lanes: Vec<LaneSpec>,
    pub warnings: Vec<Diagnostic>,
    /// Call id → position. A built plan holds every call of its batch, so a call's position
    /// in `calls` is its `index` and an edge's `from` indexes `calls` directly.
    pub ids: HashMap<String, usize>,
    /// Calls settled before this batch that its calls may reference (see [`PlanOptions`]).
    pub external: Option<Arc<External>>,
}

/// Latency assumed for a tool that declares neither `expected` nor `latency`.
pub const ASSUMED_LATENCY: Duration = Duration::from_millis(100);

/// Validate `batch` against `manifest` and plan it. `Err` holds every error (and warnings).
pub fn build(
    manifest: &Manifest,
    batch: &Batch,
    opts: &PlanOptions,
) -> Result<Plan, Vec<Diagnostic>> {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let file = batch.file.name.clone();
    let n = batch.calls.len();

    // Ids: unique.
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(n);
    for (i, c) in batch.calls.iter().enumerate() {
        if let Some(&first) = ids.get(c.id.as_str()) {
            diags.push(
                Diagnostic::error(format!(
                    "call id `{}` is used twice (calls #{} and #{})",
                    c.id,
                    first + 1,
                    i + 1
                ))
                .at(batch.locate(i, Some("id"), &c.id))
                .in_file(&file)
                .hint("give each call its own id"),
            );
        } else {
            ids.insert(&c.id, i);
        }
    }

    // Tools.
    let mut tool_of: Vec<Option<usize>> = Vec::with_capacity(n);
    for (i, c) in batch.calls.iter().enumerate() {
        let t = manifest.tool_index.get(&c.tool).copied();
        if t.is_none() {
            diags.push(
                Diagnostic::error(format!("call `{}` uses unknown tool `{}`", c.id, c.tool))
                    .at(batch.locate(i, Some("tool"), &c.tool))
                    .in_file(&file)
                    .maybe_hint(manifest.suggest_tool(&c.tool)),
            );
        }
        tool_of.push(t);
    }

    // Phases.
    let mut phase_of = vec![0usize; n];
    let mut phases: Vec<Phase> = Vec::new();
    for i in 0..n {
        let alone = tool_of[i].is_some_and(|t| !manifest.tools[t].parallel_safe);
        let extend = !alone && phases.last().is_some_and(|p| !p.alone);
        if extend {
            if let Some(p) = phases.last_mut() {
                p.end = i + 1;
            }
        } else {
            phases.push(Phase {
                start: i,
                end: i + 1,
                alone,
            });
        }
        phase_of[i] = phases.len() - 1;
    }

    // Edges from references and `after`.
    let mut edges: Vec<Vec<Edge>> = vec![Vec::new(); n];
    let mut external_deps: Vec<Vec<String>> = vec![Vec::new(); n];
    let is_external = |id: &str| opts.external.as_ref().is_some_and(|e| e.contains_key(id));
    for (i, c) in batch.calls.iter().enumerate() {
        let add = |from: usize, reason: EdgeReason, edges: &mut Vec<Vec<Edge>>| {
            if !edges[i].iter().any(|e| e.from == from) {
                edges[i].push(Edge { from, reason });
            }
        };
        for (hole, r) in c.args.refs() {
            let needle = r.to_string();
            match ids.get(r.target.as_str()) {
                None if is_external(&r.target) => external_deps[i].push(r.target.clone()),
                None => diags.push(
                    Diagnostic::error(format!(
                        "call `{}` argument `{}` references unknown call `{}` in `{needle}`",
                        c.id,
                        hole.arg_name(),
                        r.target
                    ))
                    .at(batch.locate(i, None, &needle))
                    .in_file(&file)
                    .maybe_hint(suggest(
                        &r.target,
                        batch.calls.iter().map(|c| c.id.as_str()),
                    )),
                ),
                Some(&j) if j == i => diags.push(
                    Diagnostic::error(format!(
                        "reference cycle: call `{}` references itself in argument `{}`",
                        c.id,
                        hole.arg_name()
                    ))
                    .at(batch.locate(i, None, &needle))
                    .in_file(&file),
                ),
                Some(&j) if phase_of[j] > phase_of[i] => diags.push(
                    Diagnostic::error(format!(
                        "call `{}` argument `{}` references `{}`, which runs in a later phase",
                        c.id,
                        hole.arg_name(),
                        r.target
                    ))
                    .at(batch.locate(i, None, &needle))
                    .in_file(&file)
                    .hint(later_phase_hint(&phases, phase_of[i], phase_of[j])),
                ),
                Some(&j) => add(j, EdgeReason::Reference, &mut edges),
            }
        }
        for a in &c.after {
            match ids.get(a.as_str()) {
                None if is_external(a) => external_deps[i].push(a.clone()),
                None => diags.push(
                    Diagnostic::error(format!("call `{}` is `after` unknown call `{a}`", c.id))
                        .at(batch.locate(i, Some("after"), a))
                        .in_file(&file)
                        .maybe_hint(suggest(a, batch.calls.iter().map(|c| c.id.as_str()))),
                ),
                Some(&j) if j == i => diags.push(
                    Diagnostic::error(format!("call `{}` is `after` itself", c.id))
                        .at(batch.locate(i, Some("after"), a))
                        .in_file(&file),
                ),
                Some(&j) if phase_of[j] > phase_of[i] => diags.push(
                    Diagnostic::error(format!(
                        "call `{}` is `after` `{a}`, which runs in a later phase",
                        c.id
                    ))
                    .at(batch.locate(i, Some("after"), a))
                    .in_file(&file)
                    .hint(later_phase_hint(&phases, phase_of[i], phase_of[j])),
                ),
                Some(&j) => add(j, EdgeReason::After, &mut edges),
            }
        }
    }

    // Cycles (only possible through forward edges inside a phase).
    for cycle in find_cycles(&edges) {
        let names: Vec<&str> = cycle.iter().map(|&i| batch.calls[i].id.as_str()).collect();
        let first = cycle[0];
        let next = cycle[1 % cycle.len()];
        let loc = batch
            .calls
            .get(first)
            .and_then(|c| {
                c.args
                    .refs()
                    .find(|(_, r)| r.target == batch.calls[next].id)
                    .map(|(_, r)| batch.locate(first, None, &r.to_string()))
                    .or_else(|| Some(batch.locate(first, Some("after"), &batch.calls[next].id)))
            })
            .flatten();
        diags.push(
            Diagnostic::error(format!("reference cycle: {} → {}", names.join(" → "), names[0]))
                .at(loc)
                .in_file(&file)
                .hint("each call in a cycle waits for another; remove one of the references or `after` entries"),
        );
    }

    // Write chain.
    let mut last_write: Option<usize> = None;
    for i in 0..n {
        let Some(t) = tool_of[i] else { continue };
        let tool = &manifest.tools[t];
        if i > 0 && phase_of[i] != phase_of[i - 1] {
            last_write = None;
        }
        if tool.is_write() {
            if let Some(w) = last_write {
                if !tool.concurrent_writes && !edges[i].iter().any(|e| e.from == w) {
                    edges[i].push(Edge {
                        from: w,
                        reason: EdgeReason::WriteChain,
                    });
                }
            }
            last_write = Some(i);
        }
    }

    // Settings and narrowing.
    let mut warnings: Vec<Diagnostic> = Vec::new();
    let tenant = opts
        .tenant
        .clone()
        .or_else(|| batch.tenant.clone())
        .unwrap_or_else(|| "default".into());
    let turn = narrow(
        manifest.concurrency.max_concurrent_tools,
        batch.concurrency.max_concurrent_tools,
        "max_concurrent_tools",
        &mut warnings,
        &file,
    );
    let turn = match (turn, opts.max_concurrent_tools) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let batch_tenant = batch.concurrency.per_tenant.map(|b| {
        narrow(
            manifest.concurrency.per_tenant,
            Some(b),
            "per_tenant",
            &mut warnings,
            &file,
        )
        .unwrap_or(b)
    });
    for t in batch.concurrency.per_tool.keys() {
        if manifest.tool(t).is_none() {
            diags.push(
                Diagnostic::error(format!(
                    "the batch's concurrency.per_tool limits `{t}`, which is not a tool"
                ))
                .in_file(&file)
                .maybe_hint(manifest.suggest_tool(t)),
            );
        }
    }
    let settings = RunSettings {
        tenant: tenant.clone(),
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
    };

    // Lanes.
    let mut lanes: Vec<LaneSpec> = Vec::new();
    let mut lane_ids: BTreeMap<LaneKey, usize> = BTreeMap::new();
    let mut lane =
        |key: LaneKey, limit: Option<u32>, rate: Option<Rate>, burst: Option<u32>| -> usize {
            *lane_ids.entry(key.clone()).or_insert_with(|| {
                lanes.push(LaneSpec {
                    name: key.display(),
                    key,
                    limit,
                    rate,
                    burst,
                    borrowed: false,
                });
                lanes.len() - 1
            })
        };
    let tenant_lane = lane(
        LaneKey::Tenant(tenant.clone()),
        manifest.concurrency.per_tenant,
        None,
        None,
    );
    let batch_tenant_lane = batch_tenant
        .filter(|b| manifest.concurrency.per_tenant.is_none_or(|m| *b < m))
        .map(|b| lane(LaneKey::BatchTenant(tenant.clone()), Some(b), None, None));
    let turn_lane = lane(LaneKey::Turn, turn, None, None);
    let mut tool_lanes: HashMap<usize, Vec<usize>> = HashMap::new();

    let mut calls: Vec<CallPlan> = Vec::with_capacity(n);
    for (i, c) in batch.calls.iter().enumerate() {
        let Some(t) = tool_of[i] else { continue };
        let tool = &manifest.tools[t];
        let lanes_of = tool_lanes.entry(t).or_insert_with(|| {
            let mut l = vec![tenant_lane];
            l.extend(batch_tenant_lane);
            l.push(turn_lane);
            let per_tool = manifest.concurrency.per_tool.get(&tool.name).copied();
            l.push(lane(LaneKey::Tool(tool.name.clone()), per_tool, None, None));
            if let Some(&b) = batch.concurrency.per_tool.get(&tool.name) {
                if per_tool.is_none_or(|m| b < m) {
                    l.push(lane(LaneKey::BatchTool(tool.name.clone()), Some(b), None, None));
                } else if per_tool.is_some_and(|m| b > m) {
                    warnings.push(
                        Diagnostic::warning(format!(
                            "the batch asks for per_tool.{} = {b}, wider than the manifest's {}; clamped",
                            tool.name,
                            per_tool.unwrap_or(0)
                        ))
                        .in_file(&file),
                    );
                }
            }
                        for name in &tool.lanes {
                if let Some(d) = manifest.lanes.get(name) {
                    l.push(lane(LaneKey::Shared(name.clone()), d.concurrency, d.rate, d.burst));
                }
            }
            if let (true, Some(cap)) = (tool.kind.spawns_process(), opts.max_processes) {
                l.push(lane(LaneKey::Processes, Some(cap), None, None));
            }
            l
        });
        let call_lanes = lanes_of.clone();

        // Guardrail on literal arguments.
        if let Some(schema) = &tool.args {
            let referenced = c.args.referenced_args();
            let mut literal = c.args.literal_without_holes();
            for r in &referenced {
                literal.remove(r);
            }
            let extra = tool.kind.reserved();
            for problem in schema.check(&literal, extra) {
                // A missing argument a reference will fill is checked once it is resolved.
                if problem.kind == ProblemKind::Missing && referenced.contains(&problem.arg) {
                    continue;
                }
                let arg = problem.arg.clone();
                diags.push(
                    Diagnostic::error(format!("call `{}` to `{}`: {problem}", c.id, tool.name))
                        .at(batch.locate(i, Some("args"), &arg))
                        .in_file(&file),
                );
            }
        }
        {
            for p in tool.kind.placeholders() {
                if !c.args.value.contains_key(p) {
                    diags.push(
                        Diagnostic::error(format!(
                            "call `{}` to `{}` gives no argument `{p}`, which the tool needs to be invoked",
                            c.id, tool.name
                        ))
                        .at(batch.locate(i, Some("tool"), &c.tool))
                        .in_file(&file),
                    );
                }
            }
        }
        calls.push(CallPlan {
            index: i,
            id: c.id.clone(),
            tool: t,
            tool_name: tool.name.clone(),
            phase: phase_of[i],
            edges: std::mem::take(&mut edges[i]),
            lanes: call_lanes,
            args: c.args.clone(),
            weight: tool.weight,
            write: tool.is_write(),
            idempotent: tool.idempotent,
            cost: tool.cost,
            estimate: estimate_of(tool),
            estimate_known: tool.estimate().is_some(),
            external_deps: std::mem::take(&mut external_deps[i]),
        });
    }

    // Weights against narrowed lanes.
    for c in &calls {
        for &l in &c.lanes {
            if let Some(lim) = lanes[l].limit {
                if c.weight > lim {
                    diags.push(
                        Diagnostic::error(format!(
                            "call `{}`: tool `{}` has weight {}, more than lane {} allows ({lim}): it could never run",
                            c.id, c.tool_name, c.weight, lanes[l].name
                        ))
                        .at(batch.locate(c.index, Some("tool"), &c.tool_name))
                        .in_file(&file),
                    );
                }
            }
        }
    }

    if diags.iter().any(Diagnostic::is_error) {
        diags.extend(warnings);
        return Err(diags);
    }

    // Fan-out wider than a lane.
    for (pi, p) in phases.iter().enumerate() {
        let mut per_lane: HashMap<usize, u64> = HashMap::new();
        for c in &calls[p.start..p.end] {
            for &l in &c.lanes {
                *per_lane.entry(l).or_default() += u64::from(c.weight);
            }
        }
        let mut wide: Vec<(usize, u64)> = per_lane
            .into_iter()
            .filter(|(l, w)| {
                lanes[*l].limit.is_some_and(|lim| *w > u64::from(lim))
                    && !matches!(lanes[*l].key, LaneKey::Turn)
            })
            .collect();
        wide.sort();
        for (l, w) in wide {
            warnings.push(
                Diagnostic::warning(format!(
                    "phase {pi} fans out {w} permits onto lane {} (limit {}): the rest queue",
                    lanes[l].name,
                    lanes[l].limit.unwrap_or(0)
                ))
                .in_file(&file),
            );
        }
    }
    warnings.extend(diags);
    debug_assert!(calls.iter().enumerate().all(|(p, c)| c.index == p));
    let ids = calls.iter().map(|c| (c.id.clone(), c.index)).collect();
    Ok(Plan {
        settings,
        calls,
        phases,
        lanes,
        warnings,
        ids,
        external: opts.external.clone(),
    })
}

fn estimate_of(tool: &crate::manifest::Tool) -> Duration {
    tool.estimate().unwrap_or(ASSUMED_LATENCY)
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn later_phase_hint(phases: &[Phase], mine: usize, theirs: usize) -> String {
    let why = if phases[theirs].alone {
        "its tool is parallel_safe = false, so it runs in a phase of its own after this one"
    } else if phases[mine].alone {
        "this call's tool is parallel_safe = false, so it runs alone before that phase"
    } else {
        "phases run in call order"
    };
    format!("{why}; move the referenced call before this one")
}

/// Every cycle in the dependency graph, each once (as call indices, in dependency order).
fn find_cycles(edges: &[Vec<Edge>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    // 0 = unvisited, 1 = on stack, 2 = done.
    let mut state = vec![0u8; n];
    let mut cycles = Vec::new();
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        let mut path: Vec<usize> = vec![root];
        state[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(e) = edges[node].get(*next) {
                *next += 1;
                let to = e.from;
                match state[to] {
                    0 => {
                        state[to] = 1;
                        stack.push((to, 0));
                        path.push(to);
                    }
                    1 => {
                        if let Some(pos) = path.iter().position(|&p| p == to) {
                            cycles.push(path[pos..].to_vec());
                        }
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                stack.pop();
                path.pop();
            }
        }
    }
    cycles
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::SourceFile;
    use std::path::PathBuf;

    pub const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8
per_tenant = 16
[concurrency.per_tool]
search = 4

[lanes.partner-api]
concurrency = 2
rate = "10/s"

[tools.search]
kind = "scripted"
effect = "read"
latency = "300ms"
lanes = ["partner-api"]
[tools."db.getCustomer"]
kind = "scripted"
effect = "read"
latency = "200ms"
[tools."db.getOrders"]
kind = "scripted"
effect = "read"
latency = "200ms"
output = { orders = [{ id = "o-17" }] }
[tools."api.createRefund"]
kind = "scripted"
effect = "write"
idempotent = true
latency = "500ms"
cost = 0.01
[tools."email.send"]
kind = "scripted"
effect = "write"
latency = "100ms"
[tools.booking]
kind = "scripted"
effect = "write"
parallel_safe = false
latency = "1s"
"#;

    pub fn manifest() -> Manifest {
        Manifest::parse(
            SourceFile::new("tools.toml", MANIFEST),
            PathBuf::from("/tmp/tools.toml"),
        )
        .unwrap()
    }

    pub fn plan_of(batch: &str) -> Result<Plan, Vec<Diagnostic>> {
        let (b, _) = Batch::parse(SourceFile::new("b.yaml", batch))?;
        build(&manifest(), &b, &PlanOptions::default())
    }

    pub const REFUND: &str = r#"
tenant: acme
calls:
  - id: search
    tool: search
    args: { q: refund }
  - id: customer
    tool: db.getCustomer
    args: { id: 42 }
  - id: orders
    tool: db.getOrders
    args: { customer: 42 }
  - id: refund
    tool: api.createRefund
    args: { order_id: "${orders.orders[0].id}" }
  - id: mail
    tool: email.send
    args: { customer: 42 }
    after: [refund]
"#;

    #[test]
    fn refund_turn_has_reads_then_a_write_chain() {
        let p = plan_of(REFUND).unwrap();
        assert_eq!(p.phases.len(), 1);
        assert!(p.calls[..3].iter().all(|c| c.edges.is_empty()));
        assert_eq!(
            p.calls[3].edges,
            vec![Edge {
                from: 2,
                reason: EdgeReason::Reference
            }]
        );
        // `after` and the write chain both point at the refund: one edge, the stronger reason.
        assert_eq!(
            p.calls[4].edges,
            vec![Edge {
                from: 3,
                reason: EdgeReason::After
            }]
        );
    }

    #[test]
    fn lanes_are_in_fixed_order() {
        let p = plan_of(REFUND).unwrap();
        let names: Vec<&str> = p.calls[0]
            .lanes
            .iter()
            .map(|&l| p.lanes[l].name.as_str())
            .collect();
        assert_eq!(
            names,
            ["tenant:acme", "turn", "tool:search", "lane:partner-api"]
        );
        assert_eq!(p.lanes[p.calls[0].lanes[2]].limit, Some(4));
        assert_eq!(p.lanes[p.calls[0].lanes[3]].rate.map(|r| r.count), Some(10));
    }

    #[test]
    fn non_parallel_safe_calls_get_their_own_phase() {
        let p =
            plan_of("- tool: search\n- tool: booking\n- tool: search\n- tool: search\n").unwrap();
        assert_eq!(
            p.phases,
            vec![
                Phase {
                    start: 0,
                    end: 1,
                    alone: false
                },
                Phase {
                    start: 1,
                    end: 2,
                    alone: true
                },
                Phase {
                    start: 2,
                    end: 4,
                    alone: false
                },
            ]
        );
        assert_eq!(p.calls[3].phase, 2);
    }

    #[test]
    fn write_chain_links_consecutive_writes_only_within_a_phase() {
        let p = plan_of(
            "- tool: email.send\n- tool: search\n- tool: email.send\n- tool: api.createRefund\n",
        )
        .unwrap();
        assert_eq!(
            p.calls[2].edges,
            vec![Edge {
                from: 0,
                reason: EdgeReason::WriteChain
            }]
        );
        assert_eq!(
            p.calls[3].edges,
            vec![Edge {
                from: 2,
                reason: EdgeReason::WriteChain
            }]
        );
        assert!(p.calls[1].edges.is_empty());
    }

    #[test]
    fn narrowing_is_clamped_with_a_warning() {
        let p = plan_of("concurrency: { max_concurrent_tools: 20, per_tool: { search: 2 } }\ncalls:\n  - tool: search\n").unwrap();
        let turn = p.lanes.iter().find(|l| l.key == LaneKey::Turn).unwrap();
        assert_eq!(turn.limit, Some(8));
        assert!(p
            .warnings
            .iter()
            .any(|w| w.message.contains("clamped to 8")));
        let names: Vec<&str> = p.calls[0]
            .lanes
            .iter()
            .map(|&l| p.lanes[l].name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "tenant:default",
                "turn",
                "tool:search",
                "tool:search (batch)",
                "lane:partner-api"
            ]
        );
        let p = plan_of("concurrency: { max_concurrent_tools: 3 }\ncalls:\n  - tool: search\n")
            .unwrap();
        assert_eq!(
            p.lanes
                .iter()
                .find(|l| l.key == LaneKey::Turn)
                .unwrap()
                .limit,
            Some(3)
        );
    }

    #[test]
    fn reports_unknown_tool_cycle_and_bad_reference_together() {
        let e = plan_of(
            "calls:\n  - id: a\n    tool: serch\n  - id: b\n    tool: search\n    args: { q: \"${c}\" }\n  - id: c\n    tool: search\n    args: { q: \"${b}\" }\n  - id: d\n    tool: search\n    args: { q: \"${nope.x}\" }\n",
        )
        .unwrap_err();
        let errors: Vec<&Diagnostic> = e.iter().filter(|d| d.is_error()).collect();
        assert_eq!(errors.len(), 3, "{e:#?}");
        assert!(errors[0].message.contains("unknown tool `serch`"));
        assert_eq!(errors[0].hint.as_deref(), Some("did you mean `search`?"));
        assert_eq!(
            (
                errors[0].location.as_ref().unwrap().line,
                errors[0].location.as_ref().unwrap().col
            ),
            (3, 11)
        );
        assert!(errors[1].message.contains("unknown call `nope`"));
        assert_eq!(errors[1].location.as_ref().unwrap().line, 12);
        assert!(
            errors[2].message.contains("reference cycle: b → c → b")
                || errors[2].message.contains("reference cycle: c → b → c"),
            "{}",
            errors[2].message
        );
        assert!(errors[2].location.is_some());
    }

    #[test]
    fn reference_into_a_later_phase_is_an_error() {
        let e =
            plan_of("- id: a\n  tool: search\n  args: { q: \"${b}\" }\n- id: b\n  tool: booking\n")
                .unwrap_err();
        assert!(e[0].message.contains("runs in a later phase"), "{e:?}");
        assert!(e[0]
            .hint
            .as_ref()
            .unwrap()
            .contains("parallel_safe = false"));
    }

    #[test]
    fn duplicate_ids_and_self_after_are_errors() {
        let e = plan_of("- id: a\n  tool: search\n- id: a\n  tool: search\n- id: b\n  tool: search\n  after: [b]\n").unwrap_err();
        assert!(e.iter().any(|d| d.message.contains("used twice")));
        assert!(e.iter().any(|d| d.message.contains("`after` itself")));
    }
}
