//! `flux-tools mcp import SERVER`: `[tools.*]` TOML for a server's tools.

use super::{load_manifest, runtime, stdout_write};
use crate::cli::Args;
use crate::error::{self, Error};
use crate::tools::mcp::{self, McpHub};

pub(super) fn import(args: &Args, server: &str) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    if !manifest.mcp_servers.contains_key(server) {
        let hint = error::suggest(server, manifest.mcp_servers.keys().map(String::as_str))
            .unwrap_or_else(|| {
                "declare it: [mcp_servers.NAME] command = [...] or url = \"...\"".into()
            });
        return Err(Error::Usage(format!(
            "{} has no [mcp_servers.{server}]\nhint: {hint}",
            manifest.name()
        )));
    }
    let rt = runtime()?;
    let hub = McpHub::new(&manifest.mcp_servers);
    let tools = rt.block_on(hub.tools(server));
    rt.block_on(hub.shutdown());
    let tools = tools.map_err(Error::Usage)?;
    stdout_write(mcp::import_toml(server, &tools).as_bytes())?;
    Ok(error::EXIT_OK)
}
