//! `flux-tools tools`: the manifest's tools and their declarations; with `--emit`, the tools
//! as a model provider's request takes them.

use super::{load_manifest, stdout_write};
use crate::cli::{Args, ListFormat};
use crate::error::{self, Error};
use crate::manifest::Manifest;
use crate::report;
use crate::tools::mcp::McpHub;

pub(super) fn tools(args: &Args, format: Option<ListFormat>) -> Result<u8, Error> {
    let (m, _) = learnt(args, |_, _, _| Ok(()))?;
    // Marked: what `tools.lock` holds back (its definition changed since, or it is new).
    let held = super::lock::held(args)?;
    let text = match format {
        Some(ListFormat::Json | ListFormat::Jsonl) => {
            format!("{}\n", report::tools::to_json(&m, &held))
        }
        Some(ListFormat::Table) | None => report::tools::to_table(&m, &held),
    };
    stdout_write(text.as_bytes())?;
    Ok(error::EXIT_OK)
}

/// `tools --emit PROVIDER`: the (selected) tools as PROVIDER's request takes them. An MCP
/// tool's schema is its server's, so its server is asked.
pub(super) fn offer(
    args: &Args,
    emit: crate::report::emit::Emit,
    select: Option<&[String]>,
    strict: bool,
) -> Result<u8, Error> {
    let (m, remote) = learnt(args, |m, hub, rt| remote_schemas(m, select, hub, rt))?;
    let (mut offers, mut notes) =
        report::definitions::offers(&m, select, strict, &remote).map_err(Error::Usage)?;
    // What `tools.lock` holds back is not offered (as `mcp serve` does not list it).
    let held = super::lock::held(args)?;
    offers.retain(|o| {
        let keep = !held.contains(&o.name);
        if !keep {
            notes.push(format!("tool `{}` is held back: its definition is not the one tools.lock pins (`flux-tools lock --check` says how)", o.name));
        }
        keep
    });
    if !args.quiet {
        for n in notes {
            eprintln!("note: {n}");
        }
    }
    let doc = report::definitions::document(emit, &offers);
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    stdout_write(format!("{text}\n").as_bytes())?;
    Ok(error::EXIT_OK)
}

/// The manifest with its whole servers' tools learnt, and what `then` asks its MCP servers
/// (`T::default()` when it has none); every server started is stopped again.
fn learnt<T: Default>(
    args: &Args,
    then: impl FnOnce(&Manifest, &McpHub, &tokio::runtime::Runtime) -> Result<T, Error>,
) -> Result<(Manifest, T), Error> {
    let mut m = load_manifest(args)?;
    let Some(hub) = crate::tools::mcp::hub_for(&m) else {
        return Ok((m, T::default()));
    };
    let rt = super::runtime()?;
    let silent = super::prepare::learn_whole(args.quiet, &mut m, &hub, &rt);
    if let Some(server) = silent.first() {
        rt.block_on(hub.shutdown());
        // Its tools are what is asked for: a list without them would be a lie (why: above).
        return Err(Error::Usage(format!(
            "MCP server `{server}` is served whole, and its tools cannot be listed\nhint: check [mcp_servers.{server}] and that the server runs by hand"
        )));
    }
    let asked = then(&m, &hub, &rt);
    rt.block_on(hub.shutdown());
    Ok((m, asked?))
}

/// The input schemas of the (selected) MCP tools, as their servers list them.
fn remote_schemas(
    m: &Manifest,
    select: Option<&[String]>,
    hub: &McpHub,
    rt: &tokio::runtime::Runtime,
) -> Result<std::collections::HashMap<String, serde_json::Value>, Error> {
    use crate::tools::mcp::Op;
    use crate::tools::McpSpec;
    let wanted: Vec<&crate::manifest::Tool> = m
        .tools
        .iter()
        // A whole server's readers are no tools of the server (and never offered to a model).
        .filter(|t| t.listed)
        .filter(|t| {
            t.settings_of::<McpSpec>()
                .is_some_and(|s| s.op == Op::CallTool)
        })
        .filter(|t| {
            select.is_none_or(|s| {
                s.iter()
                    .any(|n| m.tool(n).is_some_and(|x| x.name == t.name))
            })
        })
        .collect();
    let mut out = std::collections::HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    let fetched = rt.block_on(async {
        let mut found = Vec::new();
        for t in &wanted {
            let Some(spec) = t.settings_of::<McpSpec>() else {
                continue;
            };
            let list = hub.tools(&spec.server).await?;
            let schema = list
                .iter()
                .find(|r| r["name"] == spec.tool.as_str())
                .map(|r| r["inputSchema"].clone())
                .ok_or_else(|| {
                    format!("MCP server `{}` has no tool `{}`", spec.server, spec.tool)
                })?;
            found.push((t.name.clone(), schema));
        }
        Ok::<_, String>(found)
    });
    out.extend(fetched.map_err(Error::Usage)?);
    Ok(out)
}
