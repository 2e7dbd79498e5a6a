//! The tool manifest (`tools.toml`): concurrency lanes, deadlines, shared lanes, tools of four
//! kinds, MCP servers and hooks, parsed into a typed [`Manifest`].
//!
//! Parsing walks `toml`'s spanned document tree by hand instead of using `#[derive(Deserialize)]`
//! so that *every* problem — an unknown field, a wrong type, a lane nobody declared, a rate that
//! does not parse — is reported at once with its line, column and a hint. Defaults are SPEC
//! section 2's: `effect = "write"`, `idempotent` = (effect is read), `parallel_safe = true`.
//! `${env:NAME}` secrets stay unresolved ([`Template`]) until a call is invoked.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::duration;
use crate::error::{suggest, Diagnostic, SourceFile};
use crate::schema::{ArgSchema, ArgSpec, ArgType};
use crate::template::Template;

/// The parsed manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub file: SourceFile,
    /// Canonical path, used to key lanes shared across processes.
    pub path: PathBuf,
    pub concurrency: Concurrency,
    pub deadline: Deadline,
    pub lanes: BTreeMap<String, LaneDecl>,
    pub tools: Vec<Tool>,
    pub tool_index: HashMap<String, usize>,
    pub mcp_servers: BTreeMap<String, McpServer>,
    pub hooks: Hooks,
    /// Warnings found while parsing (undeclared effects, unbounded turn lane, …).
    pub warnings: Vec<Diagnostic>,
}

/// `[concurrency]`: the runner's ceiling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Concurrency {
    pub max_concurrent_tools: Option<u32>,
    pub per_tenant: Option<u32>,
    pub per_tool: BTreeMap<String, u32>,
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
    pub concurrency: Option<u32>,
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
    pub kind: ToolKind,
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
    pub weight: u32,
    pub retries: u32,
    pub cost: f64,
    pub expected: Option<Duration>,
    pub requires_approval: bool,
    pub args: Option<ArgSchema>,
    /// Byte span of the `[tools.NAME]` key, for diagnostics.
    pub span: Range<usize>,
}

impl Tool {
    pub fn is_write(&self) -> bool {
        self.effect == Effect::Write
    }

    /// The latency `plan` assumes: `expected`, else a scripted tool's `latency`.
    pub fn estimate(&self) -> Option<Duration> {
        self.expected.or(match &self.kind {
            ToolKind::Scripted(s) if !s.hang => Some(s.latency),
            _ => None,
        })
    }

    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            ToolKind::Command(_) => "command",
            ToolKind::Http(_) => "http",
            ToolKind::Mcp(_) => "mcp",
            ToolKind::Scripted(_) => "scripted",
        }
    }
}

/// The four tool kinds and their own settings.
#[derive(Debug, Clone)]
pub enum ToolKind {
    Command(CommandSpec),
    Http(HttpSpec),
    Mcp(McpSpec),
    Scripted(ScriptedSpec),
}

/// `kind = "command"`.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    pub argv: Vec<Template>,
    pub stdin_json: bool,
    pub env: BTreeMap<String, Template>,
    /// Absolute (resolved against the manifest's folder).
    pub cwd: Option<PathBuf>,
    pub max_output: u64,
    pub kill_grace: Duration,
    pub retry_on_exit: Vec<i32>,
}

/// `kind = "http"`.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    pub method: String,
    /// Placeholders only in the path and query: an argument can never choose the host.
    pub url: Template,
    pub max_output: u64,
    pub headers: BTreeMap<String, Template>,
    pub body_json: bool,
    pub query: Vec<String>,
}

/// `kind = "mcp"`.
#[derive(Debug, Clone)]
pub struct McpSpec {
    pub server: String,
    pub tool: String,
}

/// `kind = "scripted"`.
#[derive(Debug, Clone)]
pub struct ScriptedSpec {
    pub latency: Duration,
    pub output: Option<Value>,
    pub fail: Option<String>,
    pub hang: bool,
}

/// `[mcp_servers.NAME]`.
#[derive(Debug, Clone)]
pub struct McpServer {
    pub name: String,
    pub command: Option<Vec<Template>>,
    pub url: Option<Template>,
    pub env: BTreeMap<String, Template>,
    pub headers: BTreeMap<String, Template>,
}

/// `[hooks]`.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    pub before_call: Option<Vec<Template>>,
    pub after_call: Option<Vec<Template>>,
}

/// Default bound on a command's captured output.
pub const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;
/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

const TOP_KEYS: &[&str] = &[
    "concurrency",
    "deadline",
    "lanes",
    "tools",
    "mcp_servers",
    "hooks",
];
const COMMON_TOOL_KEYS: &[&str] = &[
    "kind",
    "description",
    "effect",
    "idempotent",
    "parallel_safe",
    "concurrent_writes",
    "timeout",
    "lanes",
    "weight",
    "retries",
    "cost",
    "expected",
    "requires_approval",
    "args",
];
const COMMAND_KEYS: &[&str] = &[
    "command",
    "stdin",
    "env",
    "cwd",
    "max_output",
    "kill_grace",
    "retry_on_exit",
];
const HTTP_KEYS: &[&str] = &["method", "url", "headers", "body", "query", "max_output"];
const MCP_KEYS: &[&str] = &["server", "tool"];
const SCRIPTED_KEYS: &[&str] = &["latency", "output", "fail", "hang"];
const KINDS: &[&str] = &["command", "http", "mcp", "scripted"];

impl Manifest {
    /// Read and parse the manifest at `path`.
    pub fn load(path: &Path) -> Result<Manifest, Vec<Diagnostic>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![
                Diagnostic::error(format!("cannot read manifest `{}`: {e}", path.display()))
                    .hint("pass --manifest PATH, set FLUX_TOOLS_MANIFEST, or create tools.toml"),
            ]
        })?;
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        Manifest::parse(SourceFile::new(path.display().to_string(), text), canonical)
    }

    /// Parse manifest text. `Err` carries every error (and the warnings found with them).
    pub fn parse(file: SourceFile, path: PathBuf) -> Result<Manifest, Vec<Diagnostic>> {
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
        let lanes = r.lanes(root);
        let mcp_servers = r.mcp_servers(root);
        let hooks = r.hooks(root);
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
        let tool_index: HashMap<String, usize> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();

        let mut m = Manifest {
            file: file.clone(),
            path,
            concurrency,
            deadline,
            lanes,
            tools,
            tool_index,
            mcp_servers,
            hooks,
            warnings: Vec::new(),
        };
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
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// "did you mean `search`?" for an unknown tool name.
    pub fn suggest_tool(&self, name: &str) -> Option<String> {
        suggest(name, self.tools.iter().map(|t| t.name.as_str()))
    }

    /// The manifest's file name, for messages.
    pub fn name(&self) -> &str {
        &self.file.name
    }
}

fn quote_key(k: &str) -> String {
    if k.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        format!("\"{k}\"")
    }
}

/// Walks the spanned TOML tree, collecting diagnostics.
struct Reader<'a> {
    file: &'a SourceFile,
    diags: Vec<Diagnostic>,
}

type Entry<'a, 'i> = (
    &'a Spanned<std::borrow::Cow<'i, str>>,
    &'a Spanned<DeValue<'i>>,
);

impl<'a> Reader<'a> {
    fn error(&mut self, span: Range<usize>, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.file.location(span.start, span.end);
        self.diags
            .push(Diagnostic::error(msg).at(Some(loc)).maybe_hint(hint));
    }

    fn warn(&mut self, span: Range<usize>, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.file.location(span.start, span.end);
        self.diags
            .push(Diagnostic::warning(msg).at(Some(loc)).maybe_hint(hint));
    }

    fn type_error(&mut self, span: Range<usize>, ctx: &str, want: &str, got: &DeValue<'_>) {
        self.error(
            span,
            format!("{ctx} should be {want}, found {}", de_kind(got)),
            None,
        );
    }

    fn entry<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<Entry<'t, 'i>> {
        t.iter().find(|(k, _)| k.get_ref().as_ref() == key)
    }

    fn check_keys(&mut self, t: &DeTable<'_>, allowed: &[&str], ctx: &str) {
        for (k, _) in t.iter() {
            let key = k.get_ref().as_ref();
            if !allowed.contains(&key) {
                let hint = suggest(key, allowed.iter().copied())
                    .or_else(|| Some(format!("known fields: {}", allowed.join(", "))));
                self.error(k.span(), format!("unknown field `{key}` in {ctx}"), hint);
            }
        }
    }

    fn table<'t, 'i>(
        &mut self,
        t: &'t DeTable<'i>,
        key: &str,
        ctx: &str,
    ) -> Option<&'t DeTable<'i>> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::Table(tt) => Some(tt),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a table", other);
                None
            }
        }
    }

    fn string(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<(String, Range<usize>)> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a string", other);
                None
            }
        }
    }

    fn boolean(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<bool> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.type_error(
                    v.span(),
                    &format!("`{key}` in {ctx}"),
                    "true or false",
                    other,
                );
                None
            }
        }
    }

    fn int(&mut self, v: &Spanned<DeValue<'_>>, ctx: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.error(v.span(), format!("{ctx} is out of range"), None);
                    None
                }
            },
            other => {
                self.type_error(v.span(), ctx, "an integer", other);
                None
            }
        }
    }

    /// A positive count (concurrency limits, weights, bursts): 1 ..= 1,000,000.
    fn count(&mut self, v: &Spanned<DeValue<'_>>, ctx: &str) -> Option<u32> {
        let n = self.int(v, ctx)?;
        if !(1..=1_000_000).contains(&n) {
            self.error(
                v.span(),
                format!("{ctx} is {n}; it must be between 1 and 1000000"),
                (n == 0).then(|| "leave the field out for no limit".to_string()),
            );
            return None;
        }
        u32::try_from(n).ok()
    }

    fn count_field(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<u32> {
        let (_, v) = Self::entry(t, key)?;
        self.count(v, &format!("`{key}` in {ctx}"))
    }

    fn number(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<(f64, Range<usize>)> {
        let (_, v) = Self::entry(t, key)?;
        let n = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a number", other);
                return None;
            }
        };
        match n {
            Some(n) if n.is_finite() => Some((n, v.span())),
            _ => {
                self.error(
                    v.span(),
                    format!("`{key}` in {ctx} is not a finite number"),
                    None,
                );
                None
            }
        }
    }

    fn seconds(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<Duration> {
        let (n, span) = self.number(t, key, ctx)?;
        match duration::from_secs_f64(n) {
            Some(d) if n > 0.0 => Some(d),
            _ => {
                self.error(
                    span,
                    format!("`{key}` in {ctx} must be a positive number of seconds"),
                    None,
                );
                None
            }
        }
    }

    fn duration(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<(Duration, String)> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::String(s) => match duration::parse(s) {
                Ok(d) => Some((d, s.to_string())),
                Err(e) => {
                    self.error(v.span(), format!("`{key}` in {ctx}: {e}"), None);
                    None
                }
            },
            other => {
                self.type_error(
                    v.span(),
                    &format!("`{key}` in {ctx}"),
                    "a duration string like \"5s\"",
                    other,
                );
                None
            }
        }
    }

    fn strings(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> Option<Vec<(String, Range<usize>)>> {
        let (_, v) = Self::entry(t, key)?;
        let DeValue::Array(items) = v.get_ref() else {
            self.type_error(
                v.span(),
                &format!("`{key}` in {ctx}"),
                "an array of strings",
                v.get_ref(),
            );
            return None;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), item.span())),
                other => self.type_error(
                    item.span(),
                    &format!("each of `{key}` in {ctx}"),
                    "a string",
                    other,
                ),
            }
        }
        Some(out)
    }

    fn template(&mut self, text: &str, span: Range<usize>, placeholders: bool) -> Template {
        match Template::parse(text, placeholders) {
            Ok(t) => t,
            Err(e) => {
                self.error(span, e, None);
                Template {
                    segments: Vec::new(),
                }
            }
        }
    }

    fn templates(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
        placeholders: bool,
    ) -> Option<Vec<Template>> {
        let items = self.strings(t, key, ctx)?;
        Some(
            items
                .into_iter()
                .map(|(s, span)| self.template(&s, span, placeholders))
                .collect(),
        )
    }

    fn template_map(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> BTreeMap<String, Template> {
        let mut out = BTreeMap::new();
        if let Some(tt) = self.table(t, key, ctx) {
            for (k, v) in tt.iter() {
                match v.get_ref() {
                    DeValue::String(s) => {
                        let tpl = self.template(s, v.span(), false);
                        out.insert(k.get_ref().to_string(), tpl);
                    }
                    other => self.type_error(
                        v.span(),
                        &format!("`{key}.{}` in {ctx}", k.get_ref()),
                        "a string",
                        other,
                    ),
                }
            }
        }
        out
    }

    fn concurrency(&mut self, root: &DeTable<'_>) -> Concurrency {
        let mut c = Concurrency::default();
        let Some(t) = self.table(root, "concurrency", "the manifest") else {
            return c;
        };
        let ctx = "[concurrency]";
        self.check_keys(t, &["max_concurrent_tools", "per_tenant", "per_tool"], ctx);
        c.max_concurrent_tools = self.count_field(t, "max_concurrent_tools", ctx);
        c.per_tenant = self.count_field(t, "per_tenant", ctx);
        if let Some(pt) = self.table(t, "per_tool", ctx) {
            for (k, v) in pt.iter() {
                let name = k.get_ref().to_string();
                if let Some(n) = self.count(v, &format!("`per_tool.{name}`")) {
                    c.per_tool.insert(name, n);
                }
            }
        }
        c
    }

    fn lanes(&mut self, root: &DeTable<'_>) -> BTreeMap<String, LaneDecl> {
        let mut out = BTreeMap::new();
        let Some(t) = self.table(root, "lanes", "the manifest") else {
            return out;
        };
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            let ctx = format!("[lanes.{}]", quote_key(&name));
            let DeValue::Table(lt) = v.get_ref() else {
                self.type_error(v.span(), &ctx, "a table", v.get_ref());
                continue;
            };
            self.check_keys(lt, &["concurrency", "rate", "burst"], &ctx);
            let rate = self
                .string(lt, "rate", &ctx)
                .and_then(|(s, span)| match Rate::parse(&s) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        self.error(span, format!("`rate` in {ctx}: {e}"), None);
                        None
                    }
                });
            let lane = LaneDecl {
                name: name.clone(),
                concurrency: self.count_field(lt, "concurrency", &ctx),
                rate,
                burst: self.count_field(lt, "burst", &ctx),
            };
            if lane.burst.is_some() && lane.rate.is_none() {
                if let Some((bk, _)) = Self::entry(lt, "burst") {
                    self.error(bk.span(), format!("`burst` in {ctx} needs a `rate`"), None);
                }
            }
            out.insert(name, lane);
        }
        out
    }

    fn mcp_servers(&mut self, root: &DeTable<'_>) -> BTreeMap<String, McpServer> {
        let mut out = BTreeMap::new();
        let Some(t) = self.table(root, "mcp_servers", "the manifest") else {
            return out;
        };
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            let ctx = format!("[mcp_servers.{}]", quote_key(&name));
            let DeValue::Table(st) = v.get_ref() else {
                self.type_error(v.span(), &ctx, "a table", v.get_ref());
                continue;
            };
            self.check_keys(st, &["command", "url", "env", "headers"], &ctx);
            let command = self.templates(st, "command", &ctx, false);
            let url = self
                .string(st, "url", &ctx)
                .map(|(s, span)| self.template(&s, span, false));
            if command.is_some() == url.is_some() {
                self.error(
                    k.span(),
                    format!(
                        "{ctx} needs exactly one of `command` (stdio) or `url` (streamable HTTP)"
                    ),
                    None,
                );
            }
            if command.as_ref().is_some_and(Vec::is_empty) {
                self.error(v.span(), format!("`command` in {ctx} is empty"), None);
            }
            out.insert(
                name.clone(),
                McpServer {
                    name,
                    command,
                    url,
                    env: self.template_map(st, "env", &ctx),
                    headers: self.template_map(st, "headers", &ctx),
                },
            );
        }
        out
    }

    fn hooks(&mut self, root: &DeTable<'_>) -> Hooks {
        let Some(t) = self.table(root, "hooks", "the manifest") else {
            return Hooks::default();
        };
        self.check_keys(t, &["before_call", "after_call"], "[hooks]");
        let mut h = Hooks {
            before_call: self.templates(t, "before_call", "[hooks]", false),
            after_call: self.templates(t, "after_call", "[hooks]", false),
        };
        for (key, hook) in [
            ("before_call", &mut h.before_call),
            ("after_call", &mut h.after_call),
        ] {
            if hook.as_ref().is_some_and(Vec::is_empty) {
                if let Some((k, _)) = Self::entry(t, key) {
                    self.error(k.span(), format!("`{key}` in [hooks] is empty"), None);
                }
                *hook = None;
            }
        }
        h
    }

    fn tool(
        &mut self,
        name: &str,
        ctx: &str,
        t: &DeTable<'_>,
        span: Range<usize>,
        base: &Path,
    ) -> Option<Tool> {
        if name.is_empty() {
            self.error(span.clone(), "a tool name cannot be empty", None);
        }
        let kind_name = match self.string(t, "kind", ctx) {
            Some((k, _)) if KINDS.contains(&k.as_str()) => k,
            Some((k, kspan)) => {
                self.error(
                    kspan,
                    format!("unknown tool kind `{k}` in {ctx}"),
                    suggest(&k, KINDS.iter().copied())
                        .or_else(|| Some("kinds are command, http, mcp and scripted".into())),
                );
                return None;
            }
            None => {
                if Self::entry(t, "kind").is_none() {
                    self.error(
                        span,
                        format!("{ctx} has no `kind`"),
                        Some("add kind = \"command\", \"http\", \"mcp\" or \"scripted\"".into()),
                    );
                }
                return None;
            }
        };
        let own: &[&str] = match kind_name.as_str() {
            "command" => COMMAND_KEYS,
            "http" => HTTP_KEYS,
            "mcp" => MCP_KEYS,
            _ => SCRIPTED_KEYS,
        };
        for (k, _) in t.iter() {
            let key = k.get_ref().as_ref();
            if COMMON_TOOL_KEYS.contains(&key) || own.contains(&key) {
                continue;
            }
            let other_kind = [
                ("command", COMMAND_KEYS),
                ("http", HTTP_KEYS),
                ("mcp", MCP_KEYS),
                ("scripted", SCRIPTED_KEYS),
            ]
            .into_iter()
            .find(|(_, keys)| keys.contains(&key))
            .map(|(kn, _)| kn);
            let all: Vec<&str> = COMMON_TOOL_KEYS.iter().chain(own.iter()).copied().collect();
            let hint = match other_kind {
                Some(kn) => Some(format!(
                    "`{key}` belongs to {kn} tools; this tool is kind = \"{kind_name}\""
                )),
                None => suggest(key, all.iter().copied()),
            };
            self.error(k.span(), format!("unknown field `{key}` in {ctx}"), hint);
        }

        let kind = match kind_name.as_str() {
            "command" => ToolKind::Command(self.command_spec(t, ctx, span.clone(), base)),
            "http" => ToolKind::Http(self.http_spec(t, ctx, span.clone())),
            "mcp" => ToolKind::Mcp(McpSpec {
                server: match self.string(t, "server", ctx) {
                    Some((s, _)) => s,
                    None => {
                        self.error(
                            span.clone(),
                            format!("{ctx} has no `server`"),
                            Some("name one of [mcp_servers.*]".into()),
                        );
                        String::new()
                    }
                },
                tool: self
                    .string(t, "tool", ctx)
                    .map_or_else(|| name.to_string(), |(s, _)| s),
            }),
            _ => ToolKind::Scripted(ScriptedSpec {
                latency: self
                    .duration(t, "latency", ctx)
                    .map_or(Duration::ZERO, |(d, _)| d),
                output: Self::entry(t, "output").map(|(_, v)| de_to_json(v.get_ref())),
                fail: self.string(t, "fail", ctx).map(|(s, _)| s),
                hang: self.boolean(t, "hang", ctx).unwrap_or(false),
            }),
        };

        let effect_decl = self
            .string(t, "effect", ctx)
            .and_then(|(s, es)| match s.as_str() {
                "read" => Some(Effect::Read),
                "write" => Some(Effect::Write),
                _ => {
                    self.error(
                        es,
                        format!("`effect` in {ctx} is `{s}`; use \"read\" or \"write\""),
                        None,
                    );
                    None
                }
            });
        let effect = effect_decl.unwrap_or(Effect::Write);
        // An MCP tool's annotations supply these defaults at run time (issue 5); until then
        // the manifest's silence means "write".
        if effect_decl.is_none() && !matches!(kind, ToolKind::Mcp(_)) {
            self.warn(
                span.clone(),
                format!("tool `{name}` does not declare `effect`; it is treated as a write"),
                Some("add effect = \"read\" if it changes nothing".into()),
            );
        }
        let idempotent_decl = self.boolean(t, "idempotent", ctx);
        let idempotent = idempotent_decl.unwrap_or(effect == Effect::Read);
        let concurrent_writes = self.boolean(t, "concurrent_writes", ctx).unwrap_or(false);
        if concurrent_writes && effect == Effect::Read {
            if let Some((k, _)) = Self::entry(t, "concurrent_writes") {
                self.warn(
                    k.span(),
                    format!("`concurrent_writes` in {ctx} has no effect on a read tool"),
                    None,
                );
            }
        }
        let retries = match Self::entry(t, "retries") {
            Some((_, v)) => match self.int(v, &format!("`retries` in {ctx}")) {
                Some(n) if (0..=100).contains(&n) => n as u32,
                Some(n) => {
                    self.error(
                        v.span(),
                        format!("`retries` in {ctx} is {n}; it must be between 0 and 100"),
                        None,
                    );
                    0
                }
                None => 0,
            },
            None => 0,
        };
        if retries > 0 && !idempotent {
            if let Some((k, _)) = Self::entry(t, "retries") {
                self.warn(
                    k.span(),
                    format!("tool `{name}` is not idempotent, so its `retries` are never used"),
                    Some("retrying a write could make it twice; declare idempotent = true if its server dedupes by Idempotency-Key".into()),
                );
            }
        }
        if effect == Effect::Write && !idempotent {
            self.warn(
                span.clone(),
                format!("write tool `{name}` has no idempotency protection"),
                Some("a call cut off in flight is reported indeterminate and never retried; declare idempotent = true if the tool dedupes by FLUX_IDEMPOTENCY_KEY / Idempotency-Key".into()),
            );
        }
        let cost = match self.number(t, "cost", ctx) {
            Some((c, _)) if c >= 0.0 => c,
            Some((_, cs)) => {
                self.error(cs, format!("`cost` in {ctx} cannot be negative"), None);
                0.0
            }
            None => 0.0,
        };
        let timeout = self.duration(t, "timeout", ctx);
        if let Some((d, _)) = &timeout {
            if d.is_zero() {
                if let Some((_, v)) = Self::entry(t, "timeout") {
                    self.error(
                        v.span(),
                        format!("`timeout` in {ctx} must be longer than zero"),
                        None,
                    );
                }
            }
        }
        let lanes = self.strings(t, "lanes", ctx).unwrap_or_default();
        let mut lane_names: Vec<String> = Vec::new();
        for (l, _) in &lanes {
            if !lane_names.contains(l) {
                lane_names.push(l.clone());
            }
        }
        let tool = Tool {
            name: name.to_string(),
            kind,
            description: self.string(t, "description", ctx).map(|(s, _)| s),
            effect,
            effect_origin: if effect_decl.is_some() {
                Origin::Manifest
            } else {
                Origin::Default
            },
            idempotent,
            idempotent_origin: if idempotent_decl.is_some() {
                Origin::Manifest
            } else {
                Origin::Default
            },
            parallel_safe: self.boolean(t, "parallel_safe", ctx).unwrap_or(true),
            concurrent_writes,
            timeout_text: timeout.as_ref().map(|(_, s)| s.clone()),
            timeout: timeout.map(|(d, _)| d),
            lanes: lane_names,
            weight: self.count_field(t, "weight", ctx).unwrap_or(1),
            retries,
            cost,
            expected: self.duration(t, "expected", ctx).map(|(d, _)| d),
            requires_approval: self.boolean(t, "requires_approval", ctx).unwrap_or(false),
            args: self.arg_schema(t, ctx),
            span,
        };
        // Lanes named but not declared are checked in `cross_checks`, once every lane is known.
        Some(tool)
    }

    fn command_spec(
        &mut self,
        t: &DeTable<'_>,
        ctx: &str,
        span: Range<usize>,
        base: &Path,
    ) -> CommandSpec {
        let argv = self.templates(t, "command", ctx, true).unwrap_or_default();
        if argv.is_empty() {
            self.error(
                span,
                format!("{ctx} needs `command`, the program and its arguments"),
                Some("e.g. command = [\"./bin/lookup\", \"--id\", \"{id}\"]".into()),
            );
        } else if argv[0].placeholders().next().is_some() {
            if let Some((_, v)) = Self::entry(t, "command") {
                self.error(
                    v.span(),
                    format!("the program in {ctx} cannot come from an argument"),
                    Some("a batch must never choose which program runs".into()),
                );
            }
        }
        let stdin_json = match self.string(t, "stdin", ctx) {
            Some((s, _)) if s == "json" => true,
            Some((s, _)) if s == "none" => false,
            Some((s, ss)) => {
                self.error(
                    ss,
                    format!("`stdin` in {ctx} is `{s}`; use \"json\" or \"none\""),
                    None,
                );
                true
            }
            None => true,
        };
        let max_output = self.max_output(t, ctx);
        let retry_on_exit = match Self::entry(t, "retry_on_exit") {
            Some((_, v)) => match v.get_ref() {
                DeValue::Array(items) => items
                    .iter()
                    .filter_map(|i| self.int(i, &format!("each of `retry_on_exit` in {ctx}")))
                    .filter_map(|n| i32::try_from(n).ok())
                    .collect(),
                other => {
                    self.type_error(
                        v.span(),
                        &format!("`retry_on_exit` in {ctx}"),
                        "an array of exit codes",
                        other,
                    );
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        CommandSpec {
            argv,
            stdin_json,
            env: self.template_map(t, "env", ctx),
            cwd: self.string(t, "cwd", ctx).map(|(s, _)| base.join(s)),
            max_output,
            kill_grace: self
                .duration(t, "kill_grace", ctx)
                .map_or(DEFAULT_KILL_GRACE, |(d, _)| d),
            retry_on_exit,
        }
    }

    /// `max_output = "1MiB"`: the most output a call may produce.
    fn max_output(&mut self, t: &DeTable<'_>, ctx: &str) -> u64 {
        match self.string(t, "max_output", ctx) {
            Some((s, ss)) => match parse_size(&s) {
                Some(n) if n > 0 => n,
                _ => {
                    self.error(
                        ss,
                        format!("`max_output` in {ctx}: `{s}` is not a size"),
                        Some("write it like \"1MiB\", \"512KiB\" or \"100000\"".into()),
                    );
                    DEFAULT_MAX_OUTPUT
                }
            },
            None => DEFAULT_MAX_OUTPUT,
        }
    }

    fn http_spec(&mut self, t: &DeTable<'_>, ctx: &str, span: Range<usize>) -> HttpSpec {
        let method = self
            .string(t, "method", ctx)
            .map_or_else(|| "GET".to_string(), |(s, _)| s.to_ascii_uppercase());
        let url = match self.string(t, "url", ctx) {
            Some((s, us)) => {
                let tpl = self.template(&s, us.clone(), true);
                if let Err(e) = check_url_template(&tpl) {
                    self.error(us, format!("`url` in {ctx}: {e}"), None);
                }
                tpl
            }
            None => {
                self.error(span, format!("{ctx} needs `url`"), None);
                Template {
                    segments: Vec::new(),
                }
            }
        };
        let body_json = match self.string(t, "body", ctx) {
            Some((s, _)) if s == "json" => true,
            Some((s, _)) if s == "none" => false,
            Some((s, bs)) => {
                self.error(
                    bs,
                    format!("`body` in {ctx} is `{s}`; use \"json\" or \"none\""),
                    None,
                );
                false
            }
            None => !matches!(method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS"),
        };
        let max_output = self.max_output(t, ctx);
        HttpSpec {
            method,
            url,
            max_output,
            headers: self.template_map(t, "headers", ctx),
            body_json,
            query: self
                .strings(t, "query", ctx)
                .unwrap_or_default()
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
        }
    }

    fn arg_schema(&mut self, t: &DeTable<'_>, ctx: &str) -> Option<ArgSchema> {
        let at = self.table(t, "args", ctx)?;
        let mut schema = ArgSchema::default();
        for (k, v) in at.iter() {
            let name = k.get_ref().to_string();
            let actx = format!("argument `{name}` of {ctx}");
            let DeValue::Table(spec) = v.get_ref() else {
                self.type_error(
                    v.span(),
                    &actx,
                    "a table like { type = \"string\", required = true }",
                    v.get_ref(),
                );
                continue;
            };
            self.check_keys(
                spec,
                &[
                    "type",
                    "required",
                    "min",
                    "max",
                    "min_length",
                    "max_length",
                    "enum",
                    "description",
                ],
                &actx,
            );
            let ty = match self.string(spec, "type", &actx) {
                Some((s, ts)) => match ArgType::parse(&s) {
                    Some(ty) => ty,
                    None => {
                        self.error(
                            ts,
                            format!("unknown type `{s}` for {actx}"),
                            suggest(&s, ArgType::NAMES),
                        );
                        ArgType::Any
                    }
                },
                None => ArgType::Any,
            };
            let length = |r: &mut Self, key: &str| -> Option<u64> {
                let (n, ns) = r.number(spec, key, &actx)?;
                if n < 0.0 || n.fract() != 0.0 {
                    r.error(
                        ns,
                        format!("`{key}` of {actx} must be a whole number"),
                        None,
                    );
                    return None;
                }
                Some(n as u64)
            };
            let min_length = length(self, "min_length");
            let max_length = length(self, "max_length");
            let one_of =
                Self::entry(spec, "enum").and_then(|(_, ev)| match de_to_json(ev.get_ref()) {
                    Value::Array(a) => Some(a),
                    _ => {
                        self.type_error(
                            ev.span(),
                            &format!("`enum` of {actx}"),
                            "an array",
                            ev.get_ref(),
                        );
                        None
                    }
                });
            schema.args.push(ArgSpec {
                ty,
                required: self.boolean(spec, "required", &actx).unwrap_or(false),
                min: self.number(spec, "min", &actx).map(|(n, _)| n),
                max: self.number(spec, "max", &actx).map(|(n, _)| n),
                min_length,
                max_length,
                one_of,
                description: self.string(spec, "description", &actx).map(|(s, _)| s),
                name,
            });
        }
        Some(schema)
    }

    /// Checks that need the whole manifest: lanes named by tools, per_tool names, weights
    /// against every lane limit, MCP servers named by tools, placeholders against schemas.
    fn cross_checks(&mut self, m: &Manifest, root: &DeTable<'_>) {
        let tools_table = Self::entry(root, "tools").and_then(|(_, v)| v.get_ref().as_table());
        for tool in &m.tools {
            let tt = tools_table
                .and_then(|t| Self::entry(t, &tool.name))
                .and_then(|(_, v)| v.get_ref().as_table());
            let lane_spans: Vec<(String, Range<usize>)> = tt
                .and_then(|t| Self::entry(t, "lanes"))
                .and_then(|(_, v)| {
                    v.get_ref().as_array().map(|a| {
                        a.iter()
                            .filter_map(|i| i.get_ref().as_str().map(|s| (s.to_string(), i.span())))
                            .collect()
                    })
                })
                .unwrap_or_default();
            for (lane, lspan) in &lane_spans {
                if !m.lanes.contains_key(lane) {
                    self.error(
                        lspan.clone(),
                        format!(
                            "tool `{}` draws on lane `{lane}`, which [lanes] does not declare",
                            tool.name
                        ),
                        suggest(lane, m.lanes.keys().map(String::as_str)).or_else(|| {
                            Some(format!(
                                "declare it: [lanes.{}] concurrency = 4",
                                quote_key(lane)
                            ))
                        }),
                    );
                }
            }
            let mut limits: Vec<(String, u32)> = Vec::new();
            if let Some(n) = m.concurrency.per_tenant {
                limits.push(("per_tenant".into(), n));
            }
            if let Some(n) = m.concurrency.max_concurrent_tools {
                limits.push(("max_concurrent_tools".into(), n));
            }
            if let Some(n) = m.concurrency.per_tool.get(&tool.name) {
                limits.push((format!("per_tool.{}", tool.name), *n));
            }
            for l in &tool.lanes {
                if let Some(n) = m.lanes.get(l).and_then(|d| d.concurrency) {
                    limits.push((format!("lane `{l}`"), n));
                }
            }
            for (what, n) in limits {
                if tool.weight > n {
                    self.error(
                        tool.span.clone(),
                        format!("tool `{}` has weight {}, more than {what} allows ({n}): it could never run", tool.name, tool.weight),
                        None,
                    );
                }
            }
            if let ToolKind::Mcp(spec) = &tool.kind {
                if !spec.server.is_empty() && !m.mcp_servers.contains_key(&spec.server) {
                    self.error(
                        tool.span.clone(),
                        format!(
                            "tool `{}` names MCP server `{}`, which [mcp_servers] does not declare",
                            tool.name, spec.server
                        ),
                        suggest(&spec.server, m.mcp_servers.keys().map(String::as_str)),
                    );
                }
            }
            let placeholders: Vec<&str> = match &tool.kind {
                ToolKind::Command(c) => c.argv.iter().flat_map(Template::placeholders).collect(),
                ToolKind::Http(h) => h.url.placeholders().collect(),
                _ => Vec::new(),
            };
            if let Some(schema) = &tool.args {
                for p in placeholders {
                    if !schema.args.iter().any(|a| a.name == p) {
                        self.error(
                            tool.span.clone(),
                            format!("tool `{}` uses placeholder `{{{p}}}`, which its [args] schema does not declare", tool.name),
                            suggest(p, schema.args.iter().map(|a| a.name.as_str())),
                        );
                    }
                }
            }
        }
        if let Some(ct) = Self::entry(root, "concurrency").and_then(|(_, v)| v.get_ref().as_table())
        {
            if let Some(pt) = Self::entry(ct, "per_tool").and_then(|(_, v)| v.get_ref().as_table())
            {
                for (k, _) in pt.iter() {
                    let name = k.get_ref().as_ref();
                    if m.tool(name).is_none() {
                        self.error(
                            k.span(),
                            format!("[concurrency.per_tool] limits `{name}`, which is not a tool"),
                            m.suggest_tool(name),
                        );
                    }
                }
            }
        }
        if m.concurrency.max_concurrent_tools.is_none() && !m.tools.is_empty() {
            self.diags.push(
                Diagnostic::warning("the turn lane is unbounded: [concurrency] sets no max_concurrent_tools")
                    .in_file(&m.file.name)
                    .hint("a model can ask for fifty calls at once; bound them with max_concurrent_tools = 8"),
            );
        }
    }
}

/// A TOML value as JSON (datetimes become strings).
pub fn de_to_json(v: &DeValue<'_>) -> Value {
    match v {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(i.to_string())),
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(a) => Value::Array(a.iter().map(|x| de_to_json(x.get_ref())).collect()),
        DeValue::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), de_to_json(v.get_ref())))
                .collect(),
        ),
    }
}

fn de_kind(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// An http tool's URL must be `http(s)://host…`, and every `{placeholder}` must come after the
/// host (in the path or query), so an argument can never choose where a request goes.
fn check_url_template(t: &Template) -> Result<(), String> {
    use crate::template::Segment;
    let mut prefix = String::new();
    for seg in &t.segments {
        match seg {
            Segment::Lit(l) => prefix.push_str(l),
            Segment::Env(_) => prefix.push_str("env"),
            Segment::Arg(a) => {
                let after_scheme = prefix.split_once("://").map(|(_, rest)| rest);
                if !after_scheme.is_some_and(|r| r.contains(['/', '?'])) {
                    return Err(format!("placeholder `{{{a}}}` is in the scheme or host; put arguments in the path or query"));
                }
                break;
            }
        }
    }
    let lower = t.redacted().to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("***"))
    {
        return Err("the URL must start with http:// or https://".into());
    }
    Ok(())
}

/// Parse a byte size: `1048576`, `512KiB`, `1MiB`, `10MB`, `1GiB`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}
