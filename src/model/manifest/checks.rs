//! Checks that need the whole manifest: lanes a tool names must be declared, a weight must fit
//! every lane it stands in, placeholders must be in the argument schema, `per_tool` must name
//! tools, and each kind's own checks (an MCP tool's server must be declared).

use std::ops::Range;

use toml::de::DeTable;

use super::reader::{quote_key, Reader};
use super::Manifest;
use crate::error::{suggest, Diagnostic};

impl Reader<'_> {
    /// Checks that need the whole manifest: lanes named by tools, per_tool names, weights
    /// against every lane limit, each kind's own checks, placeholders against schemas.
    pub(super) fn cross_checks(&mut self, m: &Manifest, root: &DeTable<'_>) {
        self.name_clashes(m);
        self.verify_checks(m);
        self.whole_lanes(m);
        self.access_checks(m, root);
        let tools_table = Reader::entry(root, "tools").and_then(|(_, v)| v.get_ref().as_table());
        for tool in &m.tools {
            let tt = tools_table
                .and_then(|t| Reader::entry(t, &tool.name))
                .and_then(|(_, v)| v.get_ref().as_table());
            let lane_spans: Vec<(String, Range<usize>)> = tt
                .and_then(|t| Reader::entry(t, "lanes"))
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
            tool.kind.check(tool, m, self);
            let placeholders = tool.kind.placeholders();
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
        let at = |path: &[&str]| {
            path.iter().try_fold(root, |t, key| {
                Reader::entry(t, key).and_then(|(_, v)| v.get_ref().as_table())
            })
        };
        self.tools_named(
            m,
            at(&["concurrency", "per_tool"]),
            "[concurrency.per_tool]",
        );
        let per_session = at(&["serve", "session", "per_tool"]);
        self.tools_named(m, per_session, "[serve.session.per_tool]");
        if m.concurrency.max_concurrent_tools.is_none() && !m.tools.is_empty() {
            self.diags.push(
                Diagnostic::warning("the turn lane is unbounded: [concurrency] sets no max_concurrent_tools")
                    .in_file(&m.file.name)
                    .hint("a model can ask for fifty calls at once; bound them with max_concurrent_tools = 8"),
            );
        }
    }

    /// Every key of `table` (a `per_tool` table) must be a tool.
    fn tools_named(&mut self, m: &Manifest, table: Option<&DeTable<'_>>, what: &str) {
        for (k, _) in table.iter().flat_map(|t| t.iter()) {
            let name = k.get_ref().as_ref();
            if m.tool(name).is_none() {
                self.error(
                    k.span(),
                    format!("{what} limits `{name}`, which is not a tool"),
                    m.suggest_tool(name),
                );
            }
        }
    }
}

impl Reader<'_> {
    /// A whole server's `lanes` are declared ones.
    fn whole_lanes(&mut self, m: &Manifest) {
        for (server, whole) in m.whole_servers() {
            for lane in whole.lanes.iter().filter(|l| !m.lanes.contains_key(*l)) {
                self.error(
                    whole.span.clone(),
                    format!(
                        "MCP server `{}` draws on lane `{lane}`, which [lanes] does not declare",
                        server.name
                    ),
                    suggest(lane, m.lanes.keys().map(String::as_str)),
                );
            }
        }
    }

    /// Two tools a model would know by one name (`db.getOrders` is offered as `db_getOrders`,
    /// which may be another tool's name or another's safe form): only one could be called.
    fn name_clashes(&mut self, m: &Manifest) {
        let mut first: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (i, t) in m.tools.iter().enumerate() {
            first.entry(t.name.clone()).or_insert(i);
        }
        for (i, t) in m.tools.iter().enumerate() {
            let safe = super::export_name(&t.name);
            if safe == t.name {
                continue;
            }
            let other = *first.entry(safe.clone()).or_insert(i);
            if other == i {
                continue;
            }
            let o = &m.tools[other];
            let (line, col) = self.file.line_col(o.span.start);
            self.error(
                t.span.clone(),
                format!(
                    "tool `{}` is offered to models as `{safe}`, as tool `{}` (line {line}, column {col}) is: a model could call only one of them",
                    t.name, o.name
                ),
                Some("rename one of them (a name of letters, digits, `_` and `-` is offered as written)".into()),
            );
        }
    }
}
