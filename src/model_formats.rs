//! Tool calls as model APIs produce them: an OpenAI chat-completions response (a whole
//! response, a choice, or an assistant message with `tool_calls[].function.{name,arguments}`,
//! where `arguments` is a JSON string) or an Anthropic Messages response (a whole response or
//! a content list with `tool_use` blocks). Both become ordinary calls, keeping the model's call
//! ids as result ids so the answers can be sent straight back.

use serde_json::{json, Value};

/// `--input-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum InputFormat {
    /// Detect OpenAI and Anthropic shapes; otherwise a batch.
    #[default]
    Auto,
    /// A batch document, a sequence of calls, or JSON.
    Batch,
    /// JSON Lines: one call object per line.
    Jsonl,
    Openai,
    Anthropic,
}

/// Which model shape `v` has, if any.
pub fn detect(v: &Value) -> Option<InputFormat> {
    let is_anthropic_block = |b: &Value| b["type"] == "tool_use";
    match v {
        Value::Object(m) if m.contains_key("choices") || m.contains_key("tool_calls") => {
            Some(InputFormat::Openai)
        }
        Value::Object(m)
            if m.get("message")
                .is_some_and(|x| x.get("tool_calls").is_some()) =>
        {
            Some(InputFormat::Openai)
        }
        Value::Object(m)
            if m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(is_anthropic_block)) =>
        {
            Some(InputFormat::Anthropic)
        }
        Value::Array(a) if !a.is_empty() && a.iter().any(is_anthropic_block) => {
            Some(InputFormat::Anthropic)
        }
        _ => None,
    }
}

/// Calls from an OpenAI response, choice or assistant message.
pub fn from_openai(v: &Value) -> Result<Vec<Value>, String> {
    let message = if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        let first = choices.first().ok_or("the response has no choices")?;
        &first["message"]
    } else if v.get("message").is_some() {
        &v["message"]
    } else {
        v
    };
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .ok_or("the message has no tool_calls")?;
    let mut out = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let id = c["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("c{}", i + 1));
        let name = c["function"]["name"]
            .as_str()
            .ok_or_else(|| format!("tool call `{id}` has no function.name"))?;
        let args = match &c["function"]["arguments"] {
            Value::String(s) if s.trim().is_empty() => json!({}),
            Value::String(s) => serde_json::from_str::<Value>(s).map_err(|e| {
                format!("tool call `{id}` ({name}): the model's arguments are not valid JSON: {e}")
            })?,
            Value::Null => json!({}),
            other => other.clone(),
        };
        out.push(json!({"id": id, "tool": name, "args": args}));
    }
    Ok(out)
}

/// Calls from an Anthropic response or content list (`tool_use` blocks; text blocks ignored).
pub fn from_anthropic(v: &Value) -> Result<Vec<Value>, String> {
    let blocks = match v {
        Value::Array(a) => a,
        Value::Object(m) => m
            .get("content")
            .and_then(Value::as_array)
            .ok_or("the message has no content list")?,
        _ => return Err("expected a Messages response or a content list".into()),
    };
    Ok(blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .enumerate()
        .map(|(i, b)| {
            let id = b["id"].as_str().map(str::to_string).unwrap_or_else(|| format!("c{}", i + 1));
            json!({"id": id, "tool": b["name"], "args": b.get("input").cloned().unwrap_or_else(|| json!({}))})
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shapes_become_calls() {
        let msg = json!({"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "db.getOrders", "arguments": "{}"}}
        ]});
        let response = json!({"choices": [{"index": 0, "message": msg.clone(), "finish_reason": "tool_calls"}]});
        for v in [&msg, &response, &response["choices"][0]] {
            assert_eq!(detect(v), Some(InputFormat::Openai));
            let calls = from_openai(v).unwrap();
            assert_eq!(
                calls[0],
                json!({"id": "call_1", "tool": "search", "args": {"query": "x"}})
            );
            assert_eq!(calls[1]["tool"], "db.getOrders");
        }
    }

    #[test]
    fn invalid_argument_json_names_the_call() {
        let v = json!({"tool_calls": [{"id": "call_9", "function": {"name": "search", "arguments": "{\"query\": "}}]});
        let e = from_openai(&v).unwrap_err();
        assert!(e.contains("call_9") && e.contains("not valid JSON"), "{e}");
    }

    #[test]
    fn anthropic_shapes_become_calls() {
        let content = json!([
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"query": "x"}},
            {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {"city": "Paris"}}
        ]);
        let response = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": content.clone(), "stop_reason": "tool_use"});
        for v in [&content, &response] {
            assert_eq!(detect(v), Some(InputFormat::Anthropic));
            let calls = from_anthropic(v).unwrap();
            assert_eq!(calls.len(), 2);
            assert_eq!(
                calls[1],
                json!({"id": "toolu_02", "tool": "lookup", "args": {"city": "Paris"}})
            );
        }
        assert_eq!(detect(&json!({"calls": []})), None);
    }
}
