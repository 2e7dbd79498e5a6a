//! What a whole server offers besides tools, through the gateway: its resources (listed,
//! read, subscribed to), resource templates, prompts and completions, each server's names
//! and URIs under its prefix (`PREFIX_name`, `PREFIX+uri`) and mapped back on the way to it.
//!
//! A `resources/read` is a call like any other: a read of its server's backend, in its lanes,
//! after the writes that came before it, cached when the server's `cache` says so — run by
//! the unlisted reader tool the manifest learnt with the server's tools. Listing, prompts and
//! completions go straight to the server. What the servers say changed (their lists, a
//! subscribed resource) reaches the sessions that listed or subscribed ([`follow`]).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    ClientRequest, CompleteRequestParams, CompleteResult, ErrorData, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceResult, ServerResult,
};
use serde_json::{json, Map, Value};

use super::answer::Outcome;
use super::audit::Event;
use super::caller::Caller;
use super::catalog::{wholes, Catalog};
use super::fault::Fault;
use super::followers::{Listener, Offer};
use super::gateway::{CallCx, Gateway, Session, Target};
use super::uri::{self, Template};
use crate::events::Status;
use crate::manifest::{Manifest, Subject, Whole};
use crate::tools::mcp::{Asked, McpHub};

/// How long a list waits for a whole server still starting.
const LIST_WAIT: Duration = Duration::from_secs(5);
/// How many resources one session may be subscribed to at once.
pub(super) const MAX_SUBSCRIPTIONS: usize = 256;

/// Whether the manifest serves any server whole (the gateway then offers resources, prompts
/// and completions).
pub(super) fn offered(manifest: &Manifest) -> bool {
    manifest.whole_servers().next().is_some()
}

/// The whole servers that are up (each given [`LIST_WAIT`] to start) and whose
/// capabilities `has` accepts.
async fn up(
    catalog: &Catalog,
    has: fn(&rmcp::model::ServerCapabilities) -> bool,
) -> Vec<(String, Whole, Arc<McpHub>)> {
    let now = catalog.now();
    let Some(hub) = now.hub() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (server, whole) in wholes(&now.manifest) {
        let started = tokio::time::timeout(LIST_WAIT, catalog.ensure(&server)).await;
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

fn upstream_error(e: Asked) -> ErrorData {
    match e {
        // The server's own refusal (an unknown prompt, bad arguments) is the client's answer.
        Asked::Refused(e) => Fault::Upstream(e).error(),
        Asked::Failed(why) => Fault::Internal(why).error(),
    }
}

/// What `server` lists now (asked again after it said its lists changed, or after
/// [`OFFER_TTL`]).
async fn offer(g: &Gateway, hub: &McpHub, server: &str) -> Result<Arc<Offer>, ErrorData> {
    if let Some(o) = g.followers.offer(server) {
        return Ok(o);
    }
    let caps = hub.capabilities(server).await.unwrap_or_default();
    let mut offer = Offer::default();
    if caps.resources.is_some() {
        let listed = all_pages(hub, server, RESOURCES).await?;
        let uris = listed.iter().filter_map(|r| r["uri"].as_str());
        let spelled = |u: &str| Some((uri::normalized(u).ok()?, u.to_string()));
        offer.uris = uris.filter_map(spelled).collect();
        let listed = all_pages(hub, server, TEMPLATES).await?;
        let templates = listed.iter().filter_map(|t| t["uriTemplate"].as_str());
        offer.templates = templates.filter_map(Template::parse).collect();
    }
    if caps.prompts.is_some() {
        let listed = all_pages(hub, server, PROMPTS).await?;
        let names = listed.iter().filter_map(|p| p["name"].as_str());
        offer.prompts = names.map(str::to_string).collect();
    }
    let offer = Arc::new(offer);
    g.followers.remember(server, offer.clone());
    Ok(offer)
}

/// A resource a client names, as the door takes it: its server, that server's own URI
/// (normalized) and the whole server's settings.
struct Door {
    server: String,
    own: String,
    whole: Whole,
}

/// Take the resource `uri` a client named, or say why not: it is normalized first (every check
/// and the server see the same string), must be under a whole server's prefix, admitted by
/// the server's filters and the caller's role, and listed by the server (or match one of its
/// templates with plain values) unless the manifest says `unlisted_resources = true`.
async fn resource(g: &Gateway, caller: &Caller, uri: &str) -> Result<Door, Fault> {
    let taken = Box::pin(take_resource(g, caller, uri)).await;
    if let Err(f) = &taken {
        refused(g, caller, AskedFor::Resource(uri), &f.error().message);
    }
    taken
}

/// What a request at the door asked for: a resource by its URI, a prompt by its name.
enum AskedFor<'a> {
    Resource(&'a str),
    Prompt(&'a str),
}

/// Say in the audit trail that `caller`'s request for `asked` was refused at the door, and why.
fn refused(g: &Gateway, caller: &Caller, asked: AskedFor<'_>, why: &str) {
    if g.audit.on() {
        let (what, name) = match asked {
            AskedFor::Resource(uri) => ("resource", uri),
            AskedFor::Prompt(name) => ("prompt", name),
        };
        let fields = json!({ what: super::fault::cut(name), "reason": why });
        g.audit.record(Event::CallRefused, Some(caller), fields);
    }
}

async fn take_resource(g: &Gateway, caller: &Caller, uri: &str) -> Result<Door, Fault> {
    let manifest = g.catalog.manifest();
    let unknown = || Fault::Unknown {
        what: "resource",
        name: uri.to_string(),
    };
    let refused = |why: uri::Fault| Fault::Uri {
        uri: uri.to_string(),
        why: why.to_string(),
    };
    let (server, raw) = route_uri(&manifest, uri).ok_or_else(unknown)?;
    let mut own = uri::normalized(&raw).map_err(refused)?;
    let whole = wholes(&manifest).into_iter().find(|(s, _)| *s == server);
    let Some((_, w)) = whole.filter(|(_, w)| w.admits(&own)) else {
        return Err(unknown());
    };
    if !caller.sees(&manifest, Subject::Resource, &w.uri_of(&own)) {
        return Err(unknown());
    }
    if !w.unlisted {
        let hub = g.catalog.now().hub().ok_or_else(unknown)?;
        let started = g.catalog.ensure(&server).await;
        started.map_err(|e| Fault::Internal(e.to_string()))?;
        let offer = offer(g, &hub, &server).await.map_err(Fault::Upstream)?;
        match offer.uris.get(&own) {
            // The server is asked for a listed resource as it spells it.
            Some(listed) => own = listed.clone(),
            None => {
                let values = (offer.templates.iter())
                    .find_map(|t| t.matches(&own))
                    .ok_or_else(unknown)?;
                for v in values {
                    uri::plain(&v).map_err(refused)?;
                }
            }
        }
    }
    Ok(Door {
        server,
        own,
        whole: w,
    })
}

/// Ask `server` and take its answer apart with `take`.
async fn ask<T>(
    hub: &McpHub,
    server: &str,
    request: ClientRequest,
    take: fn(ServerResult) -> Option<T>,
) -> Result<T, ErrorData> {
    let answer = hub.ask(server, request).await.map_err(upstream_error)?;
    take(answer).ok_or_else(|| {
        upstream_error(Asked::Failed(format!(
            "MCP server `{server}` answered amiss"
        )))
    })
}

/// A list method of MCP's, and the field its items come under.
struct List {
    method: &'static str,
    items: &'static str,
}

const RESOURCES: List = List {
    method: "resources/list",
    items: "resources",
};
const TEMPLATES: List = List {
    method: "resources/templates/list",
    items: "resourceTemplates",
};
const PROMPTS: List = List {
    method: "prompts/list",
    items: "prompts",
};

/// Every page of `list` from `server`.
async fn all_pages(hub: &McpHub, server: &str, list: List) -> Result<Vec<Value>, ErrorData> {
    let List { method, items: key } = list;
    let mut out = Vec::new();
    let mut cursor = None;
    // A server that hands back cursors forever is cut off after 1,000 pages.
    for _ in 0..1000 {
        let answer = hub.ask(server, list_request(method, cursor)).await;
        let answer = answer.map_err(upstream_error)?;
        let amiss = || {
            upstream_error(Asked::Failed(format!(
                "MCP server `{server}` answered {method} amiss"
            )))
        };
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
    for (server, w, hub) in up(&g.catalog, |c| c.resources.is_some()).await {
        let items = all_pages(&hub, &server, RESOURCES).await?;
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
    let all = template_items(&g.catalog, caller).await?;
    from_json(json!({ "resourceTemplates": all.into_iter().map(|(_, t)| t).collect::<Vec<_>>() }))
}

/// Every whole server's resource templates `caller` sees, under served URIs, with the server
/// each came from.
pub(super) async fn template_items(
    catalog: &Catalog,
    caller: &Caller,
) -> Result<Vec<(String, Value)>, ErrorData> {
    let mut all = Vec::new();
    let m = catalog.manifest();
    for (server, w, hub) in up(catalog, |c| c.resources.is_some()).await {
        let items = all_pages(&hub, &server, TEMPLATES).await?;
        let seen = rewrite(items, "uriTemplate", &w).into_iter().filter(|t| {
            let template = t["uriTemplate"].as_str().unwrap_or_default();
            caller.sees(&m, Subject::Resource, template)
        });
        all.extend(seen.map(|t| (server.clone(), t)));
    }
    Ok(all)
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
    let Door {
        server,
        own,
        whole: w,
    } = resource(g, &cx.caller, uri).await?;
    let mut args = Map::new();
    args.insert("uri".into(), json!(own));
    let target = Target::Read {
        server: &server,
        uri: &own,
    };
    let outcome = Box::pin(g.call(session, target, args, cx))
        .await
        .map_err(|f| f.error())?;
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
    let all = prompt_items(&g.catalog, caller).await?;
    from_json(json!({ "prompts": all.into_iter().map(|(_, p)| p).collect::<Vec<_>>() }))
}

/// Every whole server's prompts `caller` sees, under served names, with the server each came
/// from.
pub(super) async fn prompt_items(
    catalog: &Catalog,
    caller: &Caller,
) -> Result<Vec<(String, Value)>, ErrorData> {
    let mut all = Vec::new();
    let m = catalog.manifest();
    for (server, w, hub) in up(catalog, |c| c.prompts.is_some()).await {
        let items = all_pages(&hub, &server, PROMPTS).await?;
        for mut p in items {
            let Some(own) = p["name"].as_str().map(str::to_string) else {
                continue;
            };
            let served = prompt_name(&w, &own);
            if w.admits(&own) && caller.sees(&m, Subject::Prompt, &served) {
                p["name"] = json!(served);
                all.push((server.clone(), p));
            }
        }
    }
    Ok(all)
}

/// Where a request that reads a whole server stands: its session, its place on its wire, and
/// what cancels it. It takes its place as a resource read does (`Gateway::read_place`).
pub(super) struct At<'a> {
    pub session: &'a Session,
    pub arrival: Option<Arc<super::order::Pass>>,
    pub cancel: tokio_util::sync::CancellationToken,
}

impl At<'_> {
    /// Its place before it reaches `server`, held while it is forwarded.
    async fn place(&self, g: &Gateway, server: &str) -> Result<super::order::Ticket, ErrorData> {
        let place = g.read_place(self.session, server, (self.arrival.clone(), &self.cancel));
        let cancelled = || Fault::Request("the request was cancelled".into()).error();
        Box::pin(place).await.ok_or_else(cancelled)
    }
}

/// `prompts/get` of a served prompt name: its server's messages, as they came.
pub(super) async fn prompt(
    g: &Gateway,
    request: GetPromptRequestParams,
    (caller, at): (&Caller, &At<'_>),
) -> Result<GetPromptResult, ErrorData> {
    let name = request.name.clone();
    let got = Box::pin(get_prompt(g, request, caller, at)).await;
    match &got {
        Err(e) => refused(g, caller, AskedFor::Prompt(&name), &e.message),
        Ok(_) if g.audit.on() => {
            let fields = json!({"prompt": name});
            g.audit.record(Event::CallAllowed, Some(caller), fields);
        }
        Ok(_) => {}
    }
    got
}

async fn get_prompt(
    g: &Gateway,
    mut request: GetPromptRequestParams,
    caller: &Caller,
    at: &At<'_>,
) -> Result<GetPromptResult, ErrorData> {
    let manifest = g.catalog.manifest();
    let name = request.name.clone();
    let not_found = || {
        Fault::Unknown {
            what: "prompt",
            name: name.clone(),
        }
        .error()
    };
    if !caller.sees(&manifest, Subject::Prompt, &request.name) {
        return Err(not_found());
    }
    let (server, own, w) = route_name(&manifest, &request.name).ok_or_else(not_found)?;
    if !w.admits(&own) {
        return Err(not_found());
    }
    let hub = g.catalog.now().hub().ok_or_else(not_found)?;
    let started = g.catalog.ensure(&server).await;
    started.map_err(|e| Fault::Internal(e.to_string()).error())?;
    // A prompt the server did not list is not asked for.
    if !offer(g, &hub, &server).await?.prompts.contains(&own) {
        return Err(not_found());
    }
    request.name = own;
    let _place = at.place(g, &server).await?;
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
    (caller, at): (&Caller, &At<'_>),
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
    let started = g.catalog.ensure(&server).await;
    started.map_err(|e| Fault::Internal(e.to_string()).error())?;
    let request = from_json(json!({"method": "completion/complete", "params": v}))?;
    let _place = at.place(g, &server).await?;
    ask(&hub, &server, request, |a| match a {
        ServerResult::CompleteResult(r) => Some(r),
        _ => None,
    })
    .await
}

/// `resources/subscribe` (`on = true`) or `unsubscribe` of a served URI by session `id`: the
/// server is asked once for the first session, and told to stop after the last. A session's
/// request takes its place as a read does (`at`; a listen stream's has none).
pub(super) async fn subscribe(
    g: &Gateway,
    (id, peer, caller): (u64, &Listener, &Caller),
    (uri, on): (&str, bool),
    at: Option<&At<'_>>,
) -> Result<(), ErrorData> {
    // Taken as a read is (a stop is taken as named: what was subscribed to may be gone).
    let (server, own) = if on {
        let door = resource(g, caller, uri).await?;
        (door.server, door.own)
    } else {
        let manifest = g.catalog.manifest();
        let unknown = || Fault::Unknown {
            what: "resource",
            name: uri.to_string(),
        };
        let (server, raw) = route_uri(&manifest, uri).ok_or_else(unknown)?;
        (server, uri::normalized(&raw).unwrap_or(raw))
    };
    let not_found = || {
        Fault::Unknown {
            what: "resource",
            name: uri.to_string(),
        }
        .error()
    };
    let hub = g.catalog.now().hub().ok_or_else(not_found)?;
    let _place = match at {
        Some(at) => Some(at.place(g, &server).await?),
        None => None,
    };
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
