//! `flux-tools plan`, and what it shares with `run`: loading the manifest, reading and
//! planning the batch, and starting the MCP sessions whose annotations decide a tool's effect.

use std::io::IsTerminal;
use std::sync::Arc;

use super::{load_manifest, print_warnings, stdout_write};
use crate::batch::{Batch, Reading};
use crate::cli::{Args, LaneStoreChoice, PlanArgs, PlanFormat};
use crate::config;
use crate::error::{self, Diagnostic, Error};
use crate::manifest::Manifest;
use crate::plan::{self, Plan, PlanOptions};
use crate::report;
use crate::run::cache;
use crate::tools::mcp::{self, McpHub};
use crate::tools::ToolKind;

/// Start the MCP sessions of `manifest` (if it has MCP tools) and apply the annotations of the
/// tools named in `used`. The sessions are returned for the run to reuse.
pub(super) fn start_mcp(
    args: &Args,
    manifest: &mut Manifest,
    used: &[String],
    rt: &tokio::runtime::Runtime,
) -> Result<Option<Arc<McpHub>>, Error> {
    let has_mcp = manifest
        .tools
        .iter()
        .any(|t| matches!(t.kind, ToolKind::Mcp(_)));
    if !has_mcp {
        return Ok(None);
    }
    let hub = McpHub::new(&manifest.mcp_servers);
    let diags = rt.block_on(mcp::annotate(manifest, &hub, used));
    if diags.iter().any(Diagnostic::is_error) {
        rt.block_on(hub.shutdown());
        return Err(Error::Invalid(diags));
    }
    print_warnings(args, &diags);
    Ok(Some(hub))
}

/// Load the manifest and batch and plan them (MCP sessions started first, see [`start_mcp`]).
pub(super) fn load_plan(
    args: &Args,
    batch_arg: Option<&str>,
    opts: &PlanOptions,
    reading: Reading,
    rt: &tokio::runtime::Runtime,
) -> Result<(Manifest, Plan, Option<Arc<McpHub>>), Error> {
    let mut manifest = load_manifest(args)?;
    let file = config::read_batch(batch_arg)?;
    let (batch, warnings) = Batch::parse_with(file, reading).map_err(Error::Invalid)?;
    // By the manifest's names (a model may call a tool by its exported name).
    let used: Vec<String> = batch
        .calls
        .iter()
        .map(|c| {
            manifest
                .tool(&c.tool)
                .map_or_else(|| c.tool.clone(), |t| t.name.clone())
        })
        .collect();
    let hub = start_mcp(args, &mut manifest, &used, rt)?;
    let plan = match plan::build(&manifest, &batch, opts) {
        Ok(p) => p,
        Err(d) => {
            if let Some(hub) = &hub {
                rt.block_on(hub.shutdown());
            }
            return Err(Error::Invalid(d));
        }
    };
    print_warnings(args, &warnings);
    Ok((manifest, plan, hub))
}

pub(super) fn plan(args: &Args, p: &PlanArgs) -> Result<u8, Error> {
    let opts = PlanOptions {
        tenant: p.tenant.clone(),
        max_concurrent_tools: p.max_concurrent_tools,
        ..Default::default()
    };
    let rt = super::runtime()?;
    let reading = super::run::reading(p.input_format, p.literal);
    let (manifest, plan, hub) = load_plan(args, p.batch.as_deref(), &opts, reading, &rt)?;
    if let Some(hub) = hub {
        rt.block_on(hub.shutdown());
    }
    let cached = cache_hits(&manifest, &plan, &p.lane_store, &rt)?;
    print_warnings(args, &plan.warnings);
    let est = plan::simulate(&plan);
    let format = p.format.unwrap_or(if std::io::stdout().is_terminal() {
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
    let lanes = super::run::open_lanes(store, &plan.lanes, manifest, rt)?;
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
        let key = cache::key(
            &plan.settings.tenant,
            &c.tool_name,
            &tool.kind.target(),
            &args,
        );
        let backends: std::sync::Arc<[String]> = tool.backends.clone().into();
        hits[p] = rt.block_on(cache.peek(key, backends)).is_some();
    }
    Ok(hits)
}
