//! `subscriptions/listen` of a `2026-07-28` client: one long request whose stream carries the
//! changes it asked for — the tool list (the catalog's), the resource and prompt lists and the
//! updates of the resources it names (a whole server's) — until the client cancels it or the
//! gateway ends. It is one more listener of what [`super::followers`] passes on: a resource it
//! names is taken at the door as a read is and subscribed to at its server as a session's
//! `resources/subscribe` is (once, however many listen), and let go when the stream ends.

use std::sync::Arc;

use rmcp::model::{ErrorData, ServerNotification};
use rmcp::service::SubscriptionContext;

use super::caller::Caller;
use super::followers::{Listener, Listing};
use super::gateway::Gateway;
use super::passthrough;

/// Serve one `subscriptions/listen` stream until it ends.
pub(super) async fn listen(
    g: &Arc<Gateway>,
    caller: &Caller,
    cx: SubscriptionContext,
) -> Result<(), ErrorData> {
    let f = &g.followers;
    let id = f.stream_id();
    let to = Listener::Stream(cx.sink().clone());
    let accepted = cx.accepted().clone();
    let lists = [
        (accepted.resources_list_changed, Listing::Resources),
        (accepted.prompts_list_changed, Listing::Prompts),
    ];
    for (asked, what) in lists {
        if asked == Some(true) {
            f.listed(what, id, to.clone());
        }
    }
    let mut subscribed = Vec::new();
    for uri in accepted.resource_subscriptions.iter().flatten() {
        let on = passthrough::subscribe(g, (id, &to, caller), (uri, true), None).await;
        if on.is_ok() {
            subscribed.push(uri.clone());
        }
    }
    let mut tools = g.catalog.changes();
    let tools_asked = accepted.tools_list_changed == Some(true);
    loop {
        tokio::select! {
            () = cx.cancelled() => break,
            changed = tools.changed(), if tools_asked => {
                let n = ServerNotification::ToolListChangedNotification(Default::default());
                if changed.is_err() || cx.sink().send(n).await.is_err() {
                    break;
                }
            }
        }
    }
    for what in [Listing::Resources, Listing::Prompts] {
        f.unlisted(what, id);
    }
    for uri in subscribed {
        let _ = passthrough::subscribe(g, (id, &to, caller), (&uri, false), None).await;
    }
    Ok(())
}
