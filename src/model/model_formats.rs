//! Tool calls as model APIs produce them, read into [`ModelCall`]s: an OpenAI chat completion
//! (a whole response, a choice, or an assistant message with `tool_calls`), an OpenAI
//! Responses API response (`output` items of type `function_call`), an Anthropic Messages
//! response (or its content list, `tool_use` blocks), or a Google Gemini response
//! (`candidates[0].content.parts[].functionCall`, or that content; the Python SDK's
//! `function_call` spelling too).
//!
//! A model's reply is data, never a batch: its ids are opaque and kept byte for byte, its
//! arguments reach the tool exactly as sent (no `${…}` references), a reply with no tool calls
//! is zero calls, and a call that cannot be made (arguments that are not a JSON object, no
//! name) is kept as a call with the reason, so it is answered like every other.

use serde_json::{Map, Value};

/// `--input-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputFormat {
    /// Detect the model shapes below; otherwise a batch.
    #[default]
    Auto,
    /// A batch document, a sequence of calls, or JSON.
    Batch,
    /// JSON Lines: one call object per line.
    Jsonl,
    /// OpenAI chat completions.
    Openai,
    /// The OpenAI Responses API.
    OpenaiResponses,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini (generateContent).
    Gemini,
}

impl InputFormat {
    /// The provider's API, for messages ("an OpenAI chat completion").
    pub fn provider(self) -> &'static str {
        match self {
            InputFormat::Openai => "an OpenAI chat completion",
            InputFormat::OpenaiResponses => "an OpenAI Responses API",
            InputFormat::Anthropic => "an Anthropic Messages",
            InputFormat::Gemini => "a Google Gemini",
            InputFormat::Auto | InputFormat::Batch | InputFormat::Jsonl => "a batch",
        }
    }

    /// The name `--input-format` takes (`openai-responses`).
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::Auto => "auto",
            InputFormat::Batch => "batch",
            InputFormat::Jsonl => "jsonl",
            InputFormat::Openai => "openai",
            InputFormat::OpenaiResponses => "openai-responses",
            InputFormat::Anthropic => "anthropic",
            InputFormat::Gemini => "gemini",
        }
    }

    /// A model's reply (as opposed to a batch written for flux-tools).
    pub fn is_model(self) -> bool {
        matches!(
            self,
            InputFormat::Openai
                | InputFormat::OpenaiResponses
                | InputFormat::Anthropic
                | InputFormat::Gemini
        )
    }
}

/// One tool call as the model sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    /// The provider's call id, byte for byte (`None`: it gave none, as Gemini may not).
    pub id: Option<String>,
    /// The tool's name as the model wrote it.
    pub tool: String,
    /// The arguments, or why they cannot be used (answered as an `invalid_call`).
    pub args: Result<Map<String, Value>, String>,
}

/// What a model's reply asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub calls: Vec<ModelCall>,
    /// Things worth a line on stderr (choices that were ignored).
    pub notes: Vec<String>,
    /// The tokens the reply cost, when the provider reported them.
    pub usage: Option<Usage>,
    /// The reply's own id, when the whole response carries one.
    pub id: Option<String>,
}

/// A reply's model and token usage, as its provider reports them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    pub model: Option<String>,
    /// Every input token (Anthropic's cache writes and reads included).
    pub input_tokens: u64,
    /// Every output token (reasoning or thinking included).
    pub output_tokens: u64,
}

/// Which model shape `v` has, if any.
pub fn detect(v: &Value) -> Option<InputFormat> {
    match v {
        Value::Object(m) => detect_object(m),
        Value::Array(a) if !a.is_empty() && a.iter().all(is_anthropic_block) => {
            Some(InputFormat::Anthropic)
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(is_responses_item) => {
            Some(InputFormat::OpenaiResponses)
        }
        _ => None,
    }
}

fn detect_object(m: &Map<String, Value>) -> Option<InputFormat> {
    let role = m.get("role").and_then(Value::as_str);
    let content = m.get("content");
    if m.contains_key("choices") || m.contains_key("tool_calls") {
        return Some(InputFormat::Openai);
    }
    if m.get("message").is_some_and(|x| {
        x.get("tool_calls").is_some() || x.get("role").and_then(Value::as_str) == Some("assistant")
    }) {
        return Some(InputFormat::Openai);
    }
    if m.get("object").and_then(Value::as_str) == Some("response")
        || m.get("output").and_then(Value::as_array).is_some()
    {
        return Some(InputFormat::OpenaiResponses);
    }
    if m.contains_key("candidates") || (m.contains_key("parts") && role == Some("model")) {
        return Some(InputFormat::Gemini);
    }
    let anthropic = m.get("type").and_then(Value::as_str) == Some("message")
        || content
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && a.iter().all(is_anthropic_block));
    if anthropic {
        return Some(InputFormat::Anthropic);
    }
    if role == Some("assistant") && content.is_none_or(|c| c.is_string() || c.is_null()) {
        return Some(InputFormat::Openai);
    }
    None
}

fn is_anthropic_block(b: &Value) -> bool {
    matches!(
        b.get("type").and_then(Value::as_str),
        Some("text" | "tool_use" | "thinking" | "redacted_thinking" | "server_tool_use")
    )
}

fn is_responses_item(b: &Value) -> bool {
    matches!(
        b.get("type").and_then(Value::as_str),
        Some("function_call" | "message" | "reasoning")
    )
}

/// Read a reply of shape `format` (never `Auto`, `Batch` or `Jsonl`).
pub fn read(format: InputFormat, v: &Value) -> Result<Reply, String> {
    let mut reply = match format {
        InputFormat::Openai => from_openai(v),
        InputFormat::OpenaiResponses => from_responses(v),
        InputFormat::Anthropic => from_anthropic(v),
        InputFormat::Gemini => from_gemini(v),
        InputFormat::Auto | InputFormat::Batch | InputFormat::Jsonl => {
            Err("not a model's reply".into())
        }
    }?;
    reply.usage = usage(format, v);
    reply.id = reply_id(format, v);
    Ok(reply)
}

/// The model and token counts a whole response carries (`None` for a bare message or a list
/// of blocks, which carry none).
pub(crate) fn usage(format: InputFormat, v: &Value) -> Option<Usage> {
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    let model = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| v.get(*k).and_then(Value::as_str))
            .map(str::to_string)
    };
    let (model, input, output) = match format {
        InputFormat::Openai => {
            let u = v.get("usage").filter(|u| u.is_object())?;
            (
                model(&["model"]),
                n(&u["prompt_tokens"]),
                n(&u["completion_tokens"]),
            )
        }
        InputFormat::OpenaiResponses => {
            let u = v.get("usage").filter(|u| u.is_object())?;
            (
                model(&["model"]),
                n(&u["input_tokens"]),
                n(&u["output_tokens"]),
            )
        }
        InputFormat::Anthropic => {
            let u = v.get("usage").filter(|u| u.is_object())?;
            let input = n(&u["input_tokens"])
                + n(&u["cache_creation_input_tokens"])
                + n(&u["cache_read_input_tokens"]);
            (model(&["model"]), input, n(&u["output_tokens"]))
        }
        InputFormat::Gemini => {
            // The REST API writes camelCase; the Python SDK's `model_dump_json()` snake_case.
            let u = ["usageMetadata", "usage_metadata"]
                .iter()
                .find_map(|k| v.get(*k).filter(|u| u.is_object()))?;
            let field = |a: &str, b: &str| n(u.get(a).or_else(|| u.get(b)).unwrap_or(&Value::Null));
            let output = field("candidatesTokenCount", "candidates_token_count")
                + field("thoughtsTokenCount", "thoughts_token_count");
            let input = field("promptTokenCount", "prompt_token_count");
            (model(&["modelVersion", "model_version"]), input, output)
        }
        InputFormat::Auto | InputFormat::Batch | InputFormat::Jsonl => return None,
    };
    Some(Usage {
        model,
        input_tokens: input,
        output_tokens: output,
    })
}

/// A whole response's id: `chatcmpl-…` (OpenAI chat), `resp_…` (Responses), `msg_…`
/// (Anthropic), `responseId` (Gemini). `None` for a bare message or a list of blocks.
pub(crate) fn reply_id(format: InputFormat, v: &Value) -> Option<String> {
    let key = match format {
        InputFormat::Openai if v.get("choices").is_some() => "id",
        InputFormat::OpenaiResponses if v.get("output").is_some() => "id",
        InputFormat::Anthropic if v.get("content").is_some() => "id",
        InputFormat::Gemini => {
            return ["responseId", "response_id"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
                .map(str::to_string)
        }
        _ => return None,
    };
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The first of several alternatives, with a note that the others were ignored.
fn first_of<'v>(list: &'v [Value], what: &str, notes: &mut Vec<String>) -> Option<&'v Value> {
    if list.len() > 1 {
        notes.push(format!(
            "the reply has {} {what}s; {what} 0 ran and the others were ignored",
            list.len()
        ));
    }
    list.first()
}

/// Arguments sent as a JSON string (OpenAI): an object, or why not.
fn args_from_text(text: &Value) -> Result<Map<String, Value>, String> {
    match text {
        Value::Null => Ok(Map::new()),
        Value::String(s) if s.trim().is_empty() => Ok(Map::new()),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => args_object(v),
            Err(e) => Err(format!("the model's arguments are not valid JSON: {e}")),
        },
        other => args_object(other.clone()),
    }
}

/// Arguments as an object, or why not.
fn args_object(v: Value) -> Result<Map<String, Value>, String> {
    match v {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => Err(format!(
            "the model's arguments are {}, not a JSON object",
            crate::schema::value_kind(&other)
        )),
    }
}

fn name_of(v: &Value) -> Result<String, String> {
    match v.as_str() {
        Some(n) => Ok(n.to_string()),
        None => Err("the call has no tool name".into()),
    }
}

/// Calls from an OpenAI chat completion, choice or assistant message.
pub(crate) fn from_openai(v: &Value) -> Result<Reply, String> {
    let mut reply = Reply::default();
    let message = match v.get("choices").and_then(Value::as_array) {
        Some(choices) => match first_of(choices, "choice", &mut reply.notes) {
            Some(choice) => &choice["message"],
            None => return Ok(reply),
        },
        None if v.get("message").is_some() => &v["message"],
        None => v,
    };
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Ok(reply);
    };
    for c in calls {
        let id = c.get("id").and_then(Value::as_str).map(str::to_string);
        let (tool, args) = match c.get("type").and_then(Value::as_str) {
            Some("custom") => (
                c["custom"]["name"].as_str().unwrap_or_default().to_string(),
                Err(
                    "custom (free-text) tool calls are not supported; declare a function tool"
                        .into(),
                ),
            ),
            _ => match name_of(&c["function"]["name"]) {
                Ok(name) => (name, args_from_text(&c["function"]["arguments"])),
                Err(e) => (String::new(), Err(e)),
            },
        };
        reply.calls.push(ModelCall { id, tool, args });
    }
    Ok(reply)
}

/// Calls from an OpenAI Responses API response (or its `output` list).
pub(crate) fn from_responses(v: &Value) -> Result<Reply, String> {
    let items = match v {
        Value::Array(a) => a,
        _ => v
            .get("output")
            .and_then(Value::as_array)
            .ok_or("the response has no `output` list")?,
    };
    let mut reply = Reply::default();
    for item in items.iter().filter(|i| i["type"] == "function_call") {
        let id = item
            .get("call_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (tool, args) = match name_of(&item["name"]) {
            Ok(name) => (name, args_from_text(&item["arguments"])),
            Err(e) => (String::new(), Err(e)),
        };
        reply.calls.push(ModelCall { id, tool, args });
    }
    Ok(reply)
}

/// Calls from an Anthropic Messages response or content list (`tool_use` blocks).
pub(crate) fn from_anthropic(v: &Value) -> Result<Reply, String> {
    let blocks = match v {
        Value::Array(a) => a,
        Value::Object(m) => m
            .get("content")
            .and_then(Value::as_array)
            .ok_or("the message has no content list")?,
        _ => return Err("expected a Messages response or a content list".into()),
    };
    let mut reply = Reply::default();
    for b in blocks.iter().filter(|b| b["type"] == "tool_use") {
        let id = b.get("id").and_then(Value::as_str).map(str::to_string);
        let (tool, args) = match name_of(&b["name"]) {
            Ok(name) => (
                name,
                args_object(b.get("input").cloned().unwrap_or(Value::Null)),
            ),
            Err(e) => (String::new(), Err(e)),
        };
        reply.calls.push(ModelCall { id, tool, args });
    }
    Ok(reply)
}

/// Calls from a Gemini response (`candidates`) or one content (`parts`).
pub(crate) fn from_gemini(v: &Value) -> Result<Reply, String> {
    let mut reply = Reply::default();
    let content = match v.get("candidates").and_then(Value::as_array) {
        Some(candidates) => match first_of(candidates, "candidate", &mut reply.notes) {
            Some(c) => &c["content"],
            None => return Ok(reply),
        },
        None => v,
    };
    let Some(parts) = content.get("parts").and_then(Value::as_array) else {
        return Ok(reply);
    };
    // The REST API writes `functionCall`; the Python SDK's `model_dump_json()` `function_call`.
    let calls = parts.iter().filter_map(|p| {
        p.get("functionCall")
            .or_else(|| p.get("function_call"))
            .filter(|c| c.is_object())
    });
    for call in calls {
        let id = call.get("id").and_then(Value::as_str).map(str::to_string);
        let (tool, args) = match name_of(&call["name"]) {
            Ok(name) => (
                name,
                args_object(call.get("args").cloned().unwrap_or(Value::Null)),
            ),
            Err(e) => (String::new(), Err(e)),
        };
        reply.calls.push(ModelCall { id, tool, args });
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, tool: &str, args: Value) -> ModelCall {
        ModelCall {
            id: Some(id.into()),
            tool: tool.into(),
            args: Ok(args.as_object().cloned().unwrap_or_default()),
        }
    }

    #[test]
    fn openai_shapes_become_calls() {
        let msg = json!({"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "db.getOrders", "arguments": "{}"}}
        ]});
        let response = json!({"choices": [{"index": 0, "message": msg.clone(), "finish_reason": "tool_calls"}]});
        for v in [&msg, &response, &response["choices"][0]] {
            assert_eq!(detect(v), Some(InputFormat::Openai));
            let reply = from_openai(v).unwrap();
            assert_eq!(
                reply.calls[0],
                call("call_1", "search", json!({"query": "x"}))
            );
            assert_eq!(reply.calls[1].tool, "db.getOrders");
        }
    }

    #[test]
    fn a_bad_call_is_kept_with_its_reason() {
        let v = json!({"tool_calls": [
            {"id": "call_9", "function": {"name": "search", "arguments": "{\"query\": "}},
            {"id": "call.x/y", "function": {"name": "search", "arguments": "[1]"}},
            {"id": "call_ok", "function": {"name": "search", "arguments": "{}"}}
        ]});
        let reply = from_openai(&v).unwrap();
        assert!(reply.calls[0]
            .args
            .as_ref()
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(reply.calls[1]
            .args
            .as_ref()
            .unwrap_err()
            .contains("an array"));
        assert_eq!(reply.calls[1].id.as_deref(), Some("call.x/y"));
        assert!(reply.calls[2].args.is_ok());
    }

    #[test]
    fn no_tool_calls_is_zero_calls_in_every_format() {
        let openai = [
            json!({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}),
            json!({"choices": [{"message": {"role": "assistant", "content": "hi", "tool_calls": null}}]}),
            json!({"choices": [{"message": {"role": "assistant", "content": "hi", "tool_calls": []}}]}),
            json!({"role": "assistant", "content": "hi"}),
        ];
        for v in &openai {
            assert_eq!(detect(v), Some(InputFormat::Openai), "{v}");
            assert!(from_openai(v).unwrap().calls.is_empty());
        }
        let anthropic = json!({"type": "message", "role": "assistant", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Done."}]});
        assert_eq!(detect(&anthropic), Some(InputFormat::Anthropic));
        assert!(from_anthropic(&anthropic).unwrap().calls.is_empty());
        let responses =
            json!({"object": "response", "output": [{"type": "message", "content": []}]});
        assert_eq!(detect(&responses), Some(InputFormat::OpenaiResponses));
        assert!(from_responses(&responses).unwrap().calls.is_empty());
        let gemini =
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}]});
        assert_eq!(detect(&gemini), Some(InputFormat::Gemini));
        assert!(from_gemini(&gemini).unwrap().calls.is_empty());
    }

    #[test]
    fn several_choices_run_the_first_and_say_so() {
        let v = json!({"choices": [
            {"message": {"tool_calls": [{"id": "a", "function": {"name": "t", "arguments": "{}"}}]}},
            {"message": {"tool_calls": [{"id": "b", "function": {"name": "t", "arguments": "{}"}}]}}
        ]});
        let reply = from_openai(&v).unwrap();
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.notes.len(), 1, "{:?}", reply.notes);
    }

    #[test]
    fn anthropic_responses_and_gemini_shapes_become_calls() {
        let content = json!([
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"query": "x"}}
        ]);
        let response = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": content.clone(), "stop_reason": "tool_use"});
        for v in [&content, &response] {
            assert_eq!(detect(v), Some(InputFormat::Anthropic));
            assert_eq!(
                from_anthropic(v).unwrap().calls,
                [call("toolu_01", "search", json!({"query": "x"}))]
            );
        }
        let responses = json!({"object": "response", "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_A", "name": "search", "arguments": "{\"query\":\"x\"}"}
        ]});
        assert_eq!(detect(&responses), Some(InputFormat::OpenaiResponses));
        assert_eq!(
            from_responses(&responses).unwrap().calls,
            [call("call_A", "search", json!({"query": "x"}))]
        );
        let gemini = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "search", "args": {"query": "x"}}},
            {"functionCall": {"id": "g-2", "name": "lookup", "args": {}}}
        ]}}]});
        assert_eq!(detect(&gemini), Some(InputFormat::Gemini));
        let reply = from_gemini(&gemini).unwrap();
        assert_eq!(reply.calls[0].id, None);
        assert_eq!(reply.calls[1].id.as_deref(), Some("g-2"));
        assert_eq!(detect(&json!({"calls": []})), None);
        assert_eq!(detect(&json!([{"tool": "x"}])), None);
    }
}
