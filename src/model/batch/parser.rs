//! Reading a batch document's YAML tree into calls, collecting every problem with its
//! location: ids, tools, arguments (with references compiled), `after`, and the batch's own
//! narrowing, deadline and budget.

use super::*;
use crate::ids::check_id;

pub(super) struct Parser<'a> {
    pub(super) file: &'a SourceFile,
    pub(super) diags: Vec<Diagnostic>,
    pub(super) locator: Locator,
    /// Default ids count from here (a chunk of a stream continues its predecessors' numbering).
    pub(super) id_offset: usize,
    /// `--literal`: arguments are data, no references.
    pub(super) literal: bool,
}

impl Parser<'_> {
    pub(super) fn file_error(&mut self, msg: impl Into<String>, hint: Option<String>) {
        self.diags.push(
            Diagnostic::error(msg)
                .in_file(&self.file.name)
                .maybe_hint(hint),
        );
    }

    /// Locate a top-level key `key:` of the document.
    pub(super) fn key_loc(&self, key: &str) -> Option<crate::error::Location> {
        let text = &self.file.text;
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            let t = line.trim_start_matches([' ', '{', '"']);
            if t.starts_with(key)
                && t[key.len()..]
                    .trim_start_matches('"')
                    .trim_start()
                    .starts_with(':')
            {
                let start = offset + (line.len() - t.len());
                return Some(self.file.location(start, start + key.len()));
            }
            offset += line.len();
        }
        None
    }

    pub(super) fn doc_error(&mut self, key: &str, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.key_loc(key);
        self.diags.push(
            Diagnostic::error(msg)
                .at(loc)
                .in_file(&self.file.name)
                .maybe_hint(hint),
        );
    }

    /// A batch document's settings into `batch`; returns its calls.
    pub(super) fn document(&mut self, doc: Map<String, Value>, batch: &mut Batch) -> Vec<Value> {
        for k in doc.keys() {
            if !DOC_KEYS.contains(&k.as_str()) {
                let hint = suggest(k, DOC_KEYS.iter().copied())
                    .or_else(|| Some(format!("known fields: {}", DOC_KEYS.join(", "))));
                self.doc_error(k, format!("unknown field `{k}` in the batch"), hint);
            }
        }
        batch.tenant = doc.get("tenant").and_then(|t| self.tenant(t));
        batch.run_id = doc.get("run_id").and_then(|t| self.run_id(t));
        if let Some(c) = doc.get("concurrency") {
            batch.concurrency = self.narrowing(c);
        }
        batch.on_tool_error = doc.get("on_tool_error").and_then(|v| self.on_tool_error(v));
        if let Some(d) = doc.get("deadline") {
            self.deadline(d, batch);
        }
        if let Some(b) = doc.get("budget") {
            self.budget(b, batch);
        }
        self.calls_of(doc.get("calls"))
    }

    pub(super) fn tenant(&mut self, t: &Value) -> Option<String> {
        match t {
            Value::String(t) if !t.is_empty() && check_id("call id", t).is_ok() => Some(t.clone()),
            Value::String(t) => {
                let why = check_id("call id", t)
                    .err()
                    .unwrap_or_default()
                    .replace("call id", "tenant");
                self.doc_error("tenant", format!("invalid tenant: {why}"), None);
                None
            }
            other => {
                let found = crate::schema::value_kind(other);
                let msg = format!("`tenant` should be a string, found {found}");
                self.doc_error("tenant", msg, None);
                None
            }
        }
    }

    /// `run_id`: an id as call ids are (letters, digits, `_`, `-`, `:`).
    pub(super) fn run_id(&mut self, t: &Value) -> Option<String> {
        let why = match t {
            Value::String(t) => match check_id("run id", t) {
                Ok(()) => return Some(t.clone()),
                Err(why) => format!("invalid run_id: {why}"),
            },
            other => format!(
                "`run_id` should be a string, found {}",
                crate::schema::value_kind(other)
            ),
        };
        let hint = "a run id names one intent: the same batch run again with it sends the same idempotency keys".to_string();
        self.doc_error("run_id", why, Some(hint));
        None
    }

    /// `surface` or `fail_run` (also spelled `fail-run`, as on the command line).
    pub(super) fn on_tool_error(&mut self, v: &Value) -> Option<OnToolError> {
        match v.as_str() {
            Some("surface") => Some(OnToolError::Surface),
            Some("fail_run" | "fail-run") => Some(OnToolError::FailRun),
            _ => {
                let hint = v.as_str().and_then(|s| suggest(s, ["surface", "fail_run"]));
                let msg = format!("`on_tool_error` is {v}; use `surface` or `fail_run`");
                self.doc_error("on_tool_error", msg, hint);
                None
            }
        }
    }

    /// `deadline: { run_seconds, tool_call_seconds }`.
    pub(super) fn deadline(&mut self, d: &Value, batch: &mut Batch) {
        let Some(m) = d.as_object() else {
            let msg = "`deadline` should be a mapping like { run_seconds: 30 }";
            return self.doc_error("deadline", msg, None);
        };
        for (k, v) in m {
            let secs = v
                .as_f64()
                .and_then(crate::duration::from_secs_f64)
                .filter(|d| !d.is_zero());
            match (k.as_str(), secs) {
                ("run_seconds", Some(s)) => batch.run_deadline = Some(s),
                ("tool_call_seconds", Some(s)) => batch.tool_call_deadline = Some(s),
                ("run_seconds" | "tool_call_seconds", None) => {
                    let msg =
                        format!("`deadline.{k}` must be a positive number of seconds, found {v}");
                    self.doc_error("deadline", msg, None)
                }
                _ => self.doc_error(
                    "deadline",
                    format!("unknown field `{k}` in `deadline`"),
                    suggest(k, ["run_seconds", "tool_call_seconds"]),
                ),
            }
        }
    }

    /// `budget: { max_cost, max_calls }`.
    pub(super) fn budget(&mut self, b: &Value, batch: &mut Batch) {
        let Some(m) = b.as_object() else {
            let msg = "`budget` should be a mapping like { max_cost: 0.5, max_calls: 20 }";
            self.doc_error("budget", msg, None);
            return;
        };
        for (k, v) in m {
            match k.as_str() {
                "max_cost" => match v.as_f64() {
                    Some(c) if c >= 0.0 && c.is_finite() => batch.max_cost = Some(c),
                    _ => {
                        let msg =
                            format!("`budget.max_cost` must be a non-negative number, found {v}");
                        self.doc_error("budget", msg, None)
                    }
                },
                "max_calls" => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                    Some(n) => batch.max_calls = Some(n),
                    None => {
                        let msg = format!(
                            "`budget.max_calls` must be a whole number of calls, found {v}"
                        );
                        self.doc_error("budget", msg, None)
                    }
                },
                _ => self.doc_error(
                    "budget",
                    format!("unknown field `{k}` in `budget`"),
                    suggest(k, ["max_cost", "max_calls"]),
                ),
            }
        }
    }

    /// `calls:`, a sequence.
    pub(super) fn calls_of(&mut self, calls: Option<&Value>) -> Vec<Value> {
        match calls {
            Some(Value::Array(a)) => a.clone(),
            Some(other) => {
                let found = crate::schema::value_kind(other);
                let msg = format!("`calls` should be a sequence of calls, found {found}");
                self.doc_error("calls", msg, None);
                Vec::new()
            }
            None => {
                self.file_error(
                    "the batch has no `calls`",
                    Some("add `calls:` with a sequence of { tool, args }".into()),
                );
                Vec::new()
            }
        }
    }

    pub(super) fn narrowing(&mut self, c: &Value) -> Narrowing {
        let mut n = Narrowing::default();
        let Some(m) = c.as_object() else {
            self.doc_error(
                "concurrency",
                "`concurrency` should be a mapping like { max_concurrent_tools: 2 }",
                None,
            );
            return n;
        };
        let count = |p: &mut Self, key: &str, v: &Value| -> Option<u32> {
            match v.as_u64() {
                Some(x) if (1..=1_000_000).contains(&x) => u32::try_from(x).ok(),
                _ => {
                    p.doc_error("concurrency", format!("`concurrency.{key}` must be a whole number from 1 to 1000000, found {v}"), None);
                    None
                }
            }
        };
        for (k, v) in m {
            match k.as_str() {
                "max_concurrent_tools" => n.max_concurrent_tools = count(self, k, v),
                "per_tenant" => n.per_tenant = count(self, k, v),
                "hazards" => match v.as_str().and_then(crate::manifest::Hazards::parse) {
                    Some(h) => n.hazards = Some(h),
                    None => self.doc_error(
                        "concurrency",
                        format!("`concurrency.hazards` is {v}; use `backend` or `writes`"),
                        None,
                    ),
                },
                "per_tool" => match v.as_object() {
                    Some(pt) => {
                        for (tool, lim) in pt {
                            if let Some(x) = count(self, &format!("per_tool.{tool}"), lim) {
                                n.per_tool.insert(tool.clone(), x);
                            }
                        }
                    }
                    None => self.doc_error(
                        "concurrency",
                        "`concurrency.per_tool` should be a mapping of tool to limit",
                        None,
                    ),
                },
                _ => self.doc_error(
                    "concurrency",
                    format!("unknown field `{k}` in `concurrency`"),
                    suggest(
                        k,
                        ["max_concurrent_tools", "per_tenant", "per_tool", "hazards"],
                    ),
                ),
            }
        }
        n
    }

    pub(super) fn call_error(
        &mut self,
        index: usize,
        key: Option<&str>,
        needle: &str,
        msg: String,
        hint: Option<String>,
    ) {
        let text = &self.file.text;
        let loc = self
            .locator
            .find(text, index, key, needle)
            .or_else(|| self.locator.call_start(text, index))
            .map(|r| self.file.location(r.start, r.end));
        self.diags.push(
            Diagnostic::error(msg)
                .at(loc)
                .in_file(&self.file.name)
                .maybe_hint(hint),
        );
    }

    /// One call of the batch (`None`: its problems are reported).
    pub(super) fn call(&mut self, index: usize, value: Value) -> Option<Call> {
        let Value::Object(mut m) = value else {
            let found = crate::schema::value_kind(&value);
            let msg = format!(
                "call #{} should be a mapping with `tool` and `args`, found {found}",
                index + 1
            );
            self.call_error(index, None, "-", msg, None);
            return None;
        };
        let explicit_id = !matches!(m.get("id"), None | Some(Value::Null));
        let id = self.call_id(index, m.remove("id"))?;
        self.check_call_keys(index, &m, &id);
        let tool = self.call_tool(index, m.get("tool"), &id)?;
        let args = self.call_args(index, m.remove("args"), &id)?;
        let after = self.call_after(index, m.get("after"), &id);
        Some(Call {
            id,
            explicit_id,
            tool,
            args: std::sync::Arc::new(args),
            after,
            invalid: None,
        })
    }

    /// `id`, else `c1`, `c2`, … by position.
    pub(super) fn call_id(&mut self, index: usize, id: Option<Value>) -> Option<String> {
        match id {
            None | Some(Value::Null) => Some(format!("c{}", self.id_offset + index + 1)),
            Some(Value::String(s)) => match check_id("call id", &s) {
                Ok(()) => Some(s),
                Err(e) => {
                    let msg = format!("call #{}: {e}", index + 1);
                    self.call_error(index, Some("id"), &s, msg, None);
                    None
                }
            },
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(other) => {
                let found = crate::schema::value_kind(&other);
                let msg = format!(
                    "call #{}: `id` should be a string, found {found}",
                    index + 1
                );
                self.call_error(index, Some("id"), "id", msg, None);
                None
            }
        }
    }

    pub(super) fn check_call_keys(&mut self, index: usize, m: &Map<String, Value>, id: &str) {
        for k in m.keys() {
            if CALL_KEYS.contains(&k.as_str()) {
                continue;
            }
            let hint = match k.as_str() {
                "name" | "function" => Some("the tool is named by `tool:`".to_string()),
                "arguments" | "input" | "params" => Some("arguments go under `args:`".to_string()),
                _ => suggest(k, CALL_KEYS.iter().copied()),
            };
            let msg = format!("unknown field `{k}` in call `{id}`");
            self.call_error(index, None, k, msg, hint);
        }
    }

    pub(super) fn call_tool(
        &mut self,
        index: usize,
        tool: Option<&Value>,
        id: &str,
    ) -> Option<String> {
        match tool {
            Some(Value::String(t)) if !t.is_empty() => Some(t.clone()),
            Some(other) if !other.is_string() => {
                let found = crate::schema::value_kind(other);
                let msg = format!("call `{id}`: `tool` should be a string, found {found}");
                self.call_error(index, Some("tool"), "tool", msg, None);
                None
            }
            _ => {
                let msg = format!("call `{id}` names no `tool`");
                self.call_error(index, None, "-", msg, Some("add `tool: NAME`".into()));
                None
            }
        }
    }

    /// `args`, a mapping, with its references compiled.
    pub(super) fn call_args(
        &mut self,
        index: usize,
        args: Option<Value>,
        id: &str,
    ) -> Option<Args> {
        let args = match args {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a,
            Some(other) => {
                let found = crate::schema::value_kind(&other);
                let msg = format!("call `{id}`: `args` should be a mapping, found {found}");
                self.call_error(index, Some("args"), "args", msg, None);
                return None;
            }
        };
        if self.literal {
            return Some(Args::literal(args));
        }
        let (args, errors) = Args::compile(args);
        for e in errors {
            let msg = format!("call `{id}`: {}", e.message);
            self.call_error(index, None, &e.text, msg, None);
        }
        Some(args)
    }

    /// `after`: one call id or a list of them.
    pub(super) fn call_after(
        &mut self,
        index: usize,
        after: Option<&Value>,
        id: &str,
    ) -> Vec<String> {
        match after {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => {
                let mut out = Vec::new();
                for x in a {
                    match x.as_str() {
                        Some(s) => out.push(s.to_string()),
                        None => {
                            let msg = format!(
                                "call `{id}`: each entry of `after` should be a call id, found {x}"
                            );
                            self.call_error(index, Some("after"), "after", msg, None)
                        }
                    }
                }
                out
            }
            Some(other) => {
                let found = crate::schema::value_kind(other);
                let msg =
                    format!("call `{id}`: `after` should be a list of call ids, found {found}");
                self.call_error(index, Some("after"), "after", msg, None);
                Vec::new()
            }
        }
    }
}
