//! What every face does before a run: load the manifest, read and plan the batch, start the
//! MCP sessions whose annotations decide a tool's effect, and open the lane store.

use std::path::Path;
use std::sync::Arc;

use super::options::RunOptions;
use super::print_warnings;
use crate::app::config;
use crate::batch::{Batch, Reading};
use crate::cli::LaneStoreChoice;
use crate::error::{Diagnostic, Error};
use crate::manifest::Manifest;
use crate::plan::{self, LaneSpec, Plan, PlanOptions};
use crate::run::{LaneStore, LocalLanes, MemoryLanes, RedisLanes};
use crate::tools::mcp::{self, McpHub};
use crate::tools::McpSpec;

/// Start the MCP sessions of `manifest` (if it has MCP tools or whole servers), learn its whole
/// servers' tools, and apply the annotations of the MCP tools `used` names (by manifest or
/// exported names; `None`: every MCP tool). The sessions are returned for the run to reuse.
pub(super) fn start_mcp(
    quiet: bool,
    manifest: &mut Manifest,
    used: Option<&[String]>,
    rt: &tokio::runtime::Runtime,
) -> Result<Option<Arc<McpHub>>, Error> {
    let Some(hub) = mcp::hub_for(manifest) else {
        return Ok(None);
    };
    learn_whole(quiet, manifest, &hub, rt);
    let mut tools: Vec<&crate::manifest::Tool> = match used {
        Some(names) => names.iter().filter_map(|n| manifest.tool(n)).collect(),
        None => manifest.tools.iter().collect(),
    };
    // A write's probe (`verify`) is asked about too: it must be a read.
    let writes: Vec<String> = (tools.iter().filter(|t| t.verify.is_some()))
        .map(|t| t.name.clone())
        .collect();
    let probes: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.verify.as_ref())
        .map(|v| v.tool.as_str())
        .collect();
    tools.extend(probes.into_iter().filter_map(|n| manifest.tool(n)));
    let mut used: Vec<String> = (tools.into_iter())
        .filter(|t| t.settings_of::<McpSpec>().is_some())
        .map(|t| t.name.clone())
        .collect();
    used.sort_unstable();
    used.dedup();
    let mut diags = rt.block_on(mcp::annotate(manifest, &hub, &used));
    // What `verify` could not know before the servers were asked.
    diags.extend(crate::manifest::verify_discovered(manifest, &writes));
    if diags.iter().any(Diagnostic::is_error) {
        rt.block_on(hub.shutdown());
        return Err(Error::Invalid(diags));
    }
    print_warnings(quiet, &diags);
    Ok(Some(hub))
}

/// Learn the tools of `manifest`'s whole servers (starting them on `hub`); what went wrong is
/// a warning on stderr. The whole servers that could not be asked.
pub(super) fn learn_whole(
    quiet: bool,
    manifest: &mut Manifest,
    hub: &McpHub,
    rt: &tokio::runtime::Runtime,
) -> Vec<String> {
    if manifest.whole_servers().next().is_none() {
        return Vec::new();
    }
    let (diags, silent) = rt.block_on(mcp::expand(manifest, hub));
    print_warnings(quiet, &diags);
    silent
}

/// The manifest and the batch, read and parsed; nothing started yet.
pub(super) struct Inputs {
    manifest: Manifest,
    batch: Batch,
    warnings: Vec<Diagnostic>,
    /// `tools.lock` beside the manifest, when there is one.
    lock: Option<crate::lock::InForce>,
}

/// Read and parse the manifest and the batch (see [`Inputs::plan`]).
pub(super) fn read_inputs(
    manifest: &Path,
    (batch_arg, stdin_terminal): (Option<&str>, bool),
    reading: Reading,
) -> Result<Inputs, Error> {
    let path = manifest;
    let manifest = Manifest::load(path, crate::tools::KINDS).map_err(Error::Invalid)?;
    let lock = super::lock::in_force(path, manifest.serve.pin)?;
    let file = config::read_batch(batch_arg, stdin_terminal)?;
    let (batch, warnings) = Batch::parse_with(file, reading).map_err(Error::Invalid)?;
    Ok(Inputs {
        manifest,
        batch,
        warnings,
        lock,
    })
}

impl Inputs {
    /// The run holds at most one call at a time: the manifest, the batch or `opts` caps
    /// `max_concurrent_tools` at 1 (the run's cap is the least of the three).
    pub(super) fn one_at_a_time(&self, opts: &PlanOptions) -> bool {
        [
            self.manifest.concurrency.max_concurrent_tools,
            self.batch.concurrency.max_concurrent_tools,
            opts.max_concurrent_tools,
        ]
        .contains(&Some(1))
    }

    /// Plan the batch, the MCP sessions whose annotations decide a tool's effect started
    /// first (see [`start_mcp`]).
    pub(super) fn plan(
        self,
        quiet: bool,
        opts: &PlanOptions,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(Manifest, Plan, Option<Arc<McpHub>>), Error> {
        let Inputs {
            mut manifest,
            batch,
            warnings,
            lock,
        } = self;
        let used: Vec<String> = batch.calls.iter().map(|c| c.tool.clone()).collect();
        let hub = start_mcp(quiet, &mut manifest, Some(&used), rt)?;
        let built = plan::build(&manifest, &batch, opts).map_err(Error::Invalid);
        let held = match (&built, lock) {
            (Ok(_), Some(locked)) => super::lock::held_in(&manifest, hub.clone(), &locked, rt),
            _ => Ok(Default::default()),
        };
        let plan = match built.and_then(|p| held.map(|h| (p, h))) {
            Ok((mut plan, held)) => {
                hold_back(&mut plan, &held);
                plan
            }
            Err(e) => {
                if let Some(hub) = &hub {
                    rt.block_on(hub.shutdown());
                }
                return Err(e);
            }
        };
        print_warnings(quiet, &warnings);
        Ok((manifest, plan, hub))
    }
}

/// Hold back every call of `plan` to a tool of `held` (`tools.lock` does not pin it as it is):
/// answered `unknown_tool` with the reason, never sent.
pub(super) fn hold_back(plan: &mut Plan, held: &std::collections::HashSet<String>) {
    plan.hold_back(held, |name| {
        format!("tool `{name}` is held back: its definition is not the one tools.lock pins\nhint: `flux-tools lock --check` says what changed; accept it with `flux-tools lock --update`")
    });
}

/// The served tools the lock in force for the manifest at `path` holds back (none without
/// one), its servers asked through `hub`: what a stream or a session of turns holds back
/// from its first call to its last.
pub(super) fn held_back(
    path: &Path,
    manifest: &Manifest,
    hub: Option<Arc<McpHub>>,
    rt: &tokio::runtime::Runtime,
) -> Result<std::collections::HashSet<String>, Error> {
    match super::lock::in_force(path, manifest.serve.pin)? {
        Some(locked) => super::lock::held_in(manifest, hub, &locked, rt),
        None => Ok(Default::default()),
    }
}

/// What an engine is opened on, built from the options: the manifest as the face prepared it
/// (its MCP annotations applied), its MCP hub, the lane table its runs plan with (the lanes a
/// parent run lends borrowed, `FLUX_TOOLS_LEASE`), the lane store opened for that table, and
/// the run id.
pub(super) struct Parts {
    pub manifest: Manifest,
    pub mcp: Option<Arc<McpHub>>,
    pub table: Vec<LaneSpec>,
    pub lanes: Arc<dyn LaneStore>,
    pub run_id: String,
}

impl Parts {
    /// The parts for lane table `table` (the manifest's, or a planned batch's), under a new
    /// run id.
    pub(super) fn build(
        opts: &RunOptions,
        (manifest, mcp): (Manifest, Option<Arc<McpHub>>),
        mut table: Vec<LaneSpec>,
        rt: &tokio::runtime::Runtime,
    ) -> Result<Parts, Error> {
        plan::lease::borrow(&mut table, &manifest, opts.lease.as_deref());
        let lanes = open_lanes(&opts.lane_store, &table, &manifest, rt)?;
        Ok(Parts {
            manifest,
            mcp,
            table,
            lanes,
            run_id: opts.run_id.clone().unwrap_or_else(crate::run::new_run_id),
        })
    }

    /// The parts of a run over the manifest's own lane table (a stream, `--turns`, the
    /// gateway).
    pub(super) fn of_manifest(
        opts: &RunOptions,
        manifest: Manifest,
        mcp: Option<Arc<McpHub>>,
        rt: &tokio::runtime::Runtime,
    ) -> Result<Parts, Error> {
        let table = plan::lane_table(&manifest, &opts.plan);
        Parts::build(opts, (manifest, mcp), table, rt)
    }
}

/// The lane store `--lane-store` names, for `lanes`.
pub(super) fn open_lanes(
    choice: &LaneStoreChoice,
    lanes: &[LaneSpec],
    manifest: &Manifest,
    rt: &tokio::runtime::Runtime,
) -> Result<Arc<dyn LaneStore>, Error> {
    Ok(match choice {
        LaneStoreChoice::Memory => Arc::new(MemoryLanes::new(lanes)),
        LaneStoreChoice::Local => Arc::new(
            LocalLanes::new(lanes, &manifest.path).map_err(|e| Error::Usage(e.to_string()))?,
        ),
        LaneStoreChoice::Redis(url) => Arc::new(
            rt.block_on(RedisLanes::connect(
                url,
                lanes,
                &manifest.path.display().to_string(),
            ))
            .map_err(|e| Error::Usage(e.to_string()))?,
        ),
    })
}
