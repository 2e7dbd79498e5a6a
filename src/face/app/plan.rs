//! `flux-tools plan`: the batch planned (as `run` would, see [`super::prepare`]) and shown —
//! phases, edges, lanes, the simulated schedule, and the calls the read cache would answer.

use super::options::Terminal;
use super::prepare::{open_lanes, read_inputs};
use super::{print_warnings, stdout_write};
use crate::batch::Reading;
use crate::cli::{Args, LaneStoreChoice, PlanArgs, PlanFormat};
use crate::error::{self, Error};
use crate::manifest::Manifest;
use crate::plan::{self, Plan, PlanOptions};
use crate::report;
use crate::run::cache;

pub(super) fn plan(args: &Args, p: &PlanArgs, terminal: Terminal) -> Result<u8, Error> {
    let c = &p.common;
    let opts = PlanOptions {
        tenant: c.tenant.clone(),
        max_concurrent_tools: c.max_concurrent_tools,
        ..Default::default()
    };
    let rt = super::runtime()?;
    let reading = Reading {
        format: c.input_format.into(),
        literal: c.literal,
        id_offset: 0,
    };
    let batch = (c.batch.as_deref(), terminal.stdin);
    let path = crate::app::config::manifest_path(args.manifest.as_deref())?;
    let (manifest, mut plan, hub) =
        read_inputs(&path, batch, reading)?.plan(args.quiet, &opts, &rt)?;
    learned_from_history(&manifest, &mut plan);
    if let Some(hub) = hub {
        rt.block_on(hub.shutdown());
    }
    let cached = cache_hits(&manifest, &plan, &c.lane_store, &rt)?;
    print_warnings(args.quiet, &plan.warnings);
    let est = plan::simulate(&plan);
    let format = p.format.unwrap_or(if terminal.stdout {
        PlanFormat::Table
    } else {
        PlanFormat::Json
    });
    let text = match format {
        PlanFormat::Table => report::plan::to_table(&plan, &est, &cached),
        PlanFormat::Json | PlanFormat::Jsonl => {
            let mut out = std::io::stdout().lock();
            let pretty = format == PlanFormat::Json;
            report::plan::write_json(&mut out, &plan, &est, &manifest, &cached, pretty)
                .map_err(|e| Error::io("cannot write to stdout", e))?;
            return Ok(error::EXIT_OK);
        }
        PlanFormat::Dot => report::plan::to_dot(&plan, &est),
        PlanFormat::Mermaid => report::plan::to_mermaid(&plan),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

/// Each learned lane's last limit from the history (`[history] path`), which the plan is
/// simulated and shown with.
fn learned_from_history(manifest: &crate::manifest::Manifest, plan: &mut crate::plan::Plan) {
    let Some(path) = &manifest.history else {
        return;
    };
    if !plan.lanes.iter().any(|l| l.auto.is_some()) {
        return;
    }
    let learned = crate::reporters::history::learned_limits(path);
    for l in std::sync::Arc::make_mut(&mut plan.lanes) {
        if let Some(auto) = l.auto {
            l.learned = learned.get(&l.name).map(|n| (*n).clamp(auto.min, auto.max));
        }
    }
}

/// Which calls the read cache would answer now: those to a `cache` tool whose arguments are
/// known before the run (no references), that no earlier write of the batch on one of its
/// backends precedes, and whose entry in the lane store is fresh (no write on its backends
/// has resolved since it was stored).
fn cache_hits(
    manifest: &Manifest,
    plan: &Plan,
    store: &LaneStoreChoice,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<bool>, Error> {
    let cachable = |c: &crate::plan::CallPlan| {
        c.tool
            .filter(|&t| manifest.tools[t].cache.is_some())
            .filter(|_| c.args.refs().next().is_none())
    };
    if !plan.calls.iter().any(|c| cachable(c).is_some()) {
        return Ok(Vec::new());
    }
    let lanes = open_lanes(store, &plan.lanes, manifest, rt)?;
    let cache = cache::Cache::new(lanes.cache_store(), "plan", false);
    let mut written: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut hits = vec![false; plan.calls.len()];
    for (p, c) in plan.calls.iter().enumerate() {
        let Some(t) = c.tool else { continue };
        let tool = &manifest.tools[t];
        if tool.is_write() {
            written.extend(tool.backends.iter().map(String::as_str));
            continue;
        }
        if cachable(c).is_none() || tool.backends.iter().any(|b| written.contains(b.as_str())) {
            continue;
        }
        let Ok(args) = c.args.resolve(&|_| None) else {
            continue;
        };
        // A plan has no gateway caller: a read kept per caller is never predicted.
        let Some(owner) = crate::tools::mcp::owner(manifest, tool, &plan.settings.tenant, None)
        else {
            continue;
        };
        let key = cache::key(&owner, &c.tool_name, &tool.kind.target(), &args);
        let backends: std::sync::Arc<[String]> = tool.backends.clone().into();
        hits[p] = rt.block_on(cache.peek(key, backends)).is_some();
    }
    Ok(hits)
}
