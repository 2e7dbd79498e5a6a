//! The sessions of a server with `identity = "caller"`: one for each caller of the gateway
//! (its tenant and subject), each sending a token of that caller's own (token exchange,
//! [`super::oauth`]); never shared across two callers. At most [`MOST_CALLERS`] at once: past
//! it, an idle caller's session ends for a new one, and when none is idle the call is refused.

use std::sync::Arc;

use tokio::sync::OnceCell;

use super::server::{start, Cell, McpHub, Session, START_TIMEOUT};
use crate::tools::Behalf;

/// The most callers of one gateway with sessions of their own on servers that carry each
/// caller's identity; past it, an idle caller's session ends for a new one.
const MOST_CALLERS: usize = 1024;

impl McpHub {
    /// Whether `server`'s calls carry each caller's identity (`identity = "caller"`).
    pub(crate) fn for_callers(&self, server: &str) -> bool {
        let slot = self.slots.get(server);
        slot.and_then(|s| s.decl.auth.as_ref()).is_some_and(|a| a.on_behalf)
    }

    /// The session of `server` for one caller (`identity = "caller"`): its own, sending its
    /// own token (started on its first call, started again once it died).
    pub(crate) async fn session_of(&self, server: &str, caller: &Behalf) -> Result<Arc<Session>, String> {
        let slot = self.slots.get(server).ok_or_else(|| format!("no MCP server `{server}` in the manifest"))?;
        let key = (server.to_string(), caller.subject.clone());
        let cell = {
            let mut callers = self.callers.lock().map_err(|_| "the callers' sessions are poisoned")?;
            let dead = |c: &Cell| matches!(c.get(), Some(Err(_))) || matches!(c.get(), Some(Ok(s)) if s.gone());
            callers.retain(|_, c| !dead(c));
            if callers.len() >= MOST_CALLERS && !callers.contains_key(&key) {
                // The one with nothing in flight that was found first goes (its session ends).
                let idle = callers.iter().find(|(_, c)| matches!(c.get(), Some(Ok(s)) if s.asking.len() == 0)).map(|(k, _)| k.clone());
                match idle {
                    Some(k) => drop(callers.remove(&k)),
                    None => return Err(format!("MCP server `{server}`: {MOST_CALLERS} callers' sessions are busy; retry")),
                }
            }
            callers.entry(key).or_insert_with(|| Arc::new(OnceCell::new())).clone()
        };
        let started = cell
            .get_or_init(|| async {
                let starting = start(&slot.decl, self.changes.clone(), Some(caller));
                match tokio::time::timeout(START_TIMEOUT, starting).await {
                    Ok(r) => r.map(Arc::new),
                    Err(_) => Err(format!("MCP server `{server}` did not finish starting within {}s", START_TIMEOUT.as_secs())),
                }
            })
            .await
            .clone()?;
        if let Some(t) = &started.auth {
            t.present(&caller.token);
        }
        Ok(started)
    }

}
