//! `whole = true` on an `[mcp_servers.NAME]`: the gateway (and `tools`, `plan`, `run`) serve
//! every tool, resource and prompt the server offers, with no `[tools.*]` table per tool.
//!
//! What the manifest would say per tool it says here once, for all of them: a `prefix` (the
//! server's name unless given; `""` for none), `allow`/`deny` globs over tool and prompt names
//! and resource URIs, and the defaults a discovered tool takes — `lanes`, `backend` (by default
//! the server), `timeout`, `cost`, `requires_approval` (`"destructive"` by default: the tools
//! the server marks destructive) and `cache` (for resource reads and read tools; one duration,
//! or a table of globs). The tools themselves are learnt from the server when it starts.

use std::ops::Range;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use std::collections::HashMap;

use super::reader::Reader;
use super::{export_name, Manifest, McpServer, Tool};
use crate::glob;

/// The keys `whole = true` brings to `[mcp_servers.NAME]`.
pub(super) const KEYS: &[&str] = &[
    "whole",
    "prefix",
    "allow",
    "deny",
    "lanes",
    "backend",
    "timeout",
    "cost",
    "requires_approval",
    "cache",
    "unlisted_resources",
];

/// How a whole server's served tools and resources are named, filtered and defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct Whole {
    /// Put before each tool's and prompt's name (`PREFIX.name`, offered to a model as
    /// `PREFIX_name`) and each resource URI (`PREFIX+uri`); empty: names and URIs as the
    /// server gives them.
    pub prefix: String,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub lanes: Vec<String>,
    /// `backend`; empty: the server (`mcp:NAME`).
    pub backends: Vec<String>,
    pub timeout: Option<(Duration, String)>,
    pub cost: f64,
    pub approval: WholeApproval,
    pub cache: WholeCache,
    /// `unlisted_resources = true`: a resource URI the server did not list (nor matches one
    /// of its templates) is forwarded to it all the same.
    pub unlisted: bool,
    /// The `[mcp_servers.NAME]` key, for messages.
    pub span: Range<usize>,
}

/// `requires_approval` on a whole server.
#[derive(Debug, Clone, PartialEq)]
pub enum WholeApproval {
    /// The tools the server marks `destructiveHint: true` (the default).
    Destructive,
    All,
    None,
    /// The tools whose (upstream) names match one of these globs.
    Matching(Vec<String>),
}

/// `cache` on a whole server: how long a resource's contents (and a read tool's result) are
/// reused.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum WholeCache {
    #[default]
    Never,
    /// Every resource and read tool.
    All(Duration),
    /// Those whose URI (or tool name) matches a glob, the first that matches.
    Matching(Vec<(String, Duration)>),
}

impl Whole {
    /// Whether the server's tool, prompt or resource `name` (a URI for a resource) is served.
    pub fn admits(&self, name: &str) -> bool {
        (self.allow.is_empty() || glob::any(&self.allow, name)) && !glob::any(&self.deny, name)
    }

    /// Whether a call of its tool `name` needs approval (`destructive`: the server says so).
    pub fn needs_approval(&self, name: &str, destructive: bool) -> bool {
        match &self.approval {
            WholeApproval::Destructive => destructive,
            WholeApproval::All => true,
            WholeApproval::None => false,
            WholeApproval::Matching(globs) => glob::any(globs, name),
        }
    }

    /// How long the read of `name` (a resource's URI or a read tool's name) is reused.
    pub fn cache_for(&self, name: &str) -> Option<Duration> {
        match &self.cache {
            WholeCache::Never => None,
            WholeCache::All(d) => Some(*d),
            WholeCache::Matching(list) => list
                .iter()
                .find(|(g, _)| glob::matches(g, name))
                .map(|(_, d)| *d),
        }
    }

    /// The served name of the server's tool or prompt `name`.
    pub fn name_of(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// The served URI of the server's resource `uri` (`PREFIX+uri`).
    pub fn uri_of(&self, uri: &str) -> String {
        if self.prefix.is_empty() {
            uri.to_string()
        } else {
            format!("{}+{uri}", self.prefix)
        }
    }

    /// The server's own URI for a served one, when it is this server's.
    pub fn own_uri<'u>(&self, served: &'u str) -> Option<&'u str> {
        if self.prefix.is_empty() {
            return Some(served);
        }
        served
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix('+'))
    }
}

impl Manifest {
    /// The servers served whole.
    pub fn whole_servers(&self) -> impl Iterator<Item = (&McpServer, &Whole)> {
        (self.mcp_servers.values()).filter_map(|s| s.whole.as_ref().map(|w| (s, w)))
    }

    /// Put `found`, the tools learnt from whole server `server`, in place of those learnt
    /// from it before. A tool a model would know by another tool's name is left out; each
    /// message names both.
    pub fn set_discovered(&mut self, server: &str, found: Vec<Tool>) -> Vec<String> {
        self.tools
            .retain(|t| t.discovered_from.as_deref() != Some(server));
        let mut taken: HashMap<String, usize> = HashMap::new();
        for (i, t) in self.tools.iter().enumerate() {
            taken.entry(t.name.clone()).or_insert(i);
            taken.entry(export_name(&t.name)).or_insert(i);
        }
        let mut clashes = Vec::new();
        for t in found {
            let safe = export_name(&t.name);
            if let Some(&other) = taken.get(&t.name).or_else(|| taken.get(&safe)) {
                clashes.push(format!(
                    "MCP server `{server}`'s tool `{}` is left out: a model would know it by the name of {}",
                    t.name,
                    describe(&self.tools[other])
                ));
                continue;
            }
            taken.insert(t.name.clone(), self.tools.len());
            taken.entry(safe).or_insert(self.tools.len());
            self.tools.push(t);
        }
        self.reindex();
        clashes
    }
}

/// A tool as a message names it.
fn describe(t: &Tool) -> String {
    match &t.discovered_from {
        Some(s) => format!(
            "MCP server `{s}`'s tool `{}` (give one server a `prefix`)",
            t.name
        ),
        None => format!(
            "[tools.{}] (rename it, or give the server a `prefix`)",
            t.name
        ),
    }
}

impl Reader<'_> {
    /// The whole-server settings of `[mcp_servers.NAME]` (`None` without `whole = true`; its
    /// keys without it are an error).
    pub(super) fn whole(
        &mut self,
        st: &DeTable<'_>,
        (name, ctx): (&str, &str),
        span: Range<usize>,
    ) -> Option<Whole> {
        if self.boolean(st, "whole", ctx) != Some(true) {
            for key in KEYS.iter().filter(|k| **k != "whole") {
                if let Some((k, _)) = Reader::entry(st, key) {
                    self.error(
                        k.span(),
                        format!("`{key}` in {ctx} applies to a whole server"),
                        Some(
                            "add whole = true to serve every tool, resource and prompt it offers"
                                .into(),
                        ),
                    );
                }
            }
            return None;
        }
        let prefix = match self.string(st, "prefix", ctx) {
            Some((p, pspan)) => {
                if !p.is_empty()
                    && !p
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    self.error(
                        pspan,
                        format!("`prefix` in {ctx} is `{p}`"),
                        Some("use letters, digits, `_` and `-` (or \"\" for none)".into()),
                    );
                }
                p
            }
            None => name.to_string(),
        };
        let globs = |r: &mut Reader<'_>, key: &str| -> Vec<String> {
            let list = r.strings(st, key, ctx).unwrap_or_default();
            list.into_iter().map(|(s, _)| s).collect()
        };
        let (allow, deny) = (globs(self, "allow"), globs(self, "deny"));
        Some(Whole {
            prefix,
            allow,
            deny,
            lanes: self.tool_lanes(st, ctx),
            backends: self.backend_list(st, ctx).unwrap_or_default(),
            timeout: self.timeout(st, ctx),
            cost: self.cost(st, ctx),
            approval: self.whole_approval(st, ctx),
            cache: self.whole_cache(st, ctx),
            unlisted: self.boolean(st, "unlisted_resources", ctx) == Some(true),
            span,
        })
    }

    /// `requires_approval = true | false | "destructive" | ["glob", …]`.
    fn whole_approval(&mut self, st: &DeTable<'_>, ctx: &str) -> WholeApproval {
        let Some((_, v)) = Reader::entry(st, "requires_approval") else {
            return WholeApproval::Destructive;
        };
        match v.get_ref() {
            DeValue::Boolean(true) => WholeApproval::All,
            DeValue::Boolean(false) => WholeApproval::None,
            DeValue::String(s) if s.as_ref() == "destructive" => WholeApproval::Destructive,
            DeValue::Array(_) => WholeApproval::Matching(
                self.strings(st, "requires_approval", ctx)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(s, _)| s)
                    .collect(),
            ),
            other => {
                self.type_error(
                    v.span(),
                    &format!("`requires_approval` in {ctx}"),
                    "true, false, \"destructive\" or an array of tool-name globs",
                    other,
                );
                WholeApproval::Destructive
            }
        }
    }

    /// `cache = "5m"` or `cache = { "file:///docs/*" = "5m", … }`.
    fn whole_cache(&mut self, st: &DeTable<'_>, ctx: &str) -> WholeCache {
        let Some((_, v)) = Reader::entry(st, "cache") else {
            return WholeCache::Never;
        };
        match v.get_ref() {
            DeValue::String(_) => match self.duration(st, "cache", ctx) {
                Some((d, _)) if !d.is_zero() => WholeCache::All(d),
                Some(_) => {
                    let msg = format!("`cache` in {ctx} must be longer than zero");
                    self.error(v.span(), msg, None);
                    WholeCache::Never
                }
                None => WholeCache::Never,
            },
            DeValue::Table(globs) => {
                let cctx = format!("`cache` in {ctx}");
                let mut list = Vec::new();
                for (g, _) in globs.iter() {
                    let g = g.get_ref().to_string();
                    if let Some((d, _)) = self.duration(globs, &g, &cctx) {
                        list.push((g, d));
                    }
                }
                WholeCache::Matching(list)
            }
            other => {
                self.type_error(
                    v.span(),
                    &format!("`cache` in {ctx}"),
                    "a duration like \"5m\" or a table of globs to durations",
                    other,
                );
                WholeCache::Never
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(prefix: &str) -> Whole {
        Whole {
            prefix: prefix.into(),
            allow: vec![],
            deny: vec!["*delete*".into()],
            lanes: vec![],
            backends: vec![],
            timeout: None,
            cost: 0.0,
            approval: WholeApproval::Destructive,
            cache: WholeCache::Matching(vec![("file:///docs/*".into(), Duration::from_secs(60))]),
            unlisted: false,
            span: 0..0,
        }
    }

    #[test]
    fn names_and_uris_take_the_prefix_and_give_it_back() {
        let w = whole("ev");
        assert_eq!(w.name_of("echo"), "ev.echo");
        assert_eq!(w.uri_of("ui://widget/a.html"), "ev+ui://widget/a.html");
        assert_eq!(
            w.own_uri("ev+ui://widget/a.html"),
            Some("ui://widget/a.html")
        );
        assert_eq!(w.own_uri("other+ui://widget/a.html"), None);
        assert_eq!(w.own_uri("ui://widget/a.html"), None);
        let bare = whole("");
        assert_eq!(bare.name_of("echo"), "echo");
        assert_eq!(bare.own_uri("ui://x"), Some("ui://x"));
    }

    #[test]
    fn deny_wins_over_allow_and_cache_globs_pick_the_first_match() {
        let mut w = whole("ev");
        assert!(w.admits("echo") && !w.admits("bulk_delete"));
        w.allow = vec!["get*".into()];
        assert!(w.admits("get_sum") && !w.admits("echo"));
        assert_eq!(
            w.cache_for("file:///docs/a.md"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(w.cache_for("file:///etc/passwd"), None);
        assert!(w.needs_approval("x", true) && !w.needs_approval("x", false));
    }
}
