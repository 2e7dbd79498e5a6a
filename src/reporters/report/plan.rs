//! Rendering a plan: `table` (per phase, with edges and estimates), `json`, `dot` and
//! `mermaid`. Pure string building from a [`Plan`] and its [`Estimate`].

use std::fmt::Write as _;

use serde::Serialize;
use std::io::Write as _;

use crate::duration::{format, millis};
use crate::manifest::Manifest;
use crate::plan::{EdgeReason, Estimate, Plan};

fn reason_str(r: EdgeReason) -> &'static str {
    match r {
        EdgeReason::Reference => "reference",
        EdgeReason::After => "after",
        EdgeReason::WriteChain => "write chain",
        EdgeReason::ReadThenWrite => "read→write",
        EdgeReason::WriteThenRead => "write→read",
        EdgeReason::WriteThenWrite => "write→write",
    }
}

/// An edge's reason as shown: `reference`, `write chain`, `read→write on orders-db`.
fn edge_label(plan: &Plan, e: &crate::plan::Edge) -> String {
    match backend_of(plan, e) {
        Some(b) => format!("{} on {b}", reason_str(e.reason)),
        None => reason_str(e.reason).to_string(),
    }
}

fn backend_of<'p>(plan: &'p Plan, e: &crate::plan::Edge) -> Option<&'p str> {
    e.backend
        .and_then(|b| plan.backends.get(b as usize))
        .map(String::as_str)
}

fn id_of(plan: &Plan, index: usize) -> &str {
    plan.calls.get(index).map_or("?", |c| c.id.as_str())
}

/// Waves of each phase: calls grouped by dependency depth.
fn waves(plan: &Plan, est: &Estimate) -> Vec<Vec<Vec<String>>> {
    let mut out: Vec<Vec<Vec<String>>> = vec![Vec::new(); plan.phases.len()];
    for (p, c) in plan.calls.iter().enumerate() {
        let phase = &mut out[c.phase];
        let w = est.wave[p];
        if phase.len() <= w {
            phase.resize(w + 1, Vec::new());
        }
        phase[w].push(c.id.clone());
    }
    out
}

#[derive(Serialize)]
struct PhaseView<'a> {
    phase: usize,
    alone: bool,
    calls: Vec<&'a str>,
    waves: Vec<Vec<&'a str>>,
}

#[derive(Serialize)]
struct EdgeView<'a> {
    from: &'a str,
    reason: EdgeReason,
    /// The shared backend, for a read/write hazard.
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<&'a str>,
}

#[derive(Serialize)]
struct CallView<'a> {
    index: usize,
    id: &'a str,
    tool: &'a str,
    phase: usize,
    own_phase: bool,
    wave: usize,
    /// Null for an invalid call (one whose tool is not in the manifest).
    effect: Option<crate::manifest::Effect>,
    effect_from: Option<crate::manifest::Origin>,
    idempotent: Option<bool>,
    idempotent_from: Option<crate::manifest::Origin>,
    /// Why the call cannot be made (a model's reply): it is answered `invalid_call`.
    #[serde(skip_serializing_if = "Option::is_none")]
    invalid: Option<&'a str>,
    weight: u32,
    lanes: Vec<&'a str>,
    edges: Vec<EdgeView<'a>>,
    est_start_ms: u64,
    est_end_ms: u64,
    estimate_assumed: bool,
    cost: f64,
    /// The read cache holds its result now: `run` would answer it without invoking anything.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cached: bool,
}

#[derive(Serialize)]
struct LaneView<'a> {
    name: &'a str,
    limit: Option<u32>,
    /// A learned lane's bounds (`concurrency = "auto"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    auto: Option<crate::manifest::AutoLimit>,
    /// A learned lane's last limit in the history.
    #[serde(skip_serializing_if = "Option::is_none")]
    learned: Option<u32>,
    rate: Option<String>,
    burst: Option<u32>,
}

#[derive(Serialize)]
struct PlanView<'a> {
    tenant: &'a str,
    on_tool_error: crate::batch::OnToolError,
    /// How reads and writes on a shared backend are ordered (`backend` or `writes`).
    hazards: crate::manifest::Hazards,
    /// Per tool the plan calls: the backends it reads and writes, and where they came from.
    tools: std::collections::BTreeMap<&'a str, ToolView<'a>>,
    phases: Vec<PhaseView<'a>>,
    calls: Vec<CallView<'a>>,
    lanes: Vec<LaneView<'a>>,
    width: usize,
    critical_path: Vec<&'a str>,
    critical_path_ms: u64,
    total_tool_ms: u64,
    makespan_ms: u64,
    cost: f64,
    warnings: Vec<&'a str>,
}

#[derive(Serialize)]
struct ToolView<'a> {
    backends: &'a [String],
    backends_from: crate::manifest::BackendOrigin,
}

/// Write the plan as JSON, streaming (a 100,000-call plan is never built as a JSON tree).
/// The plan as JSON; `cached[p]`: call `p` would be a cache hit now.
pub(crate) fn write_json(
    w: &mut dyn std::io::Write,
    plan: &Plan,
    est: &Estimate,
    manifest: &Manifest,
    cached: &[bool],
    pretty: bool,
) -> std::io::Result<()> {
    let phases = phase_views(plan, est);
    let tools = tool_views(plan, manifest);
    let view = PlanView {
        tenant: &plan.settings.tenant,
        on_tool_error: plan.settings.on_tool_error,
        hazards: plan.settings.hazards,
        tools,
        phases,
        calls: plan
            .calls
            .iter()
            .enumerate()
            .map(|(p, _)| call_view(plan, est, manifest, cached, p))
            .collect(),
        lanes: plan
            .lanes
            .iter()
            .map(|l| LaneView {
                name: &l.name,
                limit: l.limit,
                auto: l.auto,
                learned: l.learned,
                rate: l.rate.map(|r| r.to_string()),
                burst: l.burst,
            })
            .collect(),
        width: est.width,
        critical_path: est
            .critical_path
            .iter()
            .map(|&p| plan.calls[p].id.as_str())
            .collect(),
        critical_path_ms: millis(est.critical_path_time),
        total_tool_ms: millis(est.total_tool_time),
        makespan_ms: millis(est.makespan),
        cost: est.cost,
        warnings: plan.warnings.iter().map(|w| w.message.as_str()).collect(),
    };
    let mut buf = std::io::BufWriter::with_capacity(1 << 16, w);
    if pretty {
        serde_json::to_writer_pretty(&mut buf, &view)?;
    } else {
        serde_json::to_writer(&mut buf, &view)?;
    }
    buf.write_all(b"\n")?;
    buf.flush()
}

/// Call `p` as the plan's JSON shows it.
fn call_view<'a>(
    plan: &'a Plan,
    est: &Estimate,
    manifest: &'a Manifest,
    cached: &[bool],
    p: usize,
) -> CallView<'a> {
    let c = &plan.calls[p];
    let tool = c.tool.map(|t| &manifest.tools[t]);
    CallView {
        index: c.index,
        id: &c.id,
        tool: &c.tool_name,
        phase: c.phase,
        own_phase: plan.phases[c.phase].alone,
        wave: est.wave[p],
        effect: tool.map(|t| t.effect),
        effect_from: tool.map(|t| t.effect_origin),
        idempotent: tool.map(|t| t.idempotent),
        idempotent_from: tool.map(|t| t.idempotent_origin),
        invalid: c.invalid.as_deref(),
        weight: c.weight,
        lanes: c
            .lanes
            .iter()
            .map(|&l| plan.lanes[l].name.as_str())
            .collect(),
        edges: c
            .edges
            .iter()
            .map(|e| EdgeView {
                from: id_of(plan, e.from),
                reason: e.reason,
                backend: backend_of(plan, e),
            })
            .collect(),
        est_start_ms: millis(est.start[p]),
        est_end_ms: millis(est.end[p]),
        estimate_assumed: !c.estimate_known,
        cost: c.cost,
        cached: cached.get(p).copied().unwrap_or(false),
    }
}

/// Each phase's calls and the waves they run in.
fn phase_views<'a>(plan: &'a Plan, est: &Estimate) -> Vec<PhaseView<'a>> {
    let mut phases: Vec<PhaseView<'_>> = plan
        .phases
        .iter()
        .enumerate()
        .map(|(i, ph)| PhaseView {
            phase: i,
            alone: ph.alone,
            calls: Vec::new(),
            waves: Vec::new(),
        })
        .collect();
    for (p, c) in plan.calls.iter().enumerate() {
        let ph = &mut phases[c.phase];
        ph.calls.push(&c.id);
        let w = est.wave[p];
        if ph.waves.len() <= w {
            ph.waves.resize_with(w + 1, Vec::new);
        }
        ph.waves[w].push(&c.id);
    }
    phases
}

/// The backends of each tool the plan's calls use, by name.
fn tool_views<'a>(
    plan: &Plan,
    manifest: &'a Manifest,
) -> std::collections::BTreeMap<&'a str, ToolView<'a>> {
    plan.calls
        .iter()
        .filter_map(|c| c.tool)
        .collect::<std::collections::BTreeSet<usize>>()
        .into_iter()
        .map(|t| {
            let tool = &manifest.tools[t];
            let view = ToolView {
                backends: &tool.backends,
                backends_from: tool.backends_origin,
            };
            (tool.name.as_str(), view)
        })
        .collect()
}

/// The plan as a table per phase; a call the read cache would answer now is marked.
pub(crate) fn to_table(plan: &Plan, est: &Estimate, cached: &[bool]) -> String {
    let mut out = String::new();
    let waves = waves(plan, est);
    for (i, ph) in plan.phases.iter().enumerate() {
        let what = if ph.alone {
            " — alone (parallel_safe = false)"
        } else {
            ""
        };
        let _ = writeln!(out, "phase {i}{what}: {} wave(s)", waves[i].len());
        let mut rows = Vec::new();
        for (p, c) in plan.calls.iter().enumerate().filter(|(_, c)| c.phase == i) {
            let edges: Vec<String> = c
                .edges
                .iter()
                .map(|e| format!("{} ({})", id_of(plan, e.from), edge_label(plan, e)))
                .collect();
            let lanes: Vec<String> = c
                .lanes
                .iter()
                .map(|&l| {
                    let lane = &plan.lanes[l];
                    match (lane.auto, lane.learned, lane.limit) {
                        (Some(_), Some(n), _) => format!("{} (auto, learned {n})", lane.name),
                        (Some(a), None, _) => format!("{} (auto, from {})", lane.name, a.start),
                        (None, _, Some(n)) => format!("{} ({n})", lane.name),
                        (None, _, None) => lane.name.clone(),
                    }
                })
                .collect();
            let assumed = if c.estimate_known { "" } else { " ?" };
            rows.push(vec![
                c.index.to_string(),
                c.id.clone(),
                match (c.invalid.is_some(), cached.get(p).copied().unwrap_or(false)) {
                    (true, _) => format!("{} (never dispatched)", c.tool_name),
                    (false, true) => format!("{} (cached)", c.tool_name),
                    (false, false) => c.tool_name.clone(),
                },
                lanes.join(", "),
                if edges.is_empty() {
                    "—".into()
                } else {
                    edges.join(", ")
                },
                format!("{} → {}{assumed}", format(est.start[p]), format(est.end[p])),
            ]);
        }
        let header = ["#", "id", "tool", "lanes", "waits for", "est. start → end"];
        let t = super::term::table(&header, &rows, &["lanes"]);
        let _ = writeln!(out, "{t}");
    }
    for c in plan.calls.iter().filter(|c| c.invalid.is_some()) {
        let why = c
            .invalid
            .as_deref()
            .and_then(|w| w.lines().next())
            .unwrap_or("");
        let why = if why.is_empty() {
            "the call names no tool"
        } else {
            why
        };
        let kind = c.refusal_kind().as_str();
        let _ = writeln!(out, "never dispatched: {} ({kind}): {why}", c.id);
    }
    let path: Vec<&str> = est
        .critical_path
        .iter()
        .map(|&p| plan.calls[p].id.as_str())
        .collect();
    let _ = writeln!(out, "width:              {}", est.width);
    let _ = writeln!(
        out,
        "critical path:      {} ({})",
        path.join(" → "),
        format(est.critical_path_time)
    );
    let _ = writeln!(out, "total tool time:    {}", format(est.total_tool_time));
    let _ = writeln!(out, "estimated makespan: {}", format(est.makespan));
    if est.cost > 0.0 {
        let _ = writeln!(
            out,
            "estimated cost:     {}",
            crate::events::trim_float(est.cost)
        );
    }
    if plan.calls.iter().any(|c| !c.estimate_known) {
        let _ = writeln!(
            out,
            "(? = no `expected` latency declared; assumed {})",
            format(crate::plan::ASSUMED_LATENCY)
        );
    }
    out
}

fn dot_id(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

pub(crate) fn to_dot(plan: &Plan, est: &Estimate) -> String {
    let mut out = String::from("digraph plan {\n  rankdir=LR;\n  node [shape=box];\n");
    let on_path = |a: usize, b: usize| est.critical_path.windows(2).any(|w| w[0] == a && w[1] == b);
    for (i, ph) in plan.phases.iter().enumerate() {
        let label = if ph.alone {
            format!("phase {i} (alone)")
        } else {
            format!("phase {i}")
        };
        let _ = writeln!(
            out,
            "  subgraph cluster_{i} {{\n    label={};",
            dot_id(&label)
        );
        for c in plan.calls.iter().filter(|c| c.phase == i) {
            let _ = writeln!(
                out,
                "    {} [label={}];",
                dot_id(&c.id),
                dot_id(&format!("{}\\n{}", c.id, c.tool_name))
            );
        }
        out.push_str("  }\n");
    }
    let pos: std::collections::HashMap<usize, usize> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(p, c)| (c.index, p))
        .collect();
    for (p, c) in plan.calls.iter().enumerate() {
        for e in &c.edges {
            let bold = pos.get(&e.from).is_some_and(|&f| on_path(f, p));
            let style = if bold { ", penwidth=2" } else { "" };
            let _ = writeln!(
                out,
                "  {} -> {} [label={}{style}];",
                dot_id(id_of(plan, e.from)),
                dot_id(&c.id),
                dot_id(&edge_label(plan, e))
            );
        }
    }
    out.push_str("}\n");
    out
}

fn mermaid_id(p: usize) -> String {
    format!("n{p}")
}

pub(crate) fn to_mermaid(plan: &Plan) -> String {
    let mut out = String::from("flowchart LR\n");
    let pos: std::collections::HashMap<usize, usize> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(p, c)| (c.index, p))
        .collect();
    for (i, ph) in plan.phases.iter().enumerate() {
        let label = if ph.alone {
            format!("phase {i} (alone)")
        } else {
            format!("phase {i}")
        };
        let _ = writeln!(out, "  subgraph phase{i} [\"{label}\"]");
        for (p, c) in plan.calls.iter().enumerate().filter(|(_, c)| c.phase == i) {
            let text = format!("{}<br/>{}", c.id, c.tool_name).replace('"', "#quot;");
            let _ = writeln!(out, "    {}[\"{text}\"]", mermaid_id(p));
        }
        out.push_str("  end\n");
    }
    for (p, c) in plan.calls.iter().enumerate() {
        for e in &c.edges {
            if let Some(&f) = pos.get(&e.from) {
                let _ = writeln!(
                    out,
                    "  {} -->|{}| {}",
                    mermaid_id(f),
                    edge_label(plan, e),
                    mermaid_id(p)
                );
            }
        }
    }
    out
}
