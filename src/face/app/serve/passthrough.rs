//! What a whole server offers besides tools, through the gateway: its resources (listed,
//! read, subscribed to), resource templates, prompts and completions, each server's names
//! and URIs under its prefix (`PREFIX_name`, `PREFIX+uri`) and mapped back on the way to it.
//!
//! A `resources/read` is a call like any other: a read of its server's backend, in its lanes,
//! after the writes that came before it, cached when the server's `cache` says so — run by
//! the unlisted reader tool the manifest learnt with the server's tools. Listing, prompts and
//! completions go straight to the server. What the servers say changed (their lists, a
//! subscribed resource) reaches the sessions that listed or subscribed ([`follow`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientRequest, CompleteRequestParams, CompleteResult, ErrorData, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceResult, ServerResult,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::{json, Map, Value};

use super::answer::Outcome;
use super::caller::Caller;
use super::gateway::{CallCx, Gateway, Session, Target};
use crate::events::Status;
use crate::manifest::{Manifest, Subject, Whole};
use crate::tools::mcp::{Change, McpHub};

/// How long a list waits for a whole server still starting.
const LIST_WAIT: Duration = Duration::from_secs(5);
/// How many resources one session may be subscribed to at once.
pub(super) const MAX_SUBSCRIPTIONS: usize = 256;

/// Who is told what changed: the sessions that listed resources or prompts, and the
/// resources each session subscribed to.
#[derive(Default)]
pub(super) struct Followers {
    resources: Mutex<Peers>,
    prompts: Mutex<Peers>,
    /// By server and its own URI: the sessions subscribed.
    subscribed: Mutex<HashMap<(String, String), Peers>>,
}

/// Sessions, by id.
type Peers = HashMap<u64, Peer<RoleServer>>;

/// What is listed.
#[derive(Clone, Copy)]
pub(super) enum Listing {
    Resources,
    Prompts,
}

impl Followers {
    /// Tell session `id` when the servers' `what` change (from its first list on).
    pub(super) fn listed(&self, what: Listing, id: u64, peer: &Peer<RoleServer>) {
        let map = match what {
            Listing::Resources => &self.resources,
            Listing::Prompts => &self.prompts,
        };
        if let Ok(mut m) = map.lock() {
            m.entry(id).or_insert_with(|| peer.clone());
        }
    }
}

/// The whole servers of `manifest`, by name.
fn wholes(manifest: &Manifest) -> Vec<(String, Whole)> {
    (manifest.whole_servers())
        .map(|(s, w)| (s.name.clone(), w.clone()))
        .collect()
}

/// Whether the manifest serves any server whole (the gateway then offers resources, prompts
/// and completions).
pub(super) fn offered(manifest: &Manifest) -> bool {
    manifest.whole_servers().next().is_some()
}

/// The whole servers that are up (each given [`LIST_WAIT`] to start) and whose
/// capabilities `has` accepts.
async fn up(
    g: &Gateway,
    has: fn(&rmcp::model::ServerCapabilities) -> bool,
) -> Vec<(String, Whole, Arc<McpHub>)> {
    let now = g.catalog.now();
    let Some(hub) = now.hub() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (server, whole) in wholes(&now.manifest) {
        let started = tokio::time::timeout(LIST_WAIT, g.catalog.ensure(&server)).await;
        if !matches!(started, Ok(Ok(()))) {
            continue;
        }
        if hub.capabilities(&server).await.is_some_and(|c| has(&c)) {
            out.push((server, whole, hub.clone()));
        }
    }
    out
}

/// The server a served URI belongs to, and its own URI: a prefixed server's first, else a
/// server with no prefix.
fn route_uri(manifest: &Manifest, uri: &str) -> Option<(String, String)> {
    let all = wholes(manifest);
    let prefixed = all.iter().filter(|(_, w)| !w.prefix.is_empty());
    let bare = all.iter().filter(|(_, w)| w.prefix.is_empty());
    for (server, w) in prefixed.chain(bare) {
        if let Some(own) = w.own_uri(uri) {
            return Some((server.clone(), own.to_string()));
        }
    }
    None
}

/// The server a served prompt name belongs to, and its own name (`PREFIX_name`).
fn route_name(manifest: &Manifest, name: &str) -> Option<(String, String, Whole)> {
    let all = wholes(manifest);
    let prefixed = all.iter().filter(|(_, w)| !w.prefix.is_empty());
    for (server, w) in prefixed {
        if let Some(own) = name.strip_prefix(&format!("{}_", w.prefix)) {
            return Some((server.clone(), own.to_string(), w.clone()));
        }
    }
    let mut bare = all.into_iter().filter(|(_, w)| w.prefix.is_empty());
    bare.next().map(|(s, w)| (s, name.to_string(), w))
}

/// A served prompt's name.
fn prompt_name(w: &Whole, name: &str) -> String {
    if w.prefix.is_empty() {
        name.to_string()
    } else {
        format!("{}_{name}", w.prefix)
    }
}

fn upstream_error(e: String) -> ErrorData {
    ErrorData::internal_error(e, None)
}

/// Ask `server` and take its answer apart with `take`.
async fn ask<T>(
    hub: &McpHub,
    server: &str,
    request: ClientRequest,
    take: fn(ServerResult) -> Option<T>,
) -> Result<T, ErrorData> {
    let answer = hub.ask(server, request).await.map_err(upstream_error)?;
    take(answer).ok_or_else(|| upstream_error(format!("MCP server `{server}` answered amiss")))
}

/// Every page of list `method` from `server`, its items under `key`.
async fn all_pages(
    hub: &McpHub,
    server: &str,
    (method, key): (&str, &str),
) -> Result<Vec<Value>, ErrorData> {
    let mut out = Vec::new();
    let mut cursor = None;
    // A server that hands back cursors forever is cut off after 1,000 pages.
    for _ in 0..1000 {
        let answer = hub.ask(server, list_request(method, cursor)).await;
        let answer = answer.map_err(upstream_error)?;
        let amiss = || upstream_error(format!("MCP server `{server}` answered {method} amiss"));
        let (items, next) = list_items(answer, key).ok_or_else(amiss)?;
        out.extend(items);
        match next {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => break,
        }
    }
    Ok(out)
}

/// A list request of `method` from `cursor`, as rmcp takes it.
fn list_request(method: &str, cursor: Option<String>) -> ClientRequest {
    let mut params = json!({});
    if let Some(c) = cursor {
        params["cursor"] = json!(c);
    }
    serde_json::from_value(json!({"method": method, "params": params}))
        .unwrap_or(ClientRequest::PingRequest(Default::default()))
}

/// A list answer's `key` items and next cursor.
fn list_items(answer: ServerResult, key: &str) -> Option<(Vec<Value>, Option<String>)> {
    let v = serde_json::to_value(answer).ok()?;
    let items = v.get(key)?.as_array()?.clone();
    let next = v["nextCursor"].as_str().map(str::to_string);
    Some((items, next))
}

/// `resources/list`: every whole server's resources it admits, under served URIs.
pub(super) async fn resources(
    g: &Gateway,
    caller: &Caller,
) -> Result<ListResourcesResult, ErrorData> {
    let mut all = Vec::new();
    let m = g.catalog.manifest();
    for (server, w, hub) in up(g, |c| c.resources.is_some()).await {
        let items = all_pages(&hub, &server, ("resources/list", "resources")).await?;
        all.extend(
            rewrite(items, "uri", &w).into_iter().filter(|r| {
                caller.sees(&m, Subject::Resource, r["uri"].as_str().unwrap_or_default())
            }),
        );
    }
    from_json(json!({ "resources": all }))
}

/// `resources/templates/list`, likewise.
pub(super) async fn templates(
    g: &Gateway,
    caller: &Caller,
) -> Result<ListResourceTemplatesResult, ErrorData> {
    let mut all = Vec::new();
    let m = g.catalog.manifest();
    for (server, w, hub) in up(g, |c| c.resources.is_some()).await {
        let items = all_pages(
            &hub,
            &server,
            ("resources/templates/list", "resourceTemplates"),
        )
        .await?;
        all.extend(rewrite(items, "uriTemplate", &w).into_iter().filter(|t| {
            let template = t["uriTemplate"].as_str().unwrap_or_default();
            caller.sees(&m, Subject::Resource, template)
        }));
    }
    from_json(json!({ "resourceTemplates": all }))
}

/// The items `w` admits (by their `key`), with `key` made a served URI.
fn rewrite(items: Vec<Value>, key: &str, w: &Whole) -> Vec<Value> {
    (items.into_iter())
        .filter_map(|mut item| {
            let own = item.get(key)?.as_str()?.to_string();
            w.admits(&own).then(|| {
                item[key] = json!(w.uri_of(&own));
                item
            })
        })
        .collect()
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// `resources/read` of a served URI: a read call on its server's backend (see the module's
/// words); its contents as the server gave them, under the served URI.
pub(super) async fn read(
    g: &Arc<Gateway>,
    session: &Session,
    uri: &str,
    cx: CallCx,
) -> Result<ReadResourceResult, ErrorData> {
    let manifest = g.catalog.manifest();
    let not_found =
        || ErrorData::resource_not_found(format!("no resource `{uri}` is served"), None);
    if !cx.caller.sees(&manifest, Subject::Resource, uri) {
        return Err(not_found());
    }
    let (server, own) = route_uri(&manifest, uri).ok_or_else(not_found)?;
    let whole = wholes(&manifest).into_iter().find(|(s, _)| *s == server);
    let Some((_, w)) = whole.filter(|(_, w)| w.admits(&own)) else {
        return Err(not_found());
    };
    let mut args = Map::new();
    args.insert("uri".into(), json!(own));
    let target = Target::Read {
        server: &server,
        uri: &own,
    };
    let outcome = Box::pin(g.call(session, target, args, cx))
        .await
        .map_err(|e| ErrorData::invalid_params(e, None))?;
    let mut contents = match outcome {
        Outcome::Ran(r, _) if r.status == Status::Ok => r.output,
        Outcome::Ran(r, _) => {
            let e = r.error.as_ref();
            let kind = e.map_or_else(String::new, |e| e.kind.to_string());
            let msg = e.map_or_else(String::new, |e| e.message.clone());
            return Err(ErrorData::internal_error(format!("{kind}: {msg}"), None));
        }
        Outcome::Refused(r) => return Err(ErrorData::internal_error(r.text(), None)),
        // Never for a read (keys are for tool calls), but said if it came.
        Outcome::Recorded(v) => return Err(ErrorData::internal_error(v.to_string(), None)),
        Outcome::Ask(q, _) => return Err(ErrorData::internal_error(q, None)),
    };
    if let Some(list) = contents.get_mut("contents").and_then(Value::as_array_mut) {
        for c in list {
            if let Some(u) = c.get("uri").and_then(Value::as_str) {
                c["uri"] = json!(w.uri_of(u));
            }
        }
    }
    from_json(contents)
}

/// `prompts/list`: every whole server's prompts it admits, under served names.
pub(super) async fn prompts(g: &Gateway, caller: &Caller) -> Result<ListPromptsResult, ErrorData> {
    let mut all = Vec::new();
    let m = g.catalog.manifest();
    for (server, w, hub) in up(g, |c| c.prompts.is_some()).await {
        let items = all_pages(&hub, &server, ("prompts/list", "prompts")).await?;
        for mut p in items {
            let Some(own) = p["name"].as_str().map(str::to_string) else {
                continue;
            };
            let served = prompt_name(&w, &own);
            if w.admits(&own) && caller.sees(&m, Subject::Prompt, &served) {
                p["name"] = json!(served);
                all.push(p);
            }
        }
    }
    from_json(json!({ "prompts": all }))
}

/// `prompts/get` of a served prompt name: its server's messages, as they came.
pub(super) async fn prompt(
    g: &Gateway,
    mut request: GetPromptRequestParams,
    caller: &Caller,
) -> Result<GetPromptResult, ErrorData> {
    let manifest = g.catalog.manifest();
    let not_found =
        || ErrorData::invalid_params(format!("no prompt `{}` is served", request.name), None);
    if !caller.sees(&manifest, Subject::Prompt, &request.name) {
        return Err(not_found());
    }
    let (server, own, w) = route_name(&manifest, &request.name).ok_or_else(not_found)?;
    if !w.admits(&own) {
        return Err(not_found());
    }
    let hub = g.catalog.now().hub().ok_or_else(not_found)?;
    g.catalog.ensure(&server).await.map_err(upstream_error)?;
    request.name = own;
    let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(request));
    ask(&hub, &server, request, |a| match a {
        ServerResult::GetPromptResult(r) => Some(r),
        _ => None,
    })
    .await
}

/// `completion/complete` for a served prompt's or resource template's argument.
pub(super) async fn complete(
    g: &Gateway,
    request: CompleteRequestParams,
    caller: &Caller,
) -> Result<CompleteResult, ErrorData> {
    let manifest = g.catalog.manifest();
    let mut v = serde_json::to_value(&request)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
    let unknown = || {
        ErrorData::invalid_params(
            "no prompt or resource template of that name is served",
            None,
        )
    };
    let server = match v["ref"]["type"].as_str() {
        Some("ref/prompt") => {
            let name = v["ref"]["name"].as_str().unwrap_or_default().to_string();
            if !caller.sees(&manifest, Subject::Prompt, &name) {
                return Err(unknown());
            }
            let (server, own, w) = route_name(&manifest, &name).ok_or_else(unknown)?;
            if !w.admits(&own) {
                return Err(unknown());
            }
            v["ref"]["name"] = json!(own);
            server
        }
        Some("ref/resource") => {
            let uri = v["ref"]["uri"].as_str().unwrap_or_default().to_string();
            if !caller.sees(&manifest, Subject::Resource, &uri) {
                return Err(unknown());
            }
            let (server, own) = route_uri(&manifest, &uri).ok_or_else(unknown)?;
            let admitted = wholes(&manifest)
                .iter()
                .any(|(s, w)| *s == server && w.admits(&own));
            if !admitted {
                return Err(unknown());
            }
            v["ref"]["uri"] = json!(own);
            server
        }
        _ => return Err(unknown()),
    };
    let hub = g.catalog.now().hub().ok_or_else(unknown)?;
    g.catalog.ensure(&server).await.map_err(upstream_error)?;
    let request = from_json(json!({"method": "completion/complete", "params": v}))?;
    ask(&hub, &server, request, |a| match a {
        ServerResult::CompleteResult(r) => Some(r),
        _ => None,
    })
    .await
}

/// `resources/subscribe` (`on = true`) or `unsubscribe` of a served URI by session `id`: the
/// server is asked once for the first session, and told to stop after the last.
pub(super) async fn subscribe(
    g: &Gateway,
    (id, peer, caller): (u64, &Peer<RoleServer>, &Caller),
    uri: &str,
    on: bool,
) -> Result<(), ErrorData> {
    let manifest = g.catalog.manifest();
    let not_found =
        || ErrorData::resource_not_found(format!("no resource `{uri}` is served"), None);
    if on && !caller.sees(&manifest, Subject::Resource, uri) {
        return Err(not_found());
    }
    let (server, own) = route_uri(&manifest, uri).ok_or_else(not_found)?;
    let admitted = wholes(&manifest)
        .iter()
        .any(|(s, w)| *s == server && w.admits(&own));
    let hub = g
        .catalog
        .now()
        .hub()
        .filter(|_| admitted)
        .ok_or_else(not_found)?;
    let key = (server.clone(), own.clone());
    let (first, last) = {
        let mut subs = g.followers.subscribed.lock().map_err(|_| not_found())?;
        let mine = subs.values().filter(|m| m.contains_key(&id)).count();
        if on && mine >= MAX_SUBSCRIPTIONS && !subs.get(&key).is_some_and(|m| m.contains_key(&id)) {
            let why = format!(
                "this session is subscribed to {MAX_SUBSCRIPTIONS} resources, the most one may be; unsubscribe from one first"
            );
            return Err(ErrorData::invalid_request(why, None));
        }
        let sessions = subs.entry(key.clone()).or_default();
        let was_empty = sessions.is_empty();
        if on {
            sessions.insert(id, peer.clone());
        } else {
            sessions.remove(&id);
        }
        let now_empty = sessions.is_empty();
        if now_empty {
            subs.remove(&key);
        }
        (on && was_empty, !on && !was_empty && now_empty)
    };
    let method = match (first, last) {
        (true, _) => "resources/subscribe",
        (_, true) => "resources/unsubscribe",
        _ => return Ok(()),
    };
    let request = from_json(json!({"method": method, "params": {"uri": own}}))?;
    ask(&hub, &server, request, |a| match a {
        ServerResult::EmptyResult(_) => Some(()),
        _ => None,
    })
    .await
}

/// Pass on what the servers of `hub` say changed, until the hub is gone: a server's tools are
/// learnt again (and every session that listed them is told), the sessions that listed its
/// resources or prompts are told, and those subscribed to a resource hear of its update.
pub(super) async fn follow(g: Arc<Gateway>, hub: Arc<McpHub>) {
    let mut changes = hub.changes();
    drop(hub);
    loop {
        let change = match changes.recv().await {
            Ok(c) => c,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        match change {
            Change::Tools(server) => g.catalog.relearn(&server).await,
            Change::Resources(_) => {
                tell(&g.followers.resources, |p| async move {
                    p.notify_resource_list_changed().await.is_ok()
                })
                .await
            }
            Change::Prompts(_) => {
                tell(&g.followers.prompts, |p| async move {
                    p.notify_prompt_list_changed().await.is_ok()
                })
                .await
            }
            Change::ResourceUpdated(server, own) => {
                let manifest = g.catalog.manifest();
                let Some((_, w)) = wholes(&manifest).into_iter().find(|(s, _)| *s == server) else {
                    continue;
                };
                let key = (server, own.clone());
                let peers: Vec<(u64, Peer<RoleServer>)> = (g.followers.subscribed.lock().ok())
                    .and_then(|s| {
                        s.get(&key)
                            .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
                    })
                    .unwrap_or_default();
                let served = w.uri_of(&own);
                for (id, p) in peers {
                    let param = rmcp::model::ResourceUpdatedNotificationParam::new(served.clone());
                    if p.notify_resource_updated(param).await.is_err() {
                        // A session that is gone hears of nothing more.
                        if let Ok(mut s) = g.followers.subscribed.lock() {
                            s.get_mut(&key).map(|m| m.remove(&id));
                        }
                    }
                }
            }
        }
    }
}

/// Tell every session of `map` with `say`; those that cannot be told are forgotten.
async fn tell<F, Fut>(map: &Mutex<Peers>, say: F)
where
    F: Fn(Peer<RoleServer>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let peers: Vec<(u64, Peer<RoleServer>)> = map
        .lock()
        .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
        .unwrap_or_default();
    for (id, p) in peers {
        if !say(p).await {
            if let Ok(mut m) = map.lock() {
                m.remove(&id);
            }
        }
    }
}
