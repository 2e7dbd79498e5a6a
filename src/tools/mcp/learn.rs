//! What the manifest learns from a server: its tools' annotations settle their effects, and a
//! whole server's tools become tools of the manifest.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{McpHub, McpSpec, Op};
use crate::error::Diagnostic;
use crate::manifest::{
    Approval, BackendOrigin, Effect, Manifest, McpServer, Origin, Tool, Whole, WholeCache,
};

/// Fill in the `effect` and `idempotent` of MCP tools (those the batch uses, and only where the
/// manifest is silent) from their servers' annotations, and check that each remote tool exists.
pub(crate) async fn annotate(manifest: &mut Manifest, hub: &McpHub, used: &[String]) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let file = manifest.file.clone();
    for tool in manifest.tools.iter_mut() {
        let Some(spec) = tool.kind.as_any().downcast_ref::<McpSpec>() else {
            continue;
        };
        // A whole server's reader reads resources: there is no tool of the server to ask for.
        if spec.op != Op::CallTool || !used.iter().any(|u| u == &tool.name) {
            continue;
        }
        let loc = Some(file.location(tool.span.start, tool.span.end));
        let tools = match hub.tools(&spec.server).await {
            Ok(t) => t,
            Err(e) => {
                diags.push(
                    Diagnostic::error(e)
                        .at(loc)
                        .hint("check [mcp_servers] and that the server runs by hand"),
                );
                continue;
            }
        };
        let Some(remote) = tools.iter().find(|t| t["name"] == spec.tool.as_str()) else {
            let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
            diags.push(
                Diagnostic::error(format!(
                    "tool `{}`: MCP server `{}` has no tool `{}`",
                    tool.name, spec.server, spec.tool
                ))
                .at(loc)
                .maybe_hint(
                    crate::error::suggest(&spec.tool, names.iter().copied())
                        .or_else(|| Some(format!("it has: {}", names.join(", ")))),
                ),
            );
            continue;
        };
        let hints = &remote["annotations"];
        let read_only = hints["readOnlyHint"].as_bool();
        if tool.effect_origin == Origin::Default {
            if let Some(ro) = read_only {
                tool.effect = if ro { Effect::Read } else { Effect::Write };
                tool.effect_origin = Origin::Annotation;
            }
        }
        if tool.idempotent_origin == Origin::Default {
            let idem = hints["idempotentHint"]
                .as_bool()
                .or(read_only.filter(|ro| *ro));
            tool.idempotent = idem.unwrap_or(tool.effect == Effect::Read);
            if idem.is_some() {
                tool.idempotent_origin = Origin::Annotation;
            }
        }
        if tool.effect_origin == Origin::Default {
            diags.push(
                Diagnostic::warning(format!("MCP tool `{}` declares no effect (no readOnlyHint, none in the manifest); it is treated as a write", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end))),
            );
        }
        // The manifest's reader leaves these to the server's answer (see `announces_effect`).
        if let Some(why) = tool
            .cache
            .and_then(|_| crate::manifest::cache_refusal(tool.effect, tool.idempotent, false))
        {
            diags.push(
                Diagnostic::error(format!("`cache` on tool `{}`: {why} (its server's annotations say so)", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end)))
                    .hint("only a read, idempotent tool's results can be reused; remove `cache`, or declare effect = \"read\" if the server is wrong"),
            );
        }
        if tool.effect == Effect::Write
            && !tool.idempotent
            && tool.effect_origin != Origin::Manifest
            && tool.verify.is_none()
        {
            diags.push(
                Diagnostic::warning(format!("write tool `{}` has no idempotency protection", tool.name))
                    .at(Some(file.location(tool.span.start, tool.span.end)))
                    .hint("a call cut off in flight is reported indeterminate and never retried; declare idempotent = true if the server dedupes by the _meta idempotency key"),
            );
        }
    }
    diags
}


/// The tools of whole server `decl`, learnt from its `tools/list` (`remote`): each one it
/// admits, named with its prefix, its effect from its annotations (`readOnlyHint` → a read;
/// otherwise a write, idempotent only when `idempotentHint` says so), its lanes, backend,
/// timeout, cost, approval and cache from the server's table. A tool a `[tools.*]` table
/// declares (the same server and remote tool) is left to that table.
pub(crate) fn discover(manifest: &Manifest, decl: &McpServer, remote: &[Value]) -> Vec<Tool> {
    let Some(whole) = &decl.whole else {
        return Vec::new();
    };
    let declared: Vec<&str> = (manifest.tools.iter())
        .filter(|t| t.discovered_from.is_none())
        .filter_map(|t| t.settings_of::<McpSpec>())
        .filter(|s| s.server == decl.name)
        .map(|s| s.tool.as_str())
        .collect();
    let mut tools: Vec<Tool> = remote
        .iter()
        .filter_map(|r| {
            let name = r["name"].as_str()?;
            let served = !declared.contains(&name) && whole.admits(name) && !needs_a_task(r);
            served.then(|| tool_of(decl, whole, r, name))
        })
        .collect();
    tools.extend(readers(decl, whole));
    tools
}

/// The unlisted tools the gateway reads the server's resources with: one a `cache` glob
/// (each caching what it matches for its time), and one for every other URI (cached for
/// `cache = "…"`, if given).
fn readers(decl: &McpServer, whole: &Whole) -> Vec<Tool> {
    let globs = match &whole.cache {
        WholeCache::Matching(list) => list.iter().map(|(_, d)| Some(*d)).collect(),
        _ => Vec::new(),
    };
    let rest = match &whole.cache {
        WholeCache::All(d) => Some(*d),
        _ => None,
    };
    (globs.into_iter().chain([rest]).enumerate())
        .map(|(i, cache)| {
            let mut t = tool_of(decl, whole, &json!({"annotations": {"readOnlyHint": true}}), "");
            t.name = reader_name(&decl.name, i, whole);
            t.kind = Arc::new(McpSpec {
                server: decl.name.clone(),
                tool: String::new(),
                op: Op::ReadResource,
            });
            t.description = None;
            (t.cost, t.cache, t.listed) = (0.0, cache, false);
            (t.requires_approval, t.approval) = (false, Approval::None);
            t
        })
        .collect()
}

/// The name of a whole server's reader `i` (the last: every URI no `cache` glob matches).
fn reader_name(server: &str, i: usize, whole: &Whole) -> String {
    let globs = match &whole.cache {
        WholeCache::Matching(list) => list.len(),
        _ => 0,
    };
    if i == globs {
        format!("{server}:resources/read")
    } else {
        format!("{server}:resources/read#{i}")
    }
}

/// The tool that reads resource `uri` (the server's own URI) of whole server `server`.
pub(crate) fn reader_for(manifest: &Manifest, server: &str, uri: &str) -> Option<usize> {
    let whole = manifest.mcp_servers.get(server)?.whole.as_ref()?;
    let i = match &whole.cache {
        WholeCache::Matching(list) => (list.iter())
            .position(|(g, _)| crate::glob::matches(g, uri))
            .unwrap_or(list.len()),
        _ => 0,
    };
    manifest.tool_position(&reader_name(server, i, whole))
}

/// One discovered tool.
fn tool_of(decl: &McpServer, whole: &Whole, remote: &Value, name: &str) -> Tool {
    let hints = &remote["annotations"];
    let read_hint = hints["readOnlyHint"].as_bool();
    let read = read_hint == Some(true);
    let idempotent_hint = hints["idempotentHint"].as_bool();
    let idempotent = read || idempotent_hint == Some(true);
    let annotated = |hint: Option<bool>| {
        if hint.is_some() {
            Origin::Annotation
        } else {
            Origin::Default
        }
    };
    let (backends, backends_origin) = if !whole.backends.is_empty() {
        (whole.backends.clone(), BackendOrigin::Manifest)
    } else if !whole.lanes.is_empty() {
        (whole.lanes.clone(), BackendOrigin::Lanes)
    } else {
        (vec![format!("mcp:{}", decl.name)], BackendOrigin::Kind)
    };
    // Approval is the server table's to say; a tool it lets through needs none.
    let destructive = hints["destructiveHint"].as_bool() == Some(true);
    let needs = whole.needs_approval(name, destructive);
    Tool {
        name: whole.name_of(name),
        kind: Arc::new(McpSpec {
            server: decl.name.clone(),
            tool: name.to_string(),
            op: Op::CallTool,
        }),
        description: remote["description"].as_str().map(str::to_string),
        effect: if read { Effect::Read } else { Effect::Write },
        effect_origin: annotated(read_hint),
        idempotent,
        idempotent_origin: annotated(idempotent_hint.or(read_hint.filter(|r| *r))),
        parallel_safe: true,
        concurrent_writes: false,
        timeout: whole.timeout.as_ref().map(|(d, _)| *d),
        timeout_text: whole.timeout.as_ref().map(|(_, s)| s.clone()),
        lanes: whole.lanes.clone(),
        backends,
        backends_origin,
        weight: 1,
        retries: 0,
        cost: whole.cost,
        expected: None,
        requires_approval: needs,
        approval: if needs { Approval::Required } else { Approval::None },
        cache: (read && idempotent).then(|| whole.cache_for(name)).flatten(),
        verify: None,
        args: None,
        span: whole.span.clone(),
        discovered_from: Some(decl.name.clone()),
        listed: true,
    }
}

/// Start every whole server of `manifest` (at once) and learn its tools into it (see
/// [`discover`]). A server that does not start, or a tool a model would know by another's
/// name, is a warning: those tools are not there.
pub(crate) async fn expand(manifest: &mut Manifest, hub: &McpHub) -> (Vec<Diagnostic>, Vec<String>) {
    let servers: Vec<McpServer> = manifest.whole_servers().map(|(s, _)| s.clone()).collect();
    let lists = futures_util::future::join_all(servers.iter().map(|s| hub.tools(&s.name))).await;
    let (mut diags, mut silent) = (Vec::new(), Vec::new());
    for (decl, list) in servers.iter().zip(lists) {
        match list {
            Ok(remote) => {
                for name in remote.iter().filter(|r| needs_a_task(r)).filter_map(|r| r["name"].as_str()) {
                    if decl.whole.as_ref().is_some_and(|w| w.admits(name)) {
                        diags.push(
                            Diagnostic::warning(format!("MCP server `{}`: tool `{name}` is not served: it must be called as a task (execution.taskSupport = \"required\"), and this gateway does not relay tasks to its servers", decl.name))
                                .hint(format!("add \"{name}\" to the server's `deny` to say so and silence this")),
                        );
                    }
                }
                let found = discover(manifest, decl, &remote);
                for clash in manifest.set_discovered(&decl.name, found) {
                    diags.push(Diagnostic::warning(clash));
                }
            }
            Err(e) => {
                silent.push(decl.name.clone());
                diags.push(
                    Diagnostic::warning(format!("{e}; none of its tools is served"))
                        .hint("check [mcp_servers] and that the server runs by hand"),
                );
            }
        }
    }
    (diags, silent)
}

/// Whether a server's tool can only be called as a task (MCP 2025-11-25 `execution`), which
/// this gateway does not ask its servers for: such a tool would always fail, so it is left out.
fn needs_a_task(remote: &Value) -> bool {
    remote["execution"]["taskSupport"] == "required"
}

/// Whether `manifest` needs MCP sessions: it has an MCP tool or serves a server whole.
pub(crate) fn needs_hub(manifest: &Manifest) -> bool {
    manifest.whole_servers().next().is_some()
        || (manifest.tools.iter()).any(|t| t.settings_of::<McpSpec>().is_some())
}

/// The hub of `manifest`'s MCP servers, when it needs one.
pub(crate) fn hub_for(manifest: &Manifest) -> Option<Arc<McpHub>> {
    needs_hub(manifest).then(|| McpHub::new(&manifest.mcp_servers))
}
