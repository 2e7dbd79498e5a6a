//! `flux-tools tools --emit PROVIDER`: the manifest's tools as a model provider's request takes
//! them — the `tools` of an OpenAI chat completion or Responses request, Anthropic's `tools`,
//! Gemini's `tools` — each with a real JSON Schema of its arguments (an MCP tool's own input
//! schema as its server gives it), under a name every provider accepts.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::manifest::{export_name, Manifest, Tool};
use crate::report::emit::Emit;

/// One tool as offered to a model.
pub(crate) struct Offer {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Value,
    /// OpenAI's strict mode (`--strict`, and the schema allows it).
    pub strict: bool,
}

/// The tools to offer: `select` (manifest or exported names; all when `None`), with MCP
/// tools' input schemas from `remote` (by tool name). `Err` names an unknown tool. The notes
/// say which tools cannot be strict, and why.
pub(crate) fn offers(
    manifest: &Manifest,
    select: Option<&[String]>,
    strict: bool,
    remote: &HashMap<String, Value>,
) -> Result<(Vec<Offer>, Vec<String>), String> {
    let tools: Vec<&Tool> = manifest
        .select_tools(select)?
        .into_iter()
        .map(|i| &manifest.tools[i])
        .collect();
    let mut notes = Vec::new();
    let offers = tools
        .into_iter()
        .map(|t| {
            let (parameters, can) = match (remote.get(&t.name), &t.args) {
                (Some(schema), _) => (schema.clone(), None),
                (None, Some(args)) => {
                    let refusal = args.strict_refusal();
                    let on = strict && refusal.is_none();
                    (args.json_schema(on), refusal)
                }
                (None, None) => (
                    json!({"type": "object", "properties": {}}),
                    Some("it declares no [args] schema".to_string()),
                ),
            };
            let is_strict = strict && can.is_none() && !remote.contains_key(&t.name);
            if strict && !is_strict {
                let why = can.unwrap_or_else(|| "its schema is its MCP server's".into());
                notes.push(format!("tool `{}` cannot be strict: {why}", t.name));
            }
            Offer {
                name: export_name(&t.name),
                description: t.description.as_deref().map(crate::template::redact_raw),
                parameters,
                strict: is_strict,
            }
        })
        .collect();
    Ok((offers, notes))
}

/// The `tools` value of a request to `emit`'s API.
pub(crate) fn document(emit: Emit, offers: &[Offer]) -> Value {
    let desc = |o: &Offer| o.description.clone().unwrap_or_default();
    match emit {
        Emit::Openai => Value::Array(
            offers
                .iter()
                .map(|o| {
                    let mut f = json!({"name": o.name, "description": desc(o), "parameters": o.parameters});
                    if o.strict {
                        f["strict"] = json!(true);
                    }
                    json!({"type": "function", "function": f})
                })
                .collect(),
        ),
        Emit::OpenaiResponses => Value::Array(
            offers
                .iter()
                .map(|o| {
                    json!({"type": "function", "name": o.name, "description": desc(o),
                           "parameters": o.parameters, "strict": o.strict})
                })
                .collect(),
        ),
        Emit::Anthropic => Value::Array(
            offers
                .iter()
                .map(|o| json!({"name": o.name, "description": desc(o), "input_schema": o.parameters}))
                .collect(),
        ),
        Emit::Gemini => json!([{"function_declarations": offers
            .iter()
            .map(|o| json!({"name": o.name, "description": desc(o), "parameters_json_schema": o.parameters}))
            .collect::<Vec<_>>()}]),
    }
}
