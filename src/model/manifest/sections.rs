//! The manifest's tables other than `[tools]`: `[concurrency]`, `[lanes]`, `[mcp_servers]`,
//! `[serve]`, `[hooks]`, `[history]`, `[models]`, `[budget]` and `[tenants]`.

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::reader::{quote_key, Reader};
use super::{
    Budget, Concurrency, Hazards, Hooks, LaneDecl, McpServer, ModelPrice, Rate, Serve, ServeLimits,
    SessionLimits, TenantWindow,
};
use crate::template::Template;

/// The MCP revisions a client may offer (`protocol_version`).
const PROTOCOL_VERSIONS: &[&str] = &[
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
];

/// The most processes one `[mcp_servers.NAME]` may have (`processes`).
const MOST_PROCESSES: u32 = 64;

impl Reader<'_> {
    pub(super) fn concurrency(&mut self, root: &DeTable<'_>) -> Concurrency {
        let mut c = Concurrency::default();
        let Some(t) = self.table(root, "concurrency", "the manifest") else {
            return c;
        };
        let ctx = "[concurrency]";
        self.check_keys(
            t,
            &["max_concurrent_tools", "per_tenant", "per_tool", "hazards"],
            ctx,
        );
        if let Some((h, span)) = self.string(t, "hazards", ctx) {
            match Hazards::parse(&h) {
                Some(h) => c.hazards = h,
                None => self.error(
                    span,
                    format!("`hazards` in {ctx} is `{h}`; use \"backend\" or \"writes\""),
                    crate::error::suggest(&h, ["backend", "writes"]),
                ),
            }
        }
        c.max_concurrent_tools = self.count_field(t, "max_concurrent_tools", ctx);
        c.per_tenant = self.count_field(t, "per_tenant", ctx);
        if let Some(pt) = self.table(t, "per_tool", ctx) {
            for (k, v) in pt.iter() {
                let name = k.get_ref().to_string();
                let (n, auto) = self.per_tool_limit(v, &format!("`per_tool.{name}`"));
                if let Some(a) = auto {
                    c.per_tool_auto.insert(name.clone(), a);
                }
                if let Some(n) = n {
                    c.per_tool.insert(name, n);
                }
            }
        }
        c
    }

    pub(super) fn lanes(&mut self, root: &DeTable<'_>) -> BTreeMap<String, LaneDecl> {
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
            self.check_keys(
                lt,
                &["concurrency", "rate", "burst", "min", "max", "start"],
                &ctx,
            );
            let rate = self
                .string(lt, "rate", &ctx)
                .and_then(|(s, span)| match Rate::parse(&s) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        self.error(span, format!("`rate` in {ctx}: {e}"), None);
                        None
                    }
                });
            let (concurrency, auto) = self.lane_limit(lt, &ctx);
            let lane = LaneDecl {
                name: name.clone(),
                concurrency,
                auto,
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

    pub(super) fn mcp_servers(
        &mut self,
        root: &DeTable<'_>,
        base: &std::path::Path,
    ) -> BTreeMap<String, McpServer> {
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
            let keys = [
                &[
                    "command",
                    "url",
                    "env",
                    "headers",
                    "processes",
                    "protocol_version",
                ][..],
                super::whole::KEYS,
                super::upstream_auth::KEYS,
            ]
            .concat();
            self.check_keys(st, &keys, &ctx);
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
            let whole = self.whole(st, (&name, &ctx), k.span());
            let processes = self.processes(st, &ctx, url.is_some());
            let auth = self.upstream_auth(st, &ctx, url.is_some(), k.span());
            let protocol_version = self.protocol_version(st, &ctx);
            let headers = self.template_map(st, "headers", &ctx);
            if auth.is_some()
                && headers
                    .keys()
                    .any(|h| h.eq_ignore_ascii_case("authorization"))
            {
                let why = format!("{ctx} has both `auth` and an `Authorization` header");
                self.error(
                    k.span(),
                    why,
                    Some("leave the header out: `auth` sends the token".into()),
                );
            }
            out.insert(
                name.clone(),
                McpServer {
                    name,
                    dir: base.to_path_buf(),
                    command,
                    url,
                    env: self.template_map(st, "env", &ctx),
                    headers,
                    whole,
                    processes,
                    auth,
                    protocol_version,
                },
            );
        }
        out
    }

    /// `protocol_version = "2025-11-25"`: the MCP revision offered in `initialize`.
    fn protocol_version(&mut self, st: &DeTable<'_>, ctx: &str) -> Option<String> {
        let (v, span) = self.string(st, "protocol_version", ctx)?;
        if !PROTOCOL_VERSIONS.contains(&v.as_str()) {
            let why = format!("`protocol_version` in {ctx} is `{v}`");
            self.error(
                span,
                why,
                Some(format!("one of {}", PROTOCOL_VERSIONS.join(", "))),
            );
            return None;
        }
        Some(v)
    }

    /// `processes = N` of an `[mcp_servers.NAME]`: 1 to [`MOST_PROCESSES`], for a stdio server.
    fn processes(&mut self, st: &DeTable<'_>, ctx: &str, http: bool) -> u32 {
        let Some((_, v)) = Reader::entry(st, "processes") else {
            return 1;
        };
        let what = format!("`processes` in {ctx}");
        let Some(n) = self.count(v, &what) else {
            return 1;
        };
        if http {
            let hint = "an HTTP server is one endpoint: scale it behind its own URL";
            let why = format!("{what} is for a stdio server (`command`)");
            self.error(v.span(), why, Some(hint.to_string()));
            return 1;
        }
        if n > MOST_PROCESSES {
            let why = format!("{what} is {n}; at most {MOST_PROCESSES} processes serve one server");
            self.error(v.span(), why, None);
            return 1;
        }
        n
    }

    /// `[serve]`: `tokens = { TENANT = "${env:…}" }` (or `TENANT = { token, roles }`),
    /// `[serve.auth]`, `[serve.session]`, `[serve.limits]`.
    pub(super) fn serve(&mut self, root: &DeTable<'_>) -> Serve {
        let Some(t) = self.table(root, "serve", "the manifest") else {
            return Serve::default();
        };
        self.check_keys(
            t,
            &[
                "tokens",
                "session",
                "approval_in_band",
                "approval_timeout",
                "task_after",
                "admin_token",
                "limits",
                "auth",
                "pin",
            ],
            "[serve]",
        );
        let (tokens, token_roles) = self.tokens(t);
        let session = self.session_limits(t);
        let limits = self.serve_limits(t);
        Serve {
            tokens,
            token_roles,
            auth: self.auth(t),
            session,
            limits,
            approval_in_band: self
                .boolean(t, "approval_in_band", "[serve]")
                .unwrap_or(false),
            approval_timeout: self.duration(t, "approval_timeout", "[serve]").map(|d| d.0),
            task_after: self.duration(t, "task_after", "[serve]").map(|d| d.0),
            admin_token: self
                .string(t, "admin_token", "[serve]")
                .map(|(text, span)| self.template(&text, span, false)),
            pin: self.pin(t),
        }
    }

    /// `[serve] pin = "strict" | "new-allowed" | "off"`.
    fn pin(&mut self, serve: &DeTable<'_>) -> Option<super::Pin> {
        let (text, span) = self.string(serve, "pin", "[serve]")?;
        match text.as_str() {
            "strict" => Some(super::Pin::Strict),
            "new-allowed" => Some(super::Pin::NewAllowed),
            "off" => Some(super::Pin::Off),
            other => {
                let hint = "write pin = \"strict\", \"new-allowed\" or \"off\"".to_string();
                self.error(
                    span,
                    format!("[serve] pin = \"{other}\" is not a way to pin"),
                    Some(hint),
                );
                None
            }
        }
    }

    /// `[serve.tokens]`: each tenant's token, and the roles of those given in table form.
    fn tokens(
        &mut self,
        serve: &DeTable<'_>,
    ) -> (BTreeMap<String, Template>, BTreeMap<String, Vec<String>>) {
        let mut tokens = BTreeMap::new();
        let Some(tt) = self.table(serve, "tokens", "[serve]") else {
            return (tokens, BTreeMap::new());
        };
        for (k, v) in tt.iter() {
            let tenant = k.get_ref();
            if let Err(e) = crate::ids::check_id("tenant", tenant) {
                self.error(k.span(), format!("[serve.tokens]: {e}"), None);
                continue;
            }
            let (text, span) = match v.get_ref() {
                DeValue::String(s) => (s.to_string(), v.span()),
                DeValue::Table(inner) => {
                    let ctx = format!("[serve.tokens.{tenant}]");
                    match self.string(inner, "token", &ctx) {
                        Some(found) => found,
                        None => {
                            let hint = "write token = \"${env:VAR}\"".to_string();
                            self.error(v.span(), format!("{ctx} has no `token`"), Some(hint));
                            continue;
                        }
                    }
                }
                other => {
                    let ctx = format!("`{tenant}` in [serve.tokens]");
                    let want = "a string, or a table { token = \"${env:VAR}\", roles = [...] }";
                    self.type_error(v.span(), &ctx, want, other);
                    continue;
                }
            };
            let token = self.template(&text, span.clone(), false);
            if !token.has_secret() {
                self.warn(
                    span,
                    format!("the token of tenant `{tenant}` in [serve.tokens] is written in the manifest"),
                    Some("anyone who reads the manifest can use it; write \"${env:VAR}\"".into()),
                );
            }
            tokens.insert(tenant.to_string(), token);
        }
        let roles = self.token_roles(tt);
        (tokens, roles)
    }

    /// `[serve.session]`: `max_calls`, `max_cost`, `per_tool = { NAME = N }`.
    fn session_limits(&mut self, serve: &DeTable<'_>) -> SessionLimits {
        let ctx = "[serve.session]";
        let Some(t) = self.table(serve, "session", ctx) else {
            return SessionLimits::default();
        };
        self.check_keys(t, &["max_calls", "max_cost", "per_tool"], ctx);
        let max_cost = self.number(t, "max_cost", ctx).and_then(|(c, span)| {
            if c < 0.0 {
                self.error(
                    span,
                    format!("`max_cost` in {ctx} cannot be negative"),
                    None,
                );
                return None;
            }
            Some(c)
        });
        let mut per_tool = BTreeMap::new();
        if let Some(pt) = self.table(t, "per_tool", ctx) {
            for (k, v) in pt.iter() {
                let name = k.get_ref().to_string();
                if let Some(n) = self.count(v, &format!("`{name}` in [serve.session.per_tool]")) {
                    per_tool.insert(name, n);
                }
            }
        }
        SessionLimits {
            max_calls: self.count_field(t, "max_calls", ctx),
            max_cost,
            per_tool,
        }
    }

    /// `[serve.limits]`: each bound of the gateway, its default where not written.
    fn serve_limits(&mut self, serve: &DeTable<'_>) -> ServeLimits {
        let ctx = "[serve.limits]";
        let mut l = ServeLimits::default();
        let Some(t) = self.table(serve, "limits", ctx) else {
            return l;
        };
        self.check_keys(
            t,
            &[
                "sessions",
                "sessions_per_tenant",
                "session_idle",
                "parked_per_session",
                "parked_per_tenant",
                "connections_per_client",
                "header_timeout",
                "body_timeout",
                "keys_kept",
                "keys",
                "session_kept",
                "tasks_kept",
                "tasks_per_tenant",
                "answer_wait",
                "asking_per_tenant",
            ],
            ctx,
        );
        for (key, field) in [
            ("sessions", &mut l.sessions),
            ("sessions_per_tenant", &mut l.sessions_per_tenant),
            ("parked_per_session", &mut l.parked_per_session),
            ("parked_per_tenant", &mut l.parked_per_tenant),
            ("connections_per_client", &mut l.connections_per_client),
            ("keys", &mut l.keys),
            ("tasks_per_tenant", &mut l.tasks_per_tenant),
            ("asking_per_tenant", &mut l.asking_per_tenant),
        ] {
            if let Some(n) = self.count_field(t, key, ctx) {
                *field = n;
            }
        }
        for (key, field) in [
            ("session_idle", &mut l.session_idle),
            ("header_timeout", &mut l.header_timeout),
            ("body_timeout", &mut l.body_timeout),
            ("keys_kept", &mut l.keys_kept),
            ("session_kept", &mut l.session_kept),
            ("tasks_kept", &mut l.tasks_kept),
            ("answer_wait", &mut l.answer_wait),
        ] {
            if let Some((d, _)) = self.duration(t, key, ctx) {
                *field = d;
            }
        }
        l
    }

    pub(super) fn hooks(&mut self, root: &DeTable<'_>) -> Hooks {
        let Some(t) = self.table(root, "hooks", "the manifest") else {
            return Hooks::default();
        };
        self.check_keys(t, &["before_call", "after_call", "hook_timeout"], "[hooks]");
        let mut h = Hooks {
            before_call: self.templates(t, "before_call", "[hooks]", false),
            after_call: self.templates(t, "after_call", "[hooks]", false),
            timeout: self
                .duration(t, "hook_timeout", "[hooks]")
                .map_or(super::DEFAULT_HOOK_TIMEOUT, |(d, _)| d),
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

    /// `[history] path = "runs.jsonl"` (relative to the manifest's folder).
    pub(super) fn history(
        &mut self,
        root: &DeTable<'_>,
        base: &std::path::Path,
    ) -> Option<std::path::PathBuf> {
        let t = self.table(root, "history", "the manifest")?;
        self.check_keys(t, &["path"], "[history]");
        let (path, span) = self.string(t, "path", "[history]")?;
        if path.is_empty() {
            self.error(span, "`path` in [history] is empty", None);
            return None;
        }
        Some(base.join(path))
    }

    /// `[models."NAME"] input_per_mtok, output_per_mtok`: prices per million tokens.
    pub(super) fn models(&mut self, root: &DeTable<'_>) -> BTreeMap<String, ModelPrice> {
        let mut out = BTreeMap::new();
        let Some(t) = self.table(root, "models", "the manifest") else {
            return out;
        };
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            let ctx = format!("[models.\"{name}\"]");
            let Some(mt) = v.get_ref().as_table() else {
                self.type_error(v.span(), &ctx, "a table", v.get_ref());
                continue;
            };
            self.check_keys(mt, &["input_per_mtok", "output_per_mtok"], &ctx);
            let mut price = |key: &str| match self.number(mt, key, &ctx) {
                Some((n, _)) if n >= 0.0 && n.is_finite() => n,
                Some((_, span)) => {
                    self.error(
                        span,
                        format!("`{key}` in {ctx} must be a non-negative number"),
                        None,
                    );
                    0.0
                }
                None => 0.0,
            };
            let input_per_mtok = price("input_per_mtok");
            let output_per_mtok = price("output_per_mtok");
            out.insert(
                name,
                ModelPrice {
                    input_per_mtok,
                    output_per_mtok,
                },
            );
        }
        out
    }

    /// `[budget]`: `max_calls`, and `per_tenant = { max_cost, window }`.
    pub(super) fn budget(&mut self, root: &DeTable<'_>) -> Budget {
        let ctx = "[budget]";
        let Some(t) = self.table(root, "budget", "the manifest") else {
            return Budget::default();
        };
        self.check_keys(t, &["max_calls", "per_tenant"], ctx);
        let per_tenant = self.table(t, "per_tenant", ctx).and_then(|pt| {
            let ctx = "`per_tenant` in [budget]";
            self.check_keys(pt, &["max_cost", "window"], ctx);
            let max_cost = match self.number(pt, "max_cost", ctx) {
                Some((c, _)) if c >= 0.0 && c.is_finite() => Some(c),
                Some((_, span)) => {
                    self.error(
                        span,
                        format!("`max_cost` in {ctx} must be a non-negative number"),
                        None,
                    );
                    None
                }
                None => None,
            };
            let window = self.duration(pt, "window", ctx);
            match (max_cost, window) {
                (Some(max_cost), Some((window, window_text))) if !window.is_zero() => {
                    Some(TenantWindow {
                        max_cost,
                        window,
                        window_text,
                    })
                }
                (Some(_), Some(_)) => {
                    if let Some((_, v)) = Self::entry(pt, "window") {
                        self.error(
                            v.span(),
                            format!("`window` in {ctx} must be longer than 0s"),
                            None,
                        );
                    }
                    None
                }
                (m, w) => {
                    if let Some((k, _)) = Self::entry(t, "per_tenant") {
                        let missing = if m.is_none() { "max_cost" } else { "window" };
                        let _ = w;
                        self.error(
                            k.span(),
                            format!("{ctx} needs `{missing}`"),
                            Some("write per_tenant = { max_cost = 5.0, window = \"1h\" }".into()),
                        );
                    }
                    None
                }
            }
        });
        Budget {
            max_calls: self.count_field(t, "max_calls", ctx),
            per_tenant,
        }
    }

    /// `[tenants.NAME] weight = N`: each tenant's share of a lane it waits in with others.
    pub(super) fn tenants(&mut self, root: &DeTable<'_>) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        let Some(t) = self.table(root, "tenants", "the manifest") else {
            return out;
        };
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            let ctx = format!("[tenants.{}]", quote_key(&name));
            let Some(tt) = v.get_ref().as_table() else {
                self.type_error(v.span(), &ctx, "a table", v.get_ref());
                continue;
            };
            self.check_keys(tt, &["weight"], &ctx);
            match self.count_field(tt, "weight", &ctx) {
                Some(0) => {
                    if let Some((_, w)) = Self::entry(tt, "weight") {
                        self.error(
                            w.span(),
                            format!("`weight` in {ctx} must be at least 1"),
                            None,
                        );
                    }
                }
                Some(w) => {
                    out.insert(name, w);
                }
                None => {}
            }
        }
        out
    }
}
