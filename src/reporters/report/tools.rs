//! `flux-tools tools`: the manifest's tools and their declarations, as a table or JSON.
//! Every `${env:…}` secret is shown as `***`.

use serde_json::{json, Value};

use crate::manifest::{Manifest, Origin, Tool};

/// What the tool invokes, in one line (secrets as `***`).
pub(crate) fn target(t: &Tool) -> String {
    t.kind.target()
}

/// `orders-db`, or `partner-api (lanes)`, `mcp:git (server)`, `tool:search (the tool)`.
fn backends(t: &Tool) -> String {
    let list = t.backends.join(", ");
    match t.backends_origin {
        crate::manifest::BackendOrigin::Manifest => list,
        crate::manifest::BackendOrigin::Lanes => format!("{list} (lanes)"),
        crate::manifest::BackendOrigin::Kind => format!("{list} (server)"),
        crate::manifest::BackendOrigin::Tool => format!("{list} (the tool)"),
    }
}

fn origin(o: Origin) -> &'static str {
    match o {
        Origin::Manifest => "manifest",
        Origin::Annotation => "annotation",
        Origin::Default => "default",
    }
}

pub(crate) fn tool_json(t: &Tool) -> Value {
    let pending = t.effect_origin == Origin::Default && t.kind.announces_effect();
    let kind = t.kind.settings();
    json!({
        "name": t.name,
        "kind": t.kind_name(),
        "description": t.description.as_deref().map(crate::template::redact_raw),
        // Null until its server is asked, for a kind whose server announces it (MCP).
        "effect": (!pending).then_some(t.effect),
        "effect_from": if pending { "server" } else { origin(t.effect_origin) },
        "idempotent": (!pending || t.idempotent_origin != Origin::Default).then_some(t.idempotent),
        "idempotent_from": if pending && t.idempotent_origin == Origin::Default { "server" } else { origin(t.idempotent_origin) },
        "parallel_safe": t.parallel_safe,
        "concurrent_writes": t.concurrent_writes,
        "timeout": t.timeout_text,
        "lanes": t.lanes,
        "backends": t.backends,
        "backends_from": t.backends_origin,
        "weight": t.weight,
        "retries": t.retries,
        "cost": t.cost,
        "expected": t.expected.map(crate::duration::format),
        "requires_approval": t.requires_approval,
        // The read that settles a call cut off in flight.
        "verify": t.verify.as_ref().map(|v| json!({"tool": v.tool, "resend": v.resend})),
        "args": t.args,
        "settings": kind,
    })
}

/// The manifest's tools as JSON; each tool `held` names (exported names: held back by
/// `tools.lock`) says `"held_back": true`.
pub(crate) fn to_json(m: &Manifest, held: &std::collections::HashSet<String>) -> Value {
    let tool = |t: &Tool| {
        let mut v = tool_json(t);
        if held.contains(&crate::manifest::export_name(&t.name)) {
            v["held_back"] = json!(true);
        }
        v
    };
    json!({
        "manifest": m.file.name,
        "concurrency": {
            "max_concurrent_tools": m.concurrency.max_concurrent_tools,
            "per_tenant": m.concurrency.per_tenant,
            "per_tool": m.concurrency.per_tool,
        },
        "lanes": m.lanes.values().map(|l| json!({
            "name": l.name, "concurrency": l.concurrency, "rate": l.rate.map(|r| r.to_string()), "burst": l.burst,
        })).collect::<Vec<_>>(),
        "tools": m.tools.iter().filter(|t| t.listed).map(tool).collect::<Vec<_>>(),
    })
}

/// The columns a narrow terminal loses first, in order.
const DROPPED_FIRST: [&str; 6] = [
    "parallel",
    "timeout",
    "lanes",
    "backends",
    "kind",
    "idempotent",
];

/// The manifest's tools as a table; each tool `held` names is marked `(held back)`.
pub(crate) fn to_table(m: &Manifest, held: &std::collections::HashSet<String>) -> String {
    let mut rows = Vec::new();
    for tool in m.tools.iter().filter(|t| t.listed) {
        let effect = match tool.effect_origin {
            // Its server's annotations decide (`plan` and `run` ask it).
            crate::manifest::Origin::Default if tool.kind.announces_effect() => {
                "from server".to_string()
            }
            crate::manifest::Origin::Default => {
                format!("{:?} (default)", tool.effect).to_lowercase()
            }
            crate::manifest::Origin::Manifest => format!("{:?}", tool.effect).to_lowercase(),
            crate::manifest::Origin::Annotation => {
                format!("{:?} (annotation)", tool.effect).to_lowercase()
            }
        };
        let name = match held.contains(&crate::manifest::export_name(&tool.name)) {
            true => format!("{} (held back)", tool.name),
            false => tool.name.clone(),
        };
        rows.push(vec![
            name,
            tool.kind_name().to_string(),
            effect,
            if tool.idempotent_origin == Origin::Default && tool.kind.announces_effect() {
                "from server".into()
            } else if tool.idempotent {
                "yes".into()
            } else if let Some(v) = &tool.verify {
                format!("no (verify: {})", v.tool)
            } else {
                "no".into()
            },
            if tool.parallel_safe {
                "yes".into()
            } else {
                "alone".into()
            },
            m.concurrency
                .per_tool
                .get(&tool.name)
                .map_or_else(|| "—".into(), |n| n.to_string()),
            if tool.lanes.is_empty() {
                "—".into()
            } else {
                tool.lanes.join(", ")
            },
            backends(tool),
            tool.timeout_text.clone().unwrap_or_else(|| "—".into()),
            super::output::shorten(&target(tool), 50),
        ]);
    }
    let header = [
        "tool",
        "kind",
        "effect",
        "idempotent",
        "parallel",
        "limit",
        "lanes",
        "backends",
        "timeout",
        "invokes",
    ];
    let t = super::term::table(&header, &rows, &DROPPED_FIRST);
    format!("{t}\n")
}
