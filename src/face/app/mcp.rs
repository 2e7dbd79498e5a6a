//! `flux-tools mcp import SERVER`: `[tools.*]` TOML for a server's tools.

use super::{load_manifest, runtime, stdout_write};
use crate::cli::Args;
use crate::error::{self, Error};
use crate::tools::mcp::McpHub;

pub(super) fn import(
    args: &Args,
    server: &str,
    prefix: Option<&str>,
    reads: &[String],
) -> Result<u8, Error> {
    let manifest = load_manifest(args)?;
    if !manifest.mcp_servers.contains_key(server) {
        let declared: Vec<&str> = manifest.mcp_servers.keys().map(String::as_str).collect();
        let hint = match error::suggest(server, declared.iter().copied()) {
            Some(s) => format!("{s} (declared: {})", declared.join(", ")),
            None if declared.is_empty() => {
                "declare it: [mcp_servers.NAME] command = [...] or url = \"...\"".into()
            }
            None => format!("declared servers: {}", declared.join(", ")),
        };
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
    stdout_write(crate::report::mcp_import::import_toml(server, &tools, prefix, reads).as_bytes())?;
    Ok(error::EXIT_OK)
}
