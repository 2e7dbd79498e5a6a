//! Who may reach the gateway and what each caller sees: `[serve.auth]` (the gateway as an
//! OAuth 2.1 resource server: the issuers whose JWT access tokens it accepts, its resource
//! identifier, the scopes a token must carry and the claims that name a caller's tenant and
//! roles), the roles of static tokens (`[serve.tokens] T = { token, roles }`), and
//! `[roles.NAME]`: globs that allow and deny tools, resources and prompts, what a role may see
//! of the operations face, and how many sessions one caller holding it may keep.

use std::collections::BTreeMap;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::reader::Reader;
use crate::glob;

/// `[serve.auth]`: the gateway accepts JWT access tokens of these issuers, for this resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// `issuer` (one, or a list): the authorization servers' issuer identifiers.
    pub issuers: Vec<String>,
    /// `resource`: this gateway's resource identifier (RFC 8707/9728), the `aud` its tokens
    /// must carry, e.g. `https://gw.example.com/mcp`.
    pub resource: String,
    /// `scopes`: every one must be in a token's `scope` (or `scp`).
    pub scopes: Vec<String>,
    /// `tenant_claim`: the claim that names the caller's tenant (`None`: `--tenant`'s).
    pub tenant_claim: Option<String>,
    /// `roles_claim` (default `roles`): an array of role names, or a space-separated string
    /// (`"scope"` makes each scope a role).
    pub roles_claim: String,
    /// `subject_claim` (default `sub`): who the caller is, in the audit trail and approvals.
    pub subject_claim: String,
    /// `leeway` (default 60 s): the clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// `jwks_refresh` (default 30 s): a token signed by a key the gateway does not know makes
    /// it fetch the issuer's keys again — at most once in this long.
    pub jwks_refresh: Duration,
}

/// `[roles.NAME]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Role {
    pub tools: Rule,
    pub resources: Rule,
    pub prompts: Rule,
    /// `ops`: what of the operations face the role may use.
    pub ops: Vec<Op>,
    /// `sessions`: the most live HTTP sessions one caller holding this role may keep.
    pub sessions: Option<u32>,
}

/// Globs a role allows and denies (a name is allowed when an `allow` glob matches it and no
/// `deny` glob does).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rule {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl Rule {
    pub fn admits(&self, name: &str) -> bool {
        glob::any(&self.allow, name) && !glob::any(&self.deny, name)
    }
}

/// What a role may use of the operations face.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The status page's stream of every tenant's calls, lanes and approvals.
    Status,
    /// `/metrics`.
    Metrics,
    /// Answering approvals on the status page.
    Approve,
}

impl Op {
    pub const ALL: [(&'static str, Op); 3] = [
        ("status", Op::Status),
        ("metrics", Op::Metrics),
        ("approve", Op::Approve),
    ];
}

/// What a role's rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Tool,
    Resource,
    Prompt,
}

/// `[roles]`: every role by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Roles(pub BTreeMap<String, Role>);

impl Roles {
    /// Whether roles bound what callers see (none declared: every caller sees everything).
    pub fn declared(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether a caller holding `held` may see `name` (a tool's name in the manifest, a
    /// prompt's served name, a resource's served URI): one of its roles allows it. A tool is
    /// named as clients see it (`ev_get-sum`), like a prompt; a glob written for its name in
    /// the manifest (`ev.get-sum`) still matches it (`validate` says to rewrite it), and a
    /// `deny` in either form denies it.
    pub fn allows(&self, held: &[String], what: Subject, name: &str) -> bool {
        let served = match what {
            Subject::Tool => super::export_name(name),
            Subject::Resource | Subject::Prompt => name.to_string(),
        };
        self.held(held).any(|r| {
            let rule = match what {
                Subject::Tool => &r.tools,
                Subject::Resource => &r.resources,
                Subject::Prompt => &r.prompts,
            };
            let any = |globs: &[String]| glob::any(globs, &served) || glob::any(globs, name);
            any(&rule.allow) && !any(&rule.deny)
        })
    }

    /// Whether one of `held` may use `op`.
    pub fn may(&self, held: &[String], op: Op) -> bool {
        self.held(held).any(|r| r.ops.contains(&op))
    }

    /// The most sessions one caller holding `held` may keep (the largest of its roles'; `None`:
    /// no role bounds it).
    pub fn sessions(&self, held: &[String]) -> Option<u32> {
        let mut limits = self.held(held).map(|r| r.sessions);
        let first = limits.next()?;
        limits.try_fold(first?, |most, s| s.map(|s| most.max(s)))
    }

    fn held<'r>(&'r self, held: &'r [String]) -> impl Iterator<Item = &'r Role> + 'r {
        held.iter().filter_map(|name| self.0.get(name))
    }
}

const AUTH_KEYS: &[&str] = &[
    "issuer",
    "resource",
    "scopes",
    "tenant_claim",
    "roles_claim",
    "subject_claim",
    "leeway",
    "jwks_refresh",
];

/// An issuer or resource URL: `https`, or `http` on a loopback host (a test's own server).
fn url_problem(url: &str) -> Option<String> {
    let Ok(u) = url.parse::<http::Uri>() else {
        return Some("is not a URL".into());
    };
    let loopback = matches!(u.host(), Some("localhost" | "127.0.0.1" | "[::1]" | "::1"));
    match u.scheme_str() {
        Some("https") => None,
        Some("http") if loopback => None,
        Some("http") => {
            Some("uses http; tokens must come from and for https (http only on loopback)".into())
        }
        _ => Some("is not an http(s) URL".into()),
    }
}

impl Reader<'_> {
    /// `[serve.auth]`.
    pub(super) fn auth(&mut self, serve: &DeTable<'_>) -> Option<Auth> {
        let ctx = "[serve.auth]";
        let (key, _) = Reader::entry(serve, "auth")?;
        let span = key.span();
        let t = self.table(serve, "auth", "[serve]")?;
        self.check_keys(t, AUTH_KEYS, ctx);
        let issuers: Vec<(String, std::ops::Range<usize>)> = match Reader::entry(t, "issuer") {
            Some((_, v)) if matches!(v.get_ref(), DeValue::Array(_)) => {
                self.strings(t, "issuer", ctx).unwrap_or_default()
            }
            Some(_) => self.string(t, "issuer", ctx).into_iter().collect(),
            None => Vec::new(),
        };
        if issuers.is_empty() {
            let hint = "write issuer = \"https://auth.example.com\" (the authorization server)";
            self.error(
                span.clone(),
                format!("{ctx} names no `issuer`"),
                Some(hint.into()),
            );
        }
        for (i, s) in &issuers {
            if let Some(p) = url_problem(i) {
                self.error(s.clone(), format!("`issuer` `{i}` in {ctx} {p}"), None);
            }
        }
        let resource = match self.string(t, "resource", ctx) {
            Some((r, s)) => {
                if let Some(p) = url_problem(&r) {
                    self.error(s, format!("`resource` `{r}` in {ctx} {p}"), None);
                }
                r
            }
            None => {
                let hint = "write resource = \"https://gw.example.com/mcp\" (this gateway's URL: the audience of its tokens)";
                self.error(
                    span,
                    format!("{ctx} names no `resource`"),
                    Some(hint.into()),
                );
                String::new()
            }
        };
        let name = |r: &mut Self, key: &str, default: &str| {
            r.string(t, key, ctx)
                .map_or(default.to_string(), |(s, _)| s)
        };
        Some(Auth {
            issuers: issuers.into_iter().map(|(i, _)| i).collect(),
            resource,
            scopes: (self.strings(t, "scopes", ctx).unwrap_or_default())
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
            tenant_claim: self.string(t, "tenant_claim", ctx).map(|(s, _)| s),
            roles_claim: name(self, "roles_claim", "roles"),
            subject_claim: name(self, "subject_claim", "sub"),
            leeway: self
                .duration(t, "leeway", ctx)
                .map_or(Duration::from_secs(60), |d| d.0),
            jwks_refresh: (self.duration(t, "jwks_refresh", ctx))
                .map_or(Duration::from_secs(30), |d| d.0),
        })
    }

    /// `[roles.NAME]`: `tools`, `resources`, `prompts` (each a list of globs it allows, or
    /// `{ allow = […], deny = […] }`), `ops` and `sessions`.
    pub(super) fn roles(&mut self, root: &DeTable<'_>) -> Roles {
        let mut out = BTreeMap::new();
        let Some(t) = self.table(root, "roles", "the manifest") else {
            return Roles::default();
        };
        for (k, v) in t.iter() {
            let name = k.get_ref().to_string();
            let ctx = format!("[roles.{}]", super::reader::quote_key(&name));
            let DeValue::Table(rt) = v.get_ref() else {
                self.type_error(v.span(), &ctx, "a table", v.get_ref());
                continue;
            };
            self.check_keys(
                rt,
                &["tools", "resources", "prompts", "ops", "sessions"],
                &ctx,
            );
            let role = Role {
                tools: self.rule(rt, "tools", &ctx),
                resources: self.rule(rt, "resources", &ctx),
                prompts: self.rule(rt, "prompts", &ctx),
                ops: self.ops(rt, &ctx),
                sessions: self.count_field(rt, "sessions", &ctx),
            };
            out.insert(name, role);
        }
        Roles(out)
    }

    /// `KEY = ["glob", …]` or `KEY = { allow = […], deny = […] }`.
    fn rule(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Rule {
        let strings = |r: &mut Self, t: &DeTable<'_>, key: &str, ctx: &str| -> Vec<String> {
            let list = r.strings(t, key, ctx).unwrap_or_default();
            list.into_iter().map(|(s, _)| s).collect()
        };
        match Reader::entry(t, key).map(|(_, v)| v.get_ref()) {
            None => Rule::default(),
            Some(DeValue::Table(rt)) => {
                let ctx = format!("`{key}` in {ctx}");
                self.check_keys(rt, &["allow", "deny"], &ctx);
                Rule {
                    allow: strings(self, rt, "allow", &ctx),
                    deny: strings(self, rt, "deny", &ctx),
                }
            }
            Some(_) => Rule {
                allow: strings(self, t, key, ctx),
                deny: Vec::new(),
            },
        }
    }

    /// `ops = ["status", "metrics", "approve"]`.
    fn ops(&mut self, t: &DeTable<'_>, ctx: &str) -> Vec<Op> {
        let mut out = Vec::new();
        for (name, span) in self.strings(t, "ops", ctx).unwrap_or_default() {
            match Op::ALL.iter().find(|(n, _)| *n == name) {
                Some((_, op)) => out.push(*op),
                None => {
                    let known: Vec<&str> = Op::ALL.iter().map(|(n, _)| *n).collect();
                    let hint = format!("known: {}", known.join(", "));
                    self.error(span, format!("unknown op `{name}` in {ctx}"), Some(hint));
                }
            }
        }
        out
    }

    /// `[serve.tokens]` in its table form, `TENANT = { token = "${env:…}", roles = […] }`:
    /// each tenant's roles (the token itself is read with the plain form).
    pub(super) fn token_roles(&mut self, tokens: &DeTable<'_>) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for (k, v) in tokens.iter() {
            let DeValue::Table(tt) = v.get_ref() else {
                continue;
            };
            let ctx = format!("[serve.tokens.{}]", super::reader::quote_key(k.get_ref()));
            self.check_keys(tt, &["token", "roles"], &ctx);
            let roles = self.strings(tt, "roles", &ctx).unwrap_or_default();
            out.insert(
                k.get_ref().to_string(),
                roles.into_iter().map(|(s, _)| s).collect(),
            );
        }
        out
    }
}

impl Reader<'_> {
    /// What needs `[roles]` and `[serve]` both: a token's roles are declared ones; with
    /// `[roles]`, a static token without roles sees nothing (said), and roles bind nobody when
    /// no caller is identified (said).
    pub(super) fn access_checks(&mut self, m: &super::Manifest, root: &DeTable<'_>) {
        let serve = Reader::entry(root, "serve").and_then(|(_, v)| v.get_ref().as_table());
        let tokens = serve
            .and_then(|s| Reader::entry(s, "tokens"))
            .and_then(|(_, v)| v.get_ref().as_table());
        for (k, v) in tokens.into_iter().flat_map(|t| t.iter()) {
            let tenant = k.get_ref();
            let roles = v
                .get_ref()
                .as_table()
                .and_then(|t| Reader::entry(t, "roles"));
            let items = roles.and_then(|(_, r)| r.get_ref().as_array());
            for item in items.into_iter().flat_map(|a| a.iter()) {
                let Some(name) = item.get_ref().as_str() else {
                    continue;
                };
                if !m.roles.0.contains_key(name) {
                    let hint = crate::error::suggest(name, m.roles.0.keys().map(String::as_str))
                        .or_else(|| Some(format!("declare it: [roles.{name}] tools = [\"*\"]")));
                    let msg = format!("[serve.tokens.{tenant}] names role `{name}`, which [roles] does not declare");
                    self.error(item.span(), msg, hint);
                }
            }
            if m.roles.declared() && roles.is_none() {
                let msg = format!("[roles] is declared and tenant `{tenant}`'s token has no roles: its callers see no tool");
                let hint =
                    format!("write {tenant} = {{ token = \"${{env:VAR}}\", roles = [\"NAME\"] }}");
                self.warn(k.span(), msg, Some(hint));
            }
        }
        self.role_tool_globs(m, root);
        if m.roles.declared() && m.serve.tokens.is_empty() && m.serve.auth.is_none() {
            if let Some((k, _)) = Reader::entry(root, "roles") {
                let msg = "[roles] is declared, but no caller has roles: without [serve.tokens] or [serve.auth] every caller sees everything";
                self.warn(
                    k.span(),
                    msg,
                    Some("add [serve.auth] or [serve.tokens] with roles".into()),
                );
            }
        }
    }
}

impl Reader<'_> {
    /// Each role's tool globs: one written for a tool's name in the manifest (`ev.*`) is to
    /// be written as clients see the tool (`ev_*`), and one that can match no tool is said.
    fn role_tool_globs(&mut self, m: &super::Manifest, root: &DeTable<'_>) {
        let roles = Reader::entry(root, "roles").and_then(|(_, v)| v.get_ref().as_table());
        for (role, v) in roles.into_iter().flat_map(|t| t.iter()) {
            let tools = v
                .get_ref()
                .as_table()
                .and_then(|t| Reader::entry(t, "tools"));
            let lists: Vec<&DeValue<'_>> = match tools.map(|(_, v)| v.get_ref()) {
                Some(DeValue::Table(t)) => ["allow", "deny"]
                    .iter()
                    .filter_map(|k| Reader::entry(t, k).map(|(_, v)| v.get_ref()))
                    .collect(),
                Some(list) => vec![list],
                None => Vec::new(),
            };
            let items = lists.into_iter().filter_map(DeValue::as_array).flatten();
            for item in items {
                if let Some(g) = item.get_ref().as_str() {
                    let ctx = format!("[roles.{}]", role.get_ref());
                    if let Some((msg, hint)) = tool_glob_problem(m, g, &ctx) {
                        self.warn(item.span(), msg, Some(hint));
                    }
                }
            }
        }
    }
}

/// What is amiss with tool glob `g` of a role (`ctx`), if anything.
fn tool_glob_problem(m: &super::Manifest, g: &str, ctx: &str) -> Option<(String, String)> {
    let served = |n: &str| glob::matches(g, &super::export_name(n));
    let wholes: Vec<&str> = (m.whole_servers())
        .map(|(_, w)| w.prefix.as_str())
        .collect();
    if g.contains('.') {
        let fixed = g.replace('.', "_");
        let msg = format!("{ctx} names tools by `{g}`, their names in the manifest");
        return Some((
            msg,
            format!("roles name a tool as clients see it: write `{fixed}`"),
        ));
    }
    let learnt = |p: &&str| p.is_empty() || g.starts_with(&format!("{p}_"));
    let may_match = g.starts_with(['*', '?'])
        || m.tools.iter().any(|t| served(&t.name))
        || wholes.iter().any(learnt);
    (!may_match).then(|| {
        let names = m.tools.iter().map(|t| super::export_name(&t.name));
        let names: Vec<String> = names.collect();
        let hint =
            crate::error::suggest(g, names.iter().map(String::as_str)).unwrap_or_else(|| {
                "a tool is named as clients see it: `PREFIX_name` for a whole server's".into()
            });
        (
            format!("{ctx}: tool glob `{g}` matches no tool of the manifest"),
            hint,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(allow: &[&str], deny: &[&str]) -> Role {
        let rule = Rule {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        };
        Role {
            tools: rule,
            ..Role::default()
        }
    }

    #[test]
    fn a_caller_sees_what_one_of_its_roles_allows_and_that_role_does_not_deny() {
        let mut roles = BTreeMap::new();
        roles.insert(
            "reader".to_string(),
            role(&["get_*", "search"], &["get_secret"]),
        );
        roles.insert("admin".to_string(), role(&["*"], &[]));
        let roles = Roles(roles);
        let reader = ["reader".to_string()];
        assert!(roles.allows(&reader, Subject::Tool, "get_user"));
        assert!(!roles.allows(&reader, Subject::Tool, "get_secret"));
        assert!(!roles.allows(&reader, Subject::Tool, "delete_repo"));
        assert!(!roles.allows(&reader, Subject::Prompt, "get_user"));
        let both = ["reader".to_string(), "admin".to_string()];
        assert!(roles.allows(&both, Subject::Tool, "get_secret"));
        // A role nobody declared gives nothing.
        assert!(!roles.allows(&["ghost".to_string()], Subject::Tool, "get_user"));
        assert!(!roles.allows(&[], Subject::Tool, "get_user"));
    }

    #[test]
    fn a_callers_session_bound_is_the_largest_of_its_roles_and_none_when_one_is_unbounded() {
        let mut roles = BTreeMap::new();
        for (name, n) in [("a", Some(2)), ("b", Some(5)), ("c", None)] {
            roles.insert(
                name.to_string(),
                Role {
                    sessions: n,
                    ..Role::default()
                },
            );
        }
        let roles = Roles(roles);
        let held = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(roles.sessions(&held(&["a", "b"])), Some(5));
        assert_eq!(roles.sessions(&held(&["a", "c"])), None);
        assert_eq!(roles.sessions(&held(&[])), None);
    }

    #[test]
    fn issuers_and_resources_are_https_or_loopback_http() {
        assert!(url_problem("https://auth.example.com").is_none());
        assert!(url_problem("http://127.0.0.1:9000").is_none());
        assert!(url_problem("http://localhost:9000/oidc").is_none());
        assert!(url_problem("http://auth.example.com").is_some());
        assert!(url_problem("ftp://x").is_some());
        assert!(url_problem("not a url").is_some());
    }
}
