//! What a client of the gateway is shown, for `tools.lock` (`flux-tools lock`): every served
//! tool as `tools/list` gives it, and every prompt and resource template of the servers served
//! whole, as a caller bound by no role sees them — the same code the gateway answers with, so
//! the lock pins what is served, not a copy of it.

use std::sync::Arc;

use super::caller::Caller;
use super::catalog::Catalog;
use super::passthrough;
use crate::lock::{Kind, Pin};
use crate::manifest::Manifest;
use crate::tools::mcp::McpHub;
use crate::tools::McpSpec;

/// The pins of everything `manifest` serves (its MCP servers through `hub`). A server that
/// does not start is an error: a lock without its tools would be a lie. Unless `quiet`, what
/// the gateway would warn of is said (a server's tool left out for a name already served).
pub(in crate::face::app) async fn shown(
    manifest: Manifest,
    hub: Option<Arc<McpHub>>,
    quiet: bool,
) -> Result<Vec<Pin>, String> {
    let servers = used_servers(&manifest);
    let catalog = Arc::new(Catalog::new(manifest, None, hub, quiet)?);
    for server in &servers {
        catalog.ensure(server).await.map_err(|why| {
            format!("{why}\nhint: the lock pins what MCP server `{server}` offers; check [mcp_servers.{server}] and that it runs by hand")
        })?;
    }
    let everyone = Caller::local(String::new());
    let tools = catalog.list(&everyone).await;
    let m = catalog.manifest();
    let mut pins = Vec::new();
    for tool in tools.iter() {
        let item = serde_json::to_value(tool).map_err(|e| e.to_string())?;
        let spec = m
            .tool_position(&tool.name)
            .and_then(|i| m.tools[i].settings_of::<McpSpec>());
        let from = spec.map_or_else(|| "manifest".to_string(), |s| format!("mcp:{}", s.server));
        pins.push(Pin::new(Kind::Tool, &tool.name, from, &item));
    }
    let asked = |e: rmcp::model::ErrorData| e.message.to_string();
    for (server, p) in passthrough::prompt_items(&catalog, &everyone)
        .await
        .map_err(asked)?
    {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        pins.push(Pin::new(Kind::Prompt, &name, format!("mcp:{server}"), &p));
    }
    for (server, t) in passthrough::template_items(&catalog, &everyone)
        .await
        .map_err(asked)?
    {
        let name = t["uriTemplate"].as_str().unwrap_or_default().to_string();
        pins.push(Pin::new(
            Kind::ResourceTemplate,
            &name,
            format!("mcp:{server}"),
            &t,
        ));
    }
    Ok(pins)
}

/// The MCP servers whose tools or offers are served: those served whole, and those the
/// manifest's MCP tools call.
fn used_servers(m: &Manifest) -> Vec<String> {
    let mut out: Vec<String> = m.whole_servers().map(|(s, _)| s.name.clone()).collect();
    for t in &m.tools {
        if let Some(spec) = t.settings_of::<McpSpec>() {
            if !out.contains(&spec.server) {
                out.push(spec.server.clone());
            }
        }
    }
    out
}
