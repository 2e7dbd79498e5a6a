//! `--emit`: results as the messages a provider's tool loop sends back to the model, one
//! answer per call, in call order, each carrying the call's id as the model sent it.
//!
//! | `--emit` | whole run | with `--stream`, one line per call | no calls |
//! | --- | --- | --- | --- |
//! | `openai` | an array of `{"role": "tool", "tool_call_id", "content"}` | the message | `[]` |
//! | `openai-responses` | an array of `function_call_output` items | the item | `[]` |
//! | `anthropic` | one user message of `tool_result` blocks | the block | nothing |
//! | `gemini` | one `{"role": "user", "parts": [functionResponse…]}` content | the part | nothing |
//!
//! A user message or content with no blocks or parts is refused by those APIs, so a run with
//! no calls prints nothing for them. Failures are marked as each provider expects: `is_error`
//! (Anthropic), `{"error": …}` as the response (Gemini), an `ERROR (…)` text otherwise.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::events::CallResult;

/// Which provider's messages to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Emit {
    /// OpenAI chat completions: tool messages.
    Openai,
    /// OpenAI Responses API: `function_call_output` items.
    OpenaiResponses,
    /// Anthropic Messages: `tool_result` blocks in a user message.
    Anthropic,
    /// Google Gemini: `functionResponse` parts in a user content.
    Gemini,
}

/// The text a model gets back for a call: its output (a string as it is, anything else as
/// JSON text), or for a failure `ERROR (status, kind): message`.
pub(crate) fn model_text(r: &CallResult) -> String {
    match &r.error {
        Some(e) => format!("ERROR ({}, {}): {}", r.status.as_str(), e.kind, e.message),
        None => match &r.output {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        },
    }
}

/// One call's answer: a message, item, block or part.
pub(crate) fn item(emit: Emit, r: &CallResult) -> Value {
    match emit {
        Emit::Openai => json!({"role": "tool", "tool_call_id": r.id, "content": model_text(r)}),
        Emit::OpenaiResponses => {
            json!({"type": "function_call_output", "call_id": r.id, "output": model_text(r)})
        }
        Emit::Anthropic => {
            let mut b =
                json!({"type": "tool_result", "tool_use_id": r.id, "content": model_text(r)});
            if !r.is_ok() {
                b["is_error"] = Value::Bool(true);
            }
            b
        }
        Emit::Gemini => json!({"functionResponse": gemini_response(r)}),
    }
}

/// A Gemini `functionResponse`: `response` is an object — `{"output": …}` or `{"error": …}`.
/// `id` only when the model gave one (ids it did not give are flux-tools' `c1`, `c2`, …).
fn gemini_response(r: &CallResult) -> Value {
    let response = match &r.error {
        Some(_) => json!({"error": model_text(r)}),
        None => json!({"output": r.output}),
    };
    // The name the model called, so its function call and this response match.
    let name = r.called_as.as_deref().unwrap_or(&r.tool);
    let mut f = json!({"name": name, "response": response});
    if !is_default_id(&r.id) {
        f["id"] = Value::String(r.id.clone());
    }
    f
}

/// `c1`, `c2`, …: an id flux-tools gave a call the model did not name.
fn is_default_id(id: &str) -> bool {
    id.strip_prefix('c')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The whole run's answers as one document, or `None` when the provider refuses an empty one.
pub(crate) fn document(emit: Emit, results: &[CallResult]) -> Option<Value> {
    let items: Vec<Value> = results.iter().map(|r| item(emit, r)).collect();
    Some(match emit {
        Emit::Openai | Emit::OpenaiResponses => Value::Array(items),
        _ if items.is_empty() => return None,
        Emit::Anthropic => json!({"role": "user", "content": items}),
        Emit::Gemini => json!({"role": "user", "parts": items}),
    })
}

/// The whole run's answers as one document (pretty JSON and a newline), or nothing when
/// the provider refuses an empty one.
pub(crate) fn write(w: &mut dyn Write, emit: Emit, results: &[CallResult]) -> io::Result<()> {
    let Some(doc) = document(emit, results) else {
        return Ok(());
    };
    serde_json::to_writer_pretty(&mut *w, &doc)?;
    w.write_all(b"\n")
}
