//! The tool manifest (`tools.toml`): concurrency lanes, deadlines, shared lanes, tools of four
//! kinds, MCP servers and hooks, parsed into a typed [`Manifest`].
//!
//! Parsing walks `toml`'s spanned document tree by hand instead of using `#[derive(Deserialize)]`
//! so that *every* problem — an unknown field, a wrong type, a lane nobody declared, a rate that
//! does not parse — is reported at once with its line, column and a hint. Defaults are SPEC
//! section 2's: `effect = "write"`, `idempotent` = (effect is read), `parallel_safe = true`.
//! `${env:NAME}` secrets stay unresolved ([`Template`]) until a call is invoked.
//!
//! Layout: this file holds the types and [`Manifest::parse`]; [`reader`] the typed TOML field
//! readers every section (and every tool kind, for its own fields) uses; `sections` the
//! `[concurrency]`, `[lanes]`, `[mcp_servers]` and `[hooks]` tables; `tool` the fields every
//! tool shares (a kind's own fields are read by its file under `tools/`, through the [`Kinds`]
//! registry `load` is handed — see `kinds`); `checks` what needs the whole manifest (declared
//! lanes, weights against limits, placeholders).

mod access;
mod auto;
mod checks;
mod kinds;
pub(crate) mod reader;
mod sections;
#[cfg(test)]
mod tests;
mod tool;
mod upstream_auth;
mod verify;
mod whole;
pub(crate) use access::{Auth, Op, Roles, Subject};
pub(crate) use kinds::{KindEntry, KindSettings, Kinds, Site};
pub(crate) use tool::cache_refusal;
pub(crate) use upstream_auth::{loopback_host, secure_url, Grant, UpstreamAuth};
pub(crate) use verify::{discovered as verify_discovered, Verify};
pub(crate) use whole::{Whole, WholeCache};

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use crate::error::{suggest, Diagnostic, SourceFile};
use crate::schema::ArgSchema;
use crate::template::Template;
pub(crate) use auto::AutoLimit;
use reader::{quote_key, Reader};

/// The parsed manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub file: SourceFile,
    /// Canonical path, used to key lanes shared across processes.
    pub path: PathBuf,
    pub concurrency: Concurrency,
    pub deadline: Deadline,
    pub budget: Budget,
    /// `[history] path`, resolved against the manifest's folder.
    pub history: Option<PathBuf>,
    pub models: BTreeMap<String, ModelPrice>,
    pub lanes: BTreeMap<String, LaneDecl>,
    pub tools: Vec<Tool>,
    pub tool_index: HashMap<String, usize>,
    /// Tools whose names a model provider refuses, by the name they are offered under
    /// (`db_getOrders` for `db.getOrders`): a call to that name runs the tool.
    pub aliases: HashMap<String, usize>,
    pub mcp_servers: BTreeMap<String, McpServer>,
    pub hooks: Hooks,
    /// `[serve]`: what `mcp serve` takes from the manifest.
    pub serve: Serve,
    /// `[tenants.NAME] weight = N`: a tenant's share where tenants wait in one lane (1 if
    /// absent).
    pub tenants: BTreeMap<String, u32>,
    /// `[roles.NAME]`: what callers holding each role may see and do.
    pub roles: Roles,
    /// Warnings found while parsing (undeclared effects, unbounded turn lane, …).
    pub warnings: Vec<Diagnostic>,
}

/// `[concurrency]`: the runner's ceiling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Concurrency {
    pub max_concurrent_tools: Option<u32>,
    pub per_tenant: Option<u32>,
    /// Each tool's limit; for a learned one, the ceiling.
    pub per_tool: BTreeMap<String, u32>,
    /// The tools whose limit is learned (`"auto"`), with its bounds.
    pub per_tool_auto: BTreeMap<String, AutoLimit>,
    /// Which calls are ordered for their side effects (`hazards`).
    pub hazards: Hazards,
}

/// `[concurrency] hazards`: what a call waits for because of side effects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hazards {
    /// Only writes are ordered among themselves (the write chain).
    Writes,
    /// Also a read and a write on a shared backend keep call order (no stale read, no write
    /// under a read). Stricter than `Writes`.
    #[default]
    Backend,
}

impl Hazards {
    pub fn parse(s: &str) -> Option<Hazards> {
        match s {
            "backend" => Some(Hazards::Backend),
            "writes" => Some(Hazards::Writes),
            _ => None,
        }
    }
}

/// Where a tool's backends came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendOrigin {
    /// `backend = …` in the manifest.
    Manifest,
    /// Its shared lanes.
    Lanes,
    /// Its kind (an MCP tool: its server).
    Kind,
    /// Nothing said: the tool itself.
    Tool,
}

/// `[deadline]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Deadline {
    pub run: Option<Duration>,
    pub tool_call: Option<Duration>,
}

/// A token-bucket rate: `count` tokens per `per`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl Rate {
    /// Parse `10/s`, `600/m`, `1000/h`.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || format!("`{text}` is not a rate (write it like `10/s`, `600/m` or `1000/h`)");
        let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(format!(
                "`{text}` allows no calls at all; use a positive count"
            ));
        }
        Ok(Rate { count, per })
    }

    /// Tokens per second.
    pub fn per_second(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64()
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// `[lanes.NAME]`: a shared limit several tools draw on.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneDecl {
    pub name: String,
    /// Its limit; for a learned one (`auto`), the ceiling.
    pub concurrency: Option<u32>,
    /// `concurrency = "auto"`: the limit is learned within these bounds.
    pub auto: Option<AutoLimit>,
    pub rate: Option<Rate>,
    pub burst: Option<u32>,
}

/// Read-only or mutating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Read,
    Write,
}

/// Where a declaration came from, shown by `plan` and `tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Manifest,
    /// An MCP tool's annotations (`readOnlyHint`, `idempotentHint`, `destructiveHint`).
    Annotation,
    Default,
}

/// One `[tools.NAME]`.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    /// Its kind's own settings (read by the kind's file under `tools/`).
    pub kind: Arc<dyn KindSettings>,
    pub description: Option<String>,
    pub effect: Effect,
    pub effect_origin: Origin,
    pub idempotent: bool,
    pub idempotent_origin: Origin,
    pub parallel_safe: bool,
    pub concurrent_writes: bool,
    pub timeout: Option<Duration>,
    /// The timeout as the manifest wrote it, for messages ("exceeded its 5s timeout").
    pub timeout_text: Option<String>,
    pub lanes: Vec<String>,
    /// What it reads and writes (seed 001's backend or quota group): calls on a shared
    /// backend keep call order between reads and writes.
    pub backends: Vec<String>,
    pub backends_origin: BackendOrigin,
    pub weight: u32,
    pub retries: u32,
    pub cost: f64,
    pub expected: Option<Duration>,
    /// Whether a call needs someone's approval before it runs (`requires_approval = true`,
    /// `approval = "required"` or `"out_of_band"`; in `mcp serve`, an upstream's
    /// `destructiveHint` unless `approval` says otherwise).
    pub requires_approval: bool,
    /// `approval`: who may give it.
    pub approval: Approval,
    /// `cache = "5m"`: how long an `ok` result of this read is reused (keyed by tenant and
    /// fingerprint).
    pub cache: Option<Duration>,
    /// `verify = "TOOL"`: the read that settles a call of this write cut off in flight.
    pub verify: Option<Verify>,
    pub args: Option<ArgSchema>,
    /// Byte span of the `[tools.NAME]` key, for diagnostics (a discovered tool: its
    /// server's key).
    pub span: Range<usize>,
    /// The whole MCP server it was learnt from (`None`: a `[tools.*]` table declares it).
    pub discovered_from: Option<String>,
    /// Listed, offered and served by name; `false`: a tool the gateway makes its own calls
    /// with (a whole server's resource reads), which no `--tools`, list or offer shows.
    pub listed: bool,
}

impl Tool {
    pub fn is_write(&self) -> bool {
        self.effect == Effect::Write
    }

    /// The latency `plan` assumes: `expected`, else what its kind says (a scripted latency).
    pub fn estimate(&self) -> Option<Duration> {
        self.expected.or_else(|| self.kind.estimate())
    }

    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// Its kind's settings as type `S` — `None` when the tool is of another kind.
    pub fn settings_of<S: 'static>(&self) -> Option<&S> {
        self.kind.as_any().downcast_ref::<S>()
    }
}

/// `[mcp_servers.NAME]`.
#[derive(Debug, Clone)]
pub struct McpServer {
    pub name: String,
    /// The manifest's folder: a stdio server runs there, and a relative program path
    /// (`./bin/server`) resolves against it, as a command tool's does.
    pub dir: std::path::PathBuf,
    pub command: Option<Vec<Template>>,
    pub url: Option<Template>,
    pub env: BTreeMap<String, Template>,
    pub headers: BTreeMap<String, Template>,
    /// `whole = true`: every tool, resource and prompt it offers is served.
    pub whole: Option<Whole>,
    /// `processes = N` (a stdio server that keeps no state of its own): up to N processes,
    /// started as calls need them; reads spread over them, everything else goes to the first.
    pub processes: u32,
    /// `auth = "oauth" | "client_credentials"`: the OAuth access token it wants.
    pub auth: Option<UpstreamAuth>,
    /// `protocol_version`: the MCP revision offered in `initialize` (rmcp's newest otherwise;
    /// the server's answer is taken down to any revision rmcp speaks).
    pub protocol_version: Option<String>,
}

/// `[serve]`: `mcp serve`'s settings that belong with the tools.
#[derive(Debug, Clone, Default)]
pub struct Serve {
    /// `approval_in_band = true`: a client that supports MCP elicitation is asked to approve
    /// a call itself (else every approval is out of band: `flux-tools approve`).
    pub approval_in_band: bool,
    /// `approval_timeout = "10m"`: how long a call waits for approval before it is refused.
    pub approval_timeout: Option<Duration>,
    /// `task_after = "1s"`: how long a call of a client that takes tasks (the tasks
    /// extension) may wait in its lanes before it is answered as a task.
    pub task_after: Option<Duration>,
    /// `admin_token = "${env:…}"`: who may answer approvals on the status page.
    pub admin_token: Option<Template>,
    /// `[serve.tokens]`: tenant → the bearer token an HTTP client of that tenant sends
    /// (`${env:…}`, never printed).
    pub tokens: BTreeMap<String, Template>,
    /// `[serve.tokens] TENANT = { token, roles }`: the roles of a tenant's static token.
    pub token_roles: BTreeMap<String, Vec<String>>,
    /// `[serve.auth]`: JWT access tokens from an OAuth 2.1 authorization server.
    pub auth: Option<Auth>,
    /// `[serve.session]`: what one client session may spend.
    pub session: SessionLimits,
    /// `[serve.limits]`: what the gateway holds for its clients, each bounded.
    pub limits: ServeLimits,
    /// `pin = "strict" | "new-allowed" | "off"`: how `tools.lock` is held to (absent: strict
    /// when there is a lock, off when there is none).
    pub pin: Option<Pin>,
}

/// `[serve] pin`: what a definition `tools.lock` does not pin as it is gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// Held back, changed or new (no lock: everything is new).
    Strict,
    /// A changed one held back; a tool new to the lock served.
    NewAllowed,
    /// The lock is not read: everything is served as the servers offer it.
    Off,
}

/// `[serve.limits]`: the bounds of a gateway shared by careless and hostile clients.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeLimits {
    /// Live HTTP sessions in all, and of one tenant.
    pub sessions: u32,
    pub sessions_per_tenant: u32,
    /// How long an HTTP session may be idle before its state is let go (a request that comes
    /// back with its id later opens it again).
    pub session_idle: Duration,
    /// Calls waiting for approval at once, of one session and of one tenant.
    pub parked_per_session: u32,
    pub parked_per_tenant: u32,
    /// Open connections from one client address.
    pub connections_per_client: u32,
    /// How long a request's headers, and then its body, may take to arrive.
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// How long a client's `_meta.idempotencyKey` and its answer are remembered, and how many
    /// keys one gateway process remembers (with the `local` store; Redis keeps its own).
    pub keys_kept: Duration,
    pub keys: u32,
    /// How long a shared store (Redis) keeps an HTTP session after its last request, for any
    /// replica to serve it.
    pub session_kept: Duration,
    /// How long a task (a call answered as one) is kept, at most, and how many of one tenant
    /// may be unfinished at once in one gateway process.
    pub tasks_kept: Duration,
    pub tasks_per_tenant: u32,
    /// How long a 2026-07-28 client's call whose server asked it something waits for the
    /// follow-up request that answers, and how many of one tenant may wait at once.
    pub answer_wait: Duration,
    pub asking_per_tenant: u32,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            sessions: 1024,
            sessions_per_tenant: 256,
            session_idle: Duration::from_secs(30 * 60),
            parked_per_session: 100,
            parked_per_tenant: 10_000,
            keys_kept: Duration::from_secs(24 * 3600),
            keys: 100_000,
            session_kept: Duration::from_secs(24 * 3600),
            tasks_kept: Duration::from_secs(3600),
            tasks_per_tenant: 1000,
            answer_wait: Duration::from_secs(5 * 60),
            asking_per_tenant: 1000,
            connections_per_client: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// `approval` of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Not written: `requires_approval` decides (and, in `mcp serve`, an upstream's
    /// `destructiveHint`).
    #[default]
    Unset,
    /// `"none"`: never asked, whatever an upstream says.
    None,
    /// `"required"`: asked — in `mcp serve`, through the client when the manifest allows it
    /// and the client can, else out of band.
    Required,
    /// `"out_of_band"`: asked only out of band (`flux-tools approve`); an answer through the
    /// client counts for nothing.
    OutOfBand,
}

impl Approval {
    pub fn parse(s: &str) -> Option<Approval> {
        match s {
            "none" => Some(Approval::None),
            "required" => Some(Approval::Required),
            "out_of_band" => Some(Approval::OutOfBand),
            _ => None,
        }
    }
}

/// `[serve.session]`: limits on one MCP client session of the gateway, reserved before a call
/// is dispatched and given back if it never runs.
#[derive(Debug, Clone, Default)]
pub struct SessionLimits {
    /// `max_calls`: the most calls a session may make.
    pub max_calls: Option<u32>,
    /// `max_cost`: the most a session may spend (the sum of its calls' `cost`).
    pub max_cost: Option<f64>,
    /// `per_tool = { NAME = N }`: the most calls of one tool a session may make.
    pub per_tool: BTreeMap<String, u32>,
}

/// `[hooks]`.
#[derive(Debug, Clone)]
pub struct Hooks {
    pub before_call: Option<Vec<Template>>,
    pub after_call: Option<Vec<Template>>,
    /// `hook_timeout`: the most a hook may take, start to exit (default 30 s); past it the
    /// hook's process group is killed.
    pub timeout: Duration,
}

/// Default `hook_timeout`.
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Hooks {
    fn default() -> Hooks {
        Hooks {
            before_call: None,
            after_call: None,
            timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }
}

const TOP_KEYS: &[&str] = &[
    "concurrency",
    "deadline",
    "lanes",
    "tools",
    "mcp_servers",
    "hooks",
    "budget",
    "history",
    "models",
    "serve",
    "tenants",
    "roles",
];

/// `[models."NAME"]`: what a model's tokens cost, per million.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ModelPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Manifest {
    /// A fingerprint of the manifest's text (a journal belongs to one manifest; the history
    /// names the manifest a run used).
    pub fn fingerprint(&self) -> String {
        crate::hash::fnv_hex(self.file.text.as_bytes())
    }

    /// Tenant `name`'s weight in lanes it shares with other tenants.
    pub fn tenant_weight(&self, name: &str) -> u32 {
        self.tenants.get(name).copied().unwrap_or(1).max(1)
    }

    /// The price of `model`: its own entry, else the longest entry its name starts with
    /// (`gpt-4o` prices `gpt-4o-2024-08-06`).
    pub fn model_price(&self, model: &str) -> Option<ModelPrice> {
        if let Some(p) = self.models.get(model) {
            return Some(*p);
        }
        self.models
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p)
    }
}

/// A tool name every provider accepts: OpenAI's and Anthropic's `^[a-zA-Z0-9_-]{1,64}$`, and
/// Gemini's first character (a letter or `_`). Other characters become `_`
/// (`db.getOrders` → `db_getOrders`).
pub(crate) fn export_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert_str(0, "t_");
    }
    out.truncate(64);
    out
}

/// Each tool whose name needs [`export_name`], by its exported name (the first tool wins a
/// name two would share; none takes a real tool's name).
fn aliases(tools: &[Tool], index: &HashMap<String, usize>) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for (i, t) in tools.iter().enumerate() {
        let safe = export_name(&t.name);
        if safe != t.name && !index.contains_key(&safe) {
            out.entry(safe).or_insert(i);
        }
    }
    out
}

/// `[budget]`: limits on a whole run, and on a tenant over time.
#[derive(Debug, Clone, Default)]
pub struct Budget {
    /// `max_calls`: the most calls a run may invoke (cache hits do not count).
    pub max_calls: Option<u32>,
    /// `per_tenant = { max_cost = 5.0, window = "1h" }`: what one tenant's calls may cost
    /// over any sliding window, counted in the lane store by every run and gateway.
    pub per_tenant: Option<TenantWindow>,
}

/// A tenant's spend over a sliding window.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantWindow {
    pub max_cost: f64,
    pub window: Duration,
    /// The window as written (`"1h"`), for messages.
    pub window_text: String,
}

impl Manifest {
    /// Read and parse the manifest at `path`, whose tools may be of the `kinds` given.
    pub fn load(path: &Path, kinds: &Kinds) -> Result<Manifest, Vec<Diagnostic>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![
                Diagnostic::error(format!("cannot read manifest `{}`: {e}", path.display()))
                    .hint("pass --manifest PATH, set FLUX_TOOLS_MANIFEST, or create tools.toml"),
            ]
        })?;
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        Manifest::parse(
            SourceFile::new(path.display().to_string(), text),
            canonical,
            kinds,
        )
    }

    /// Parse manifest text. `Err` carries every error (and the warnings found with them).
    pub fn parse(
        file: SourceFile,
        path: PathBuf,
        kinds: &Kinds,
    ) -> Result<Manifest, Vec<Diagnostic>> {
        let text = file.text.clone();
        let doc = match DeTable::parse(&text) {
            Ok(d) => d,
            Err(e) => {
                let loc = e.span().map(|s| file.location(s.start, s.end));
                let msg = e.message().trim().to_string();
                return Err(vec![Diagnostic::error(format!("invalid TOML: {msg}"))
                    .at(loc)
                    .in_file(&file.name)]);
            }
        };
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut r = Reader {
            file: &file,
            diags: Vec::new(),
            kinds,
        };
        let root = doc.get_ref();
        r.check_keys(root, TOP_KEYS, "the manifest");

        let concurrency = r.concurrency(root);
        let deadline = match r.table(root, "deadline", "the manifest") {
            Some(t) => {
                r.check_keys(t, &["run_seconds", "tool_call_seconds"], "[deadline]");
                Deadline {
                    run: r.seconds(t, "run_seconds", "[deadline]"),
                    tool_call: r.seconds(t, "tool_call_seconds", "[deadline]"),
                }
            }
            None => Deadline::default(),
        };
        let budget = r.budget(root);
        let tenants = r.tenants(root);
        let history = r.history(root, &base);
        let models = r.models(root);
        let lanes = r.lanes(root);
        let mcp_servers = r.mcp_servers(root, &base);
        let hooks = r.hooks(root);
        let serve = r.serve(root);
        let roles = r.roles(root);
        let mut tools = Vec::new();
        if let Some(t) = r.table(root, "tools", "the manifest") {
            for (key, value) in t.iter() {
                let name = key.get_ref().to_string();
                let ctx = format!("[tools.{}]", quote_key(&name));
                match value.get_ref() {
                    DeValue::Table(tt) => {
                        if let Some(tool) = r.tool(&name, &ctx, tt, key.span(), &base) {
                            tools.push(tool);
                        }
                    }
                    other => r.type_error(value.span(), &ctx, "a table", other),
                }
            }
        }
        let mut m = Manifest {
            aliases: HashMap::new(),
            file: file.clone(),
            path,
            concurrency,
            deadline,
            budget,
            history,
            models,
            lanes,
            tools,
            tool_index: HashMap::new(),
            mcp_servers,
            hooks,
            serve,
            tenants,
            roles,
            warnings: Vec::new(),
        };
        m.reindex();
        r.cross_checks(&m, root);
        let mut diags = r.diags;
        m.warnings = diags.iter().filter(|d| !d.is_error()).cloned().collect();
        if diags.iter().any(Diagnostic::is_error) {
            diags.sort_by_key(|d| d.severity);
            return Err(diags);
        }
        Ok(m)
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tool_position(name).map(|i| &self.tools[i])
    }

    /// The tool called `name`, or exported to models as `name` (see [`export_name`]).
    pub fn tool_position(&self, name: &str) -> Option<usize> {
        self.tool_index
            .get(name)
            .or_else(|| self.aliases.get(name))
            .copied()
    }

    /// "did you mean `search`?" for an unknown tool name.
    pub fn suggest_tool(&self, name: &str) -> Option<String> {
        suggest(name, self.tools.iter().map(|t| t.name.as_str()))
    }

    /// `--tools`: the positions of the tools `select` names (manifest or exported names, each
    /// once, in the order given), else of every tool. `Err` names an unknown one, with a
    /// suggestion.
    pub fn select_tools(&self, select: Option<&[String]>) -> Result<Vec<usize>, String> {
        let Some(names) = select else {
            return Ok((0..self.tools.len())
                .filter(|&i| self.tools[i].listed)
                .collect());
        };
        let mut out = Vec::new();
        for n in names {
            let Some(i) = self.tool_position(n).filter(|&i| self.tools[i].listed) else {
                let hint = self
                    .suggest_tool(n)
                    .map_or_else(String::new, |h| format!(" ({h})"));
                return Err(format!("--tools: no tool `{n}` in the manifest{hint}"));
            };
            if !out.contains(&i) {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// The manifest's file name, for messages.
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// Index the tools by name and by the name a model knows them by.
    fn reindex(&mut self) {
        self.tool_index = (self.tools.iter().enumerate())
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        self.aliases = aliases(&self.tools, &self.tool_index);
    }
}
