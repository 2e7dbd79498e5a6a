//! `flux-tools mcp import`'s output: `[tools.*]` TOML for an MCP server's tools (`tools/list`
//! as JSON), ready to paste into a manifest.

use serde_json::Value;

/// `flux-tools mcp import`: `[tools.*]` TOML for a server's tools, with `effect` and
/// `idempotent` from their annotations and an `[args]` schema from each input schema.
///
/// With `prefix`, each tool is `[tools."PREFIX.name"]` with `tool = "name"`, so two servers
/// that expose the same names fit in one manifest. A tool whose name matches one of `reads`
/// (`*` any run of characters, `?` one) is imported as a read, whatever it declares. A tool
/// whose server declared nothing gets a comment saying so and what the default means.
pub(crate) fn import_toml(
    server: &str,
    tools: &[Value],
    prefix: Option<&str>,
    reads: &[String],
) -> String {
    use std::fmt::Write as _;
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut out = format!(
        "# Tools of MCP server `{server}` ({} tool{}), from tools/list.\n",
        tools.len(),
        if tools.len() == 1 { "" } else { "s" }
    );
    for t in tools {
        let Some(name) = t["name"].as_str() else {
            continue;
        };
        let key = match prefix {
            Some(p) => format!("tools.{}", q(&format!("{p}.{name}"))),
            None => format!("tools.{}", q(name)),
        };
        let _ = writeln!(
            out,
            "\n[{key}]\nkind = \"mcp\"\nserver = {}\ntool = {}",
            q(server),
            q(name)
        );
        if let Some(d) = t["description"].as_str() {
            let _ = writeln!(out, "description = {}", text_toml(d));
        }
        let hints = &t["annotations"];
        let marked = reads.iter().any(|g| glob_match(g, name));
        let declared = hints["readOnlyHint"].as_bool();
        if marked {
            let _ = writeln!(out, "# marked read-only at import (--reads)");
        } else if declared.is_none() {
            let _ = writeln!(
                out,
                "# `{server}` declares no readOnlyHint for `{name}`, so it is taken as a write that is not\n# idempotent: it runs alone on its backend, is never cached, and is not retried once sent.\n# If it only reads, say effect = \"read\" (or import with --reads '{name}')."
            );
        }
        let read_only = marked || declared.unwrap_or(false);
        let idempotent = hints["idempotentHint"].as_bool().unwrap_or(read_only) || marked;
        let _ = writeln!(
            out,
            "effect = \"{}\"",
            if read_only { "read" } else { "write" }
        );
        let _ = writeln!(out, "idempotent = {idempotent}");
        let schema = &t["inputSchema"];
        let Some(props) = schema["properties"].as_object() else {
            continue;
        };
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(out, "[{key}.args]");
        for (arg, p) in props {
            let _ = writeln!(
                out,
                "{} = {}",
                q(arg),
                arg_toml(p, required.contains(&arg.as_str()))
            );
        }
    }
    out
}

/// A description as TOML: one line as a basic string; several as a multi-line basic string,
/// its lines kept.
fn text_toml(d: &str) -> String {
    if !d.trim().contains('\n') {
        return toml::Value::String(d.trim().to_string()).to_string();
    }
    let mut body = String::new();
    for c in d.trim().chars() {
        match c {
            '\\' => body.push_str("\\\\"),
            '"' => body.push_str("\\\""),
            '\n' => body.push('\n'),
            c if c.is_control() => body.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => body.push(c),
        }
    }
    format!("\"\"\"\n{body}\"\"\"")
}

/// `pattern` matches all of `name`: `*` any run of characters, `?` one.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match, going back to the last `*` on a mismatch.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            (i, j) = (i + 1, j + 1);
        } else if i < p.len() && p[i] == '*' {
            (star, mark, i) = (Some(i), j, i + 1);
        } else if let Some(s) = star {
            (i, mark, j) = (s + 1, mark + 1, mark + 1);
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// One argument of an input schema as an inline `[args]` table, with its array `items` and
/// object `properties` nested the same way.
fn arg_toml(p: &Value, required: bool) -> String {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let ty = json_type(p);
    let mut fields = vec![format!("type = \"{ty}\"")];
    if required {
        fields.push("required = true".into());
    }
    let (lo, hi) = if ty == "array" {
        ("minItems", "maxItems")
    } else {
        ("minLength", "maxLength")
    };
    for (from, to) in [
        ("minimum", "min"),
        ("maximum", "max"),
        (lo, "min_length"),
        (hi, "max_length"),
    ] {
        if let Some(n) = p[from].as_f64() {
            fields.push(format!(
                "{to} = {}",
                toml::Value::Float(n).to_string().trim_end_matches(".0")
            ));
        }
    }
    if let Some(values) = p["enum"].as_array() {
        let items: Vec<String> = values
            .iter()
            .filter_map(|v| json_to_toml(v).map(|t| t.to_string()))
            .collect();
        fields.push(format!("enum = [{}]", items.join(", ")));
    }
    if let Some(d) = p["description"].as_str() {
        let one_line: String = d.split_whitespace().collect::<Vec<_>>().join(" ");
        fields.push(format!("description = {}", q(&one_line)));
    }
    if ty == "array" && p["items"].is_object() {
        fields.push(format!("items = {}", arg_toml(&p["items"], false)));
    }
    if let (true, Some(props)) = (ty == "object", p["properties"].as_object()) {
        let required: Vec<&str> = p["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let inner: Vec<String> = props
            .iter()
            .map(|(k, v)| format!("{} = {}", q(k), arg_toml(v, required.contains(&k.as_str()))))
            .collect();
        fields.push(format!("properties = {{ {} }}", inner.join(", ")));
    }
    format!("{{ {} }}", fields.join(", "))
}

fn json_type(p: &Value) -> &'static str {
    let t = match &p["type"] {
        Value::String(s) => s.as_str(),
        // ["string", "null"] and the like: the first concrete type.
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|s| *s != "null")
            .unwrap_or("any"),
        _ => "any",
    };
    match t {
        "string" => "string",
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "object" => "object",
        "array" => "array",
        _ => "any",
    }
}

fn json_to_toml(v: &Value) -> Option<toml::Value> {
    Some(match v {
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod import_tests {
    use serde_json::json;

    #[test]
    fn nested_input_schemas_import_as_nested_args_that_parse_back() {
        let tools = vec![json!({
            "name": "order", "annotations": {"readOnlyHint": false},
            "inputSchema": {"type": "object", "required": ["lines"], "properties": {
                "lines": {"type": "array", "maxItems": 5, "items": {"type": "object", "required": ["sku"],
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}}},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 9}}}}
        })];
        let text = format!(
            "[mcp_servers.s]\ncommand = [\"true\"]\n{}",
            super::import_toml("s", &tools, None, &[])
        );
        let m = crate::manifest::Manifest::parse(
            crate::error::SourceFile::new("t.toml", text.clone()),
            std::path::PathBuf::from("/t/tools.toml"),
            crate::tools::KINDS,
        )
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"));
        let args = m.tools[0].args.as_ref().unwrap();
        let schema = args.json_schema(false);
        assert_eq!(schema["properties"]["lines"]["maxItems"], 5);
        let line = &schema["properties"]["lines"]["items"];
        assert_eq!(line["required"], json!(["sku"]));
        assert_eq!(line["properties"]["qty"]["minimum"], 1);
        assert_eq!(schema["properties"]["tags"]["items"]["maxLength"], 9);
        let bad = json!({"lines": [{"qty": 0}]});
        assert_eq!(args.check(bad.as_object().unwrap(), &[]).len(), 2);
    }
}

#[cfg(test)]
mod declared_tests {
    use serde_json::json;

    fn parse(text: &str) -> crate::manifest::Manifest {
        let text = format!("[mcp_servers.s]\ncommand = [\"true\"]\n{text}");
        crate::manifest::Manifest::parse(
            crate::error::SourceFile::new("t.toml", text.clone()),
            std::path::PathBuf::from("/t/tools.toml"),
            crate::tools::KINDS,
        )
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"))
    }

    #[test]
    fn a_tool_without_annotations_says_why_it_is_a_write_and_reads_can_be_marked() {
        let tools = vec![
            json!({"name": "read_query", "description": "Run a SELECT.\n\nReturns rows as \"JSON\" \\ text."}),
            json!({"name": "write_query"}),
            json!({"name": "list_tables", "annotations": {"readOnlyHint": true}}),
        ];
        let text = super::import_toml("s", &tools, None, &["read_*".into()]);
        let m = parse(&text);
        let effect = |i: usize| m.tools[i].effect;
        assert_eq!(effect(0), crate::manifest::Effect::Read, "{text}");
        assert!(m.tools[0].idempotent);
        assert_eq!(effect(1), crate::manifest::Effect::Write);
        assert_eq!(effect(2), crate::manifest::Effect::Read);
        assert_eq!(
            text.matches("declares no readOnlyHint").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("declares no readOnlyHint for `write_query`"),
            "{text}"
        );
        assert!(text.contains("\"\"\"\nRun a SELECT.\n\nReturns"), "{text}");
        assert_eq!(
            m.tools[0].description.as_deref(),
            Some("Run a SELECT.\n\nReturns rows as \"JSON\" \\ text.")
        );
    }

    #[test]
    fn globs_match_whole_names() {
        use super::glob_match as g;
        assert!(g("read_*", "read_query") && g("*", "") && g("l?st_*", "list_tables"));
        assert!(g("*_query", "read_query") && g("a*b*c", "aXbYc"));
        assert!(!g("read_*", "xread_query") && !g("a*b", "ab_") && !g("?", ""));
    }
}
