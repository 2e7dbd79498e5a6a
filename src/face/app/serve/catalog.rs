//! The tools as a client's model should see them, and the manifest they are run with.
//!
//! Each served tool is listed under its provider-safe name (as `tools --emit`), with its
//! description, the JSON Schema of its arguments (an upstream MCP tool's own, verbatim),
//! annotations from `effect`/`idempotent` (an upstream tool's own passed through) and an
//! upstream's `outputSchema`. Upstream servers start when first needed; their annotations
//! then settle the effect of their tools in a new copy of the manifest, which every later
//! call is planned with. A server that fails to start (or is still starting when a list is
//! answered) leaves its tools out of `tools/list` (with a warning on stderr); it is tried
//! again in the background — every 2 s at first, then less often — and on a later list or
//! call, and when it comes up every session that listed without it is told
//! (`notifications/tools/list_changed`, through [`Catalog::changes`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::Tool;
use serde_json::{json, Map, Value};

use super::caller::Caller;
use crate::manifest::{export_name, Manifest, Subject, Whole};
use crate::tools::mcp::{self, McpHub};
use crate::tools::McpSpec;

/// How long `tools/list` waits for upstream servers still starting.
const LIST_WAIT: Duration = Duration::from_secs(5);
/// How long after a failed start a server is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// The longest wait between two background tries of a server that will not start.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Where one upstream server stands.
#[derive(Clone)]
enum Upstream {
    /// Asked for its tools; their annotations are in the manifest.
    Ready,
    /// Failed to start (or to list its tools), at this time.
    Failed(String, Instant),
}

/// The manifest in force (a reload replaces it whole; an upstream's annotations give a new
/// copy of the same generation, with the same tools at the same positions).
#[derive(Clone)]
pub(super) struct Current {
    pub manifest: Arc<Manifest>,
    /// The served tools' positions in the manifest (`--tools`, else all).
    served: Arc<Vec<usize>>,
    hub: Option<Arc<McpHub>>,
    pub generation: u64,
    /// Bumped within a generation when the tools change shape (a whole server's tools were
    /// learnt again): the kit the gateway runs calls with is made anew for it.
    pub shape: u64,
}

impl Current {
    /// The hub of its MCP servers.
    pub(super) fn hub(&self) -> Option<Arc<McpHub>> {
        self.hub.clone()
    }
}

/// The served tools and the manifest calls are planned with.
pub(super) struct Catalog {
    now: RwLock<Current>,
    /// `--tools`, kept for a reload.
    select: Option<Vec<String>>,
    upstreams: Mutex<HashMap<String, Upstream>>,
    /// Serializes starting and annotating (two lists at once start a server once).
    starting: tokio::sync::Mutex<()>,
    /// Servers a list was answered without (their coming up changes the list), and those
    /// being retried in the background.
    left_out: Mutex<HashSet<String>>,
    retrying: Mutex<HashSet<String>>,
    /// Bumped when the list changes.
    changed: tokio::sync::watch::Sender<u64>,
    /// The lists made, for what they depend on: made once, answered to every caller alike.
    listed: Mutex<Listed>,
    quiet: bool,
    /// `tools.lock` in force, and the tools it holds back.
    pinned: super::pinned::Pinned,
}

/// What a `tools/list` answer depends on: the manifest in force (generation, shape), the
/// changes counted since, and which servers are up.
#[derive(Clone, PartialEq, Eq, Default)]
struct ListKey {
    generation: u64,
    shape: u64,
    changed: u64,
    up: Vec<bool>,
}

/// The lists made for one [`ListKey`], by the roles of the callers they were made for.
#[derive(Default)]
struct Listed {
    key: ListKey,
    by_roles: HashMap<Option<Arc<[String]>>, Arc<Vec<Tool>>>,
}

/// The most role sets whose lists are kept (more are made each time, not kept).
const LISTS_KEPT: usize = 64;

impl Catalog {
    /// The catalog of `manifest`'s tools, or of `select` (manifest or exported names; an
    /// unknown one is an error with a suggestion).
    pub(super) fn new(
        manifest: Manifest,
        select: Option<&[String]>,
        hub: Option<Arc<McpHub>>,
        quiet: bool,
    ) -> Result<Catalog, String> {
        let served = manifest.select_tools(select)?;
        Ok(Catalog {
            now: RwLock::new(Current {
                manifest: Arc::new(manifest),
                served: Arc::new(served),
                hub,
                generation: 0,
                shape: 0,
            }),
            select: select.map(<[String]>::to_vec),
            upstreams: Mutex::default(),
            starting: tokio::sync::Mutex::new(()),
            left_out: Mutex::default(),
            retrying: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
            listed: Mutex::default(),
            quiet,
            pinned: super::pinned::Pinned::default(),
        })
    }

    /// The same catalog serving only what `lock` pins (`None`: everything): the manifest's
    /// own tools are judged now, an upstream's when its server is asked.
    pub(super) fn pinned_by(mut self, lock: Option<crate::lock::InForce>) -> Catalog {
        self.pinned = super::pinned::Pinned::new(lock);
        let now = self.now();
        self.judge_local(&now.manifest, &now.served);
        self
    }

    /// Put `lock` in force (a reload): the next [`replace`](Self::replace) and every server
    /// asked again are judged by it.
    pub(super) fn repin(&self, lock: Option<crate::lock::InForce>) {
        self.pinned.set(lock);
    }

    /// How many served tools the lock holds back now.
    pub(super) fn held(&self) -> usize {
        self.pinned.count()
    }

    /// What the lock holds back, and the lock in force itself.
    pub(super) fn pinned(&self) -> &super::pinned::Pinned {
        &self.pinned
    }

    /// Serve `pin` (approved on the review board) if it is what is held back under its name
    /// now; every session that listed is told. Whether it was.
    pub(super) fn accept(&self, pin: &crate::lock::Pin) -> bool {
        let accepted = self.pinned.accept(pin);
        if accepted {
            self.changed.send_modify(|n| *n += 1);
        }
        accepted
    }

    /// Judge the served tools of the manifest's own kinds against the lock.
    fn judge_local(&self, manifest: &Manifest, served: &[usize]) {
        if !self.pinned.is_on() {
            return;
        }
        let entries = (served.iter().map(|&i| &manifest.tools[i]))
            .filter(|t| t.settings_of::<McpSpec>().is_none())
            .map(|t| {
                let entry = local_entry(manifest, t);
                (export_name(&t.name), entry)
            });
        self.pinned.judge("manifest", entries.collect(), self.quiet);
    }

    /// Judge the served tools of `server` (its list: `remote`) against the lock.
    fn judge_server(&self, manifest: &Manifest, server: &str, remote: &[Value]) {
        if !self.pinned.is_on() {
            return;
        }
        let served = served_of(manifest, self.select.as_deref());
        let whole = manifest
            .mcp_servers
            .get(server)
            .and_then(|s| s.whole.as_ref());
        let entries = served.iter().filter_map(|&i| {
            let tool = &manifest.tools[i];
            let spec = tool
                .settings_of::<McpSpec>()
                .filter(|s| s.server == server)?;
            let r = remote.iter().find(|r| r["name"] == spec.tool.as_str())?;
            let entry = mcp_entry(tool, r, whole);
            Some((export_name(&tool.name), entry))
        });
        self.pinned
            .judge(&format!("mcp:{server}"), entries.collect(), self.quiet);
    }

    /// Put `manifest` in force (a reload) with `hub` for its MCP servers: its tools are
    /// served from now on, upstream servers are asked again, and every session that listed
    /// the tools is told the list changed. The new generation.
    pub(super) async fn replace(
        &self,
        manifest: Manifest,
        hub: Option<Arc<McpHub>>,
    ) -> Result<u64, String> {
        let served = served_of(&manifest, self.select.as_deref());
        let _one = self.starting.lock().await;
        let generation = {
            let mut now = self.now.write().unwrap_or_else(|e| e.into_inner());
            *now = Current {
                manifest: Arc::new(manifest),
                served: Arc::new(served),
                hub,
                generation: now.generation + 1,
                shape: 0,
            };
            now.generation
        };
        if let Ok(mut u) = self.upstreams.lock() {
            u.clear();
        }
        let now = self.now();
        self.judge_local(&now.manifest, &now.served);
        self.changed.send_modify(|n| *n += 1);
        Ok(generation)
    }

    /// The manifest in force, with its generation and served tools.
    pub(super) fn now(&self) -> Current {
        self.now.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Catalog {
    /// Changes to the list of tools (a server that was left out came up).
    pub(super) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The manifest as it stands (with every started server's annotations).
    pub(super) fn manifest(&self) -> Arc<Manifest> {
        self.now().manifest
    }

    /// The served tool `caller` calls `name` (its exported or manifest name). A tool its
    /// roles do not let it see is refused as one that does not exist, and the suggestion is
    /// among those it sees.
    pub(super) fn served(
        &self,
        manifest: &Manifest,
        name: &str,
        caller: &Caller,
    ) -> Result<usize, String> {
        let served = self.now().served;
        let sees = |i: usize| {
            let tool = &manifest.tools[i].name;
            caller.sees(manifest, Subject::Tool, tool) && !self.pinned.holds(&export_name(tool))
        };
        match manifest.tool_position(name) {
            Some(i) if served.contains(&i) && sees(i) => Ok(i),
            _ => {
                let seen = served.iter().copied().filter(|&i| sees(i));
                let names = seen.map(|i| export_name(&manifest.tools[i].name));
                let names: Vec<String> = names.collect();
                let hint = crate::error::suggest(name, names.iter().map(String::as_str))
                    .map_or_else(String::new, |h| format!(" ({h})"));
                Err(format!("unknown tool `{name}`{hint}"))
            }
        }
    }

    /// The upstream servers the served tools use, and the servers served whole.
    fn servers(&self, manifest: &Manifest) -> Vec<String> {
        let mut out: Vec<String> = manifest
            .whole_servers()
            .map(|(s, _)| s.name.clone())
            .collect();
        for &i in self.now().served.iter() {
            if let Some(spec) = manifest.tools[i].settings_of::<McpSpec>() {
                if !out.contains(&spec.server) {
                    out.push(spec.server.clone());
                }
            }
        }
        out
    }

    /// Start `server` if it is not up (or failed a while ago) and settle its tools' effects.
    /// Returns why it is not up, if it is not.
    pub(super) async fn ensure(&self, server: &str) -> Result<(), String> {
        let Some(hub) = self.now().hub else {
            return Ok(());
        };
        if let Some(state) = self.state(server) {
            match state {
                Upstream::Ready => {
                    // A server that died is started again by this call (its calls in flight
                    // were classified when it went): this call's server alone, not every
                    // server of the manifest — a look a server, each a system call.
                    hub.renew(server).await;
                    return Ok(());
                }
                Upstream::Failed(why, at) if at.elapsed() < RETRY_AFTER => return Err(why),
                Upstream::Failed(..) => {}
            }
        }
        let _one = self.starting.lock().await;
        match self.state(server) {
            Some(Upstream::Ready) => return Ok(()),
            Some(Upstream::Failed(_, at)) if at.elapsed() >= RETRY_AFTER => {
                hub.revive().await;
            }
            Some(Upstream::Failed(why, _)) => return Err(why),
            None => {}
        }
        let outcome = self.learn(&hub, server).await;
        let state = match &outcome {
            Ok(()) => Upstream::Ready,
            Err(why) => {
                if !self.quiet {
                    eprintln!(
                        "warning: mcp serve: {why}; its tools are not listed until it starts"
                    );
                }
                Upstream::Failed(why.clone(), Instant::now())
            }
        };
        if let Ok(mut u) = self.upstreams.lock() {
            u.insert(server.to_string(), state);
        }
        outcome
    }

    /// Ask `server` for its tools (the caller holds `starting`): a whole server's become the
    /// manifest's (a new shape, when they changed), and the annotations of its tools settle
    /// their effects, in a new copy of the manifest put in force.
    async fn learn(&self, hub: &McpHub, server: &str) -> Result<(), String> {
        let start = self.now();
        let mut copy = (*start.manifest).clone();
        let remote = hub.tools(server).await?;
        let before = tool_names(&copy);
        if let Some(decl) = copy.mcp_servers.get(server).cloned() {
            let found = mcp::discover(&copy, &decl, &remote);
            for clash in copy.set_discovered(server, found) {
                if !self.quiet {
                    eprintln!("warning: mcp serve: {clash}");
                }
            }
        }
        let reshaped = tool_names(&copy) != before;
        let used: Vec<String> = copy
            .tools
            .iter()
            .filter(|t| t.discovered_from.is_none())
            .filter(|t| {
                t.settings_of::<McpSpec>()
                    .is_some_and(|s| s.server == server)
            })
            .map(|t| t.name.clone())
            .collect();
        let diags = mcp::annotate(&mut copy, hub, &used).await;
        destructive_needs_approval(&mut copy, server, &remote);
        self.judge_server(&copy, server, &remote);
        for d in diags.iter().filter(|_| !self.quiet) {
            eprintln!("warning: mcp serve: {}", d.message);
        }
        if let Ok(mut now) = self.now.write() {
            // The copy of a manifest a reload replaced meanwhile is not put back.
            if now.generation == start.generation {
                now.served = Arc::new(served_of(&copy, self.select.as_deref()));
                now.manifest = Arc::new(copy);
                now.shape += u64::from(reshaped);
            }
        }
        let left_out = self.left_out.lock().is_ok_and(|mut l| l.remove(server));
        if left_out || reshaped {
            self.changed.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// Ask every whole server not yet asked (each given [`LIST_WAIT`]); whether any was.
    pub(super) async fn ensure_wholes(&self) -> bool {
        let manifest = self.manifest();
        let mut asked = false;
        for (server, _) in manifest.whole_servers() {
            if !matches!(self.state(&server.name), Some(Upstream::Ready)) {
                let _ = tokio::time::timeout(LIST_WAIT, self.ensure(&server.name)).await;
                asked = true;
            }
        }
        asked
    }

    /// `server` says its tools changed: they are asked for again (a whole server's become
    /// the manifest's), and every session that listed is told.
    pub(super) async fn relearn(&self, server: &str) {
        let Some(hub) = self.now().hub else { return };
        hub.forget_tools(server);
        let _one = self.starting.lock().await;
        if let Err(why) = self.learn(&hub, server).await {
            // Never the old list in silence: its tools are left out until it answers again.
            if !self.quiet {
                eprintln!("warning: mcp serve: `{server}` said its tools changed, and asking for them again failed: {why}; its tools are left out until it answers (tried again every {}s)", RETRY_AFTER.as_secs());
            }
            if let Ok(mut u) = self.upstreams.lock() {
                u.insert(server.to_string(), Upstream::Failed(why, Instant::now()));
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// The servers whose tools are left out now, and why (the status page).
    pub(super) fn failing(&self) -> Vec<(String, String)> {
        let u = self.upstreams.lock();
        let failed = u.iter().flat_map(|u| u.iter());
        (failed.filter_map(|(s, up)| match up {
            Upstream::Failed(why, _) => Some((s.clone(), why.clone())),
            Upstream::Ready => None,
        }))
        .collect()
    }

    fn state(&self, server: &str) -> Option<Upstream> {
        self.upstreams.lock().ok()?.get(server).cloned()
    }

    /// `tools/list`: every served tool whose server is up (servers still starting are given
    /// [`LIST_WAIT`]), as MCP `Tool` objects. A server left out is retried in the background.
    /// The list is made once for what it depends on and the caller's roles, then shared.
    pub(super) async fn list(self: &Arc<Self>, caller: &Caller) -> Arc<Vec<Tool>> {
        let servers = self.servers(&self.manifest());
        let starts = servers.iter().map(|s| async move {
            let up = tokio::time::timeout(LIST_WAIT, self.ensure(s)).await;
            (s.clone(), matches!(up, Ok(Ok(()))))
        });
        let up: BTreeMap<String, bool> = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .collect();
        for (server, _) in up.iter().filter(|(_, up)| !**up) {
            if let Ok(mut l) = self.left_out.lock() {
                l.insert(server.clone());
            }
            self.retry_in_background(server);
        }
        let now = self.now();
        let key = ListKey {
            generation: now.generation,
            shape: now.shape,
            changed: *self.changed.borrow(),
            up: up.values().copied().collect(),
        };
        if let Some(made) = self.listed_for(&key, caller) {
            return made;
        }
        let made = Arc::new(self.make_list(&now, &up, caller).await);
        if let Ok(mut listed) = self.listed.lock() {
            if listed.key != key {
                *listed = Listed {
                    key,
                    by_roles: HashMap::new(),
                };
            }
            if listed.by_roles.len() < LISTS_KEPT {
                listed.by_roles.insert(caller.roles.clone(), made.clone());
            }
        }
        made
    }

    /// The list made for `key` and `caller`'s roles, if there is one.
    fn listed_for(&self, key: &ListKey, caller: &Caller) -> Option<Arc<Vec<Tool>>> {
        let listed = self.listed.lock().ok()?;
        (listed.key == *key)
            .then(|| listed.by_roles.get(&caller.roles).cloned())
            .flatten()
    }

    /// Make the list `caller` sees.
    async fn make_list(
        &self,
        now: &Current,
        up: &BTreeMap<String, bool>,
        caller: &Caller,
    ) -> Vec<Tool> {
        let manifest = now.manifest.clone();
        let remote = self.remote_tools(now, up).await;
        let entries = (now.served.iter())
            .filter(|&&i| caller.sees(&manifest, Subject::Tool, &manifest.tools[i].name))
            .filter(|&&i| !self.pinned.holds(&export_name(&manifest.tools[i].name)))
            .filter_map(|&i| {
                let tool = &manifest.tools[i];
                match tool.settings_of::<McpSpec>() {
                    Some(spec) => remote.get(&tool.name).map(|r| {
                        let whole = manifest.mcp_servers.get(&spec.server);
                        mcp_entry(tool, r, whole.and_then(|s| s.whole.as_ref()))
                    }),
                    None => Some(local_entry(&manifest, tool)),
                }
            });
        let mut tools = Vec::new();
        for v in entries {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            match serde_json::from_value::<Tool>(v) {
                Ok(t) => tools.push(t),
                Err(e) => super::say::line(format!(
                    "warning: mcp serve: tool `{name}` cannot be listed: {e}"
                )),
            }
        }
        tools
    }

    /// Try `server` again and again (2 s, doubling to a minute) until it is up.
    fn retry_in_background(self: &Arc<Self>, server: &str) {
        let fresh = self
            .retrying
            .lock()
            .is_ok_and(|mut r| r.insert(server.to_string()));
        if !fresh {
            return;
        }
        let (me, server) = (self.clone(), server.to_string());
        tokio::spawn(async move {
            let mut wait = RETRY_AFTER;
            loop {
                tokio::time::sleep(wait).await;
                if me.ensure(&server).await.is_ok() {
                    break;
                }
                wait = (wait * 2).min(RETRY_MAX);
            }
            if let Ok(mut r) = me.retrying.lock() {
                r.remove(&server);
            }
        });
    }

    /// The upstream `Tool` object of each served MCP tool whose server is up.
    async fn remote_tools(
        &self,
        now: &Current,
        up: &BTreeMap<String, bool>,
    ) -> HashMap<String, Value> {
        let mut out = HashMap::new();
        let Some(hub) = &now.hub else { return out };
        // Each server's list, asked once and indexed by name.
        let mut lists: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (server, _) in up.iter().filter(|(_, up)| **up) {
            if let Ok(list) = hub.tools(server).await {
                let by_name = (list.into_iter())
                    .filter_map(|t| Some((t["name"].as_str()?.to_string(), t)))
                    .collect();
                lists.insert(server.clone(), by_name);
            }
        }
        for &i in now.served.iter() {
            let tool = &now.manifest.tools[i];
            let Some(spec) = tool.settings_of::<McpSpec>() else {
                continue;
            };
            if let Some(r) = lists.get(&spec.server).and_then(|l| l.get(&spec.tool)) {
                out.insert(tool.name.clone(), r.clone());
            }
        }
        out
    }
}

/// The names of `manifest`'s tools, in order.
fn tool_names(manifest: &Manifest) -> Vec<String> {
    manifest.tools.iter().map(|t| t.name.clone()).collect()
}

/// The positions of the served tools: `select`'s (those there are: a whole server's tools
/// come and go), else every listed tool.
fn served_of(manifest: &Manifest, select: Option<&[String]>) -> Vec<usize> {
    match select {
        None => manifest.select_tools(None).unwrap_or_default(),
        Some(names) => {
            let known = names
                .iter()
                .filter(|n| manifest.select_tools(Some(std::slice::from_ref(n))).is_ok());
            let known: Vec<String> = known.cloned().collect();
            manifest.select_tools(Some(&known)).unwrap_or_default()
        }
    }
}

/// A tool of the manifest's own kinds (command, http, scripted).
fn local_entry(manifest: &Manifest, tool: &crate::manifest::Tool) -> Value {
    let offers = crate::report::definitions::offers(
        manifest,
        Some(std::slice::from_ref(&tool.name)),
        false,
        &HashMap::new(),
    );
    let schema = offers
        .ok()
        .and_then(|(o, _)| o.into_iter().next())
        .map_or_else(|| json!({"type": "object"}), |o| o.parameters);
    let write = tool.is_write();
    let mut t = Map::new();
    t.insert("name".into(), json!(export_name(&tool.name)));
    if let Some(d) = &tool.description {
        t.insert("description".into(), json!(crate::template::redact_raw(d)));
    }
    t.insert("inputSchema".into(), schema);
    t.insert(
        "annotations".into(),
        json!({
            "readOnlyHint": !write,
            "destructiveHint": write,
            "idempotentHint": tool.idempotent,
        }),
    );
    Value::Object(t)
}

/// An upstream MCP tool as its server lists it (schema, annotations, output schema, `_meta`,
/// title, …), under our name. A whole server's resources are served under its prefix, so the resource an MCP App's
/// `_meta.ui.resourceUri` names is too.
fn mcp_entry(
    tool: &crate::manifest::Tool,
    remote: &Value,
    whole: Option<&crate::manifest::Whole>,
) -> Value {
    // Verbatim (whatever a later revision adds too), but for its name and a description the
    // manifest gives.
    let mut t: Map<String, Value> = (remote.as_object().into_iter().flatten())
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    t.insert("name".into(), json!(export_name(&tool.name)));
    if let Some(d) = tool
        .description
        .as_deref()
        .filter(|_| tool.discovered_from.is_none())
    {
        t.insert("description".into(), json!(crate::template::redact_raw(d)));
    }
    if let (Some(meta), Some(w)) = (t.get_mut("_meta"), whole) {
        // The current key, and the flat one earlier MCP Apps hosts read.
        for pointer in ["/ui/resourceUri", "/ui~1resourceUri"] {
            if let Some(uri) = meta.pointer_mut(pointer) {
                if let Some(served) = uri.as_str().map(|s| w.uri_of(s)) {
                    *uri = json!(served);
                }
            }
        }
    }
    t.entry("inputSchema")
        .or_insert_with(|| json!({"type": "object"}));
    Value::Object(t)
}

/// A tool its upstream marks `destructiveHint: true` needs approval, unless the manifest's
/// `approval` says otherwise.
fn destructive_needs_approval(m: &mut crate::manifest::Manifest, server: &str, remote: &[Value]) {
    for tool in m.tools.iter_mut() {
        let Some(spec) = tool.settings_of::<McpSpec>() else {
            continue;
        };
        if spec.server != server || tool.approval != crate::manifest::Approval::Unset {
            continue;
        }
        let hint = remote
            .iter()
            .find(|t| t["name"] == spec.tool.as_str())
            .and_then(|t| t["annotations"]["destructiveHint"].as_bool());
        if hint == Some(true) {
            tool.requires_approval = true;
            tool.approval = crate::manifest::Approval::Required;
        }
    }
}
/// The whole servers of `manifest`, by name.
pub(super) fn wholes(manifest: &Manifest) -> Vec<(String, Whole)> {
    (manifest.whole_servers())
        .map(|(s, w)| (s.name.clone(), w.clone()))
        .collect()
}

/// The whole server a tool of `manifest` is one of (`None`: a tool of no whole server).
pub(super) fn whole_of(manifest: &Manifest, tool: usize) -> Option<Whole> {
    let spec = manifest.tools[tool].settings_of::<crate::tools::mcp::McpSpec>()?;
    manifest.mcp_servers.get(&spec.server)?.whole.clone()
}

/// A whole server's tool result with the resources it names — resource links and embedded
/// resources — under their served URIs, which the client can read here.
pub(super) fn served_links(mut raw: Value, whole: Option<Whole>) -> Value {
    let Some(w) = whole.filter(|w| !w.prefix.is_empty()) else {
        return raw;
    };
    let blocks = raw.get_mut("content").and_then(Value::as_array_mut);
    for block in blocks.into_iter().flatten() {
        let uri = match block["type"].as_str() {
            Some("resource_link") => block.get_mut("uri"),
            Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
            _ => None,
        };
        if let Some(u) = uri {
            if let Some(own) = u.as_str().map(str::to_string) {
                *u = json!(w.uri_of(&own));
            }
        }
    }
    raw
}
