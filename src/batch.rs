//! The batch: the calls one model turn asked for, with the batch's own narrowing, error
//! policy, deadline and budget (SPEC section 3).
//!
//! Accepted shapes: the full document (`tenant`, `calls`, …), a bare sequence of calls, the
//! same as JSON, and JSON Lines (one call object per line). A batch is untrusted (a model
//! wrote it): ids are restricted to a safe alphabet, unknown fields are errors, and
//! `${env:…}` is rejected. Every problem is collected with its location.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{suggest, Diagnostic, SourceFile};
use crate::model_formats::{self, InputFormat};
use crate::reference::Args;
use crate::yaml::{self, Locator};

/// `on_tool_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnToolError {
    /// A failed call loses only itself.
    Surface,
    /// The first failure ends the run (`fail_run`; `fail-run` is accepted too).
    #[value(name = "fail_run", alias = "fail-run")]
    FailRun,
}

/// The batch's `concurrency:` block: it can only narrow the manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Narrowing {
    pub max_concurrent_tools: Option<u32>,
    pub per_tenant: Option<u32>,
    pub per_tool: BTreeMap<String, u32>,
    /// `hazards`: a batch may only make it stricter.
    pub hazards: Option<crate::manifest::Hazards>,
}

/// One call.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    /// Whether the batch named the call (else it got a default `cN`).
    pub explicit_id: bool,
    pub tool: String,
    /// Shared with the plan, which keeps them for dispatch.
    pub args: std::sync::Arc<Args>,
    pub after: Vec<String>,
    /// Why a model's call cannot be made (its arguments are not a JSON object, …): it is
    /// answered as `invalid_call` and never dispatched.
    pub invalid: Option<String>,
}

/// A parsed batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub file: SourceFile,
    pub tenant: Option<String>,
    pub concurrency: Narrowing,
    pub on_tool_error: Option<OnToolError>,
    pub run_deadline: Option<Duration>,
    pub tool_call_deadline: Option<Duration>,
    pub max_cost: Option<f64>,
    /// `budget.max_calls`: may only narrow the manifest's.
    pub max_calls: Option<u32>,
    pub calls: Vec<Call>,
    pub locator: Locator,
    /// The calls came from a model's reply: each problem with one of them costs only that
    /// call (an `invalid_call` result), not the batch.
    pub from_model: bool,
    /// What the input was read as: a batch, JSON Lines, or a provider's reply.
    pub input_format: InputFormat,
    /// A model reply's model and token usage, when it reported them.
    pub usage: Option<model_formats::Usage>,
}

/// How to read a batch's text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading {
    pub format: InputFormat,
    /// Arguments are data: no `${…}` references, no `$${` escapes (`--literal`; always so for
    /// a model's reply).
    pub literal: bool,
    /// Default ids count on from here (a stream's later chunks).
    pub id_offset: usize,
}

const DOC_KEYS: &[&str] = &[
    "tenant",
    "concurrency",
    "on_tool_error",
    "deadline",
    "budget",
    "calls",
];
const CALL_KEYS: &[&str] = &["id", "tool", "args", "after"];

/// Longest call id accepted.
pub const MAX_ID_LEN: usize = 128;

/// Call ids are untrusted and end up in file names, environment variables and references:
/// letters, digits, `_`, `-` and `:` only.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("a call id cannot be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "call id is {} characters long; the limit is {MAX_ID_LEN}",
            id.len()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':')))
    {
        return Err(format!(
            "call id `{}` contains `{}`; ids may use letters, digits, `_`, `-` and `:`",
            id.escape_default(),
            c.escape_default()
        ));
    }
    Ok(())
}

impl Batch {
    /// A batch of no calls and no settings of its own.
    pub fn empty(name: &str) -> Batch {
        Batch {
            file: SourceFile::new(name, ""),
            tenant: None,
            concurrency: Narrowing::default(),
            on_tool_error: None,
            run_deadline: None,
            tool_call_deadline: None,
            max_cost: None,
            max_calls: None,
            calls: Vec::new(),
            locator: Default::default(),
            from_model: false,
            input_format: InputFormat::Batch,
            usage: None,
        }
    }

    /// Parse batch text. Errors are returned with every problem found.
    pub fn parse(file: SourceFile) -> Result<(Batch, Vec<Diagnostic>), Vec<Diagnostic>> {
        Batch::parse_as(file, InputFormat::Auto)
    }

    /// Parse batch text of the given format (`Auto` detects the model shapes).
    pub fn parse_as(
        file: SourceFile,
        format: InputFormat,
    ) -> Result<(Batch, Vec<Diagnostic>), Vec<Diagnostic>> {
        Batch::parse_with(
            file,
            Reading {
                format,
                ..Reading::default()
            },
        )
    }

    /// Parse batch text as `reading` says. A model's reply becomes its calls, each kept as
    /// sent; anything else is a batch, checked whole.
    pub fn parse_with(
        file: SourceFile,
        reading: Reading,
    ) -> Result<(Batch, Vec<Diagnostic>), Vec<Diagnostic>> {
        let text = file.text.clone();
        let (value, jsonl) = match read_input(&file, reading.format)? {
            Input::Reply(format, reply) => return Ok(Batch::from_reply(file, format, reply)),
            Input::Batch(value, jsonl) => (value, jsonl),
        };
        let mut p = Parser {
            file: &file,
            diags: Vec::new(),
            locator: Locator::default(),
            id_offset: reading.id_offset,
            literal: reading.literal,
        };
        let mut batch = Batch {
            file: file.clone(),
            input_format: if jsonl {
                InputFormat::Jsonl
            } else {
                InputFormat::Batch
            },
            ..Batch::empty("")
        };
        let calls = match value {
            Value::Array(calls) => calls,
            Value::Object(doc) => p.document(doc, &mut batch),
            Value::Null => {
                p.file_error(
                    "the batch is empty",
                    Some("add `calls:` with at least one call".into()),
                );
                Vec::new()
            }
            other => {
                p.file_error(
                    format!(
                        "a batch must be a document with `calls:` or a sequence of calls, not {}",
                        crate::schema::value_kind(&other)
                    ),
                    None,
                );
                Vec::new()
            }
        };
        p.locator = Locator::new(&text, calls.len(), jsonl);
        for (i, c) in calls.into_iter().enumerate() {
            if let Some(call) = p.call(i, c) {
                batch.calls.push(call);
            }
        }
        batch.locator = p.locator.clone();
        let diags = p.diags;
        if diags.iter().any(Diagnostic::is_error) {
            return Err(diags);
        }
        Ok((batch, diags))
    }

    /// A model's reply as a batch: its calls in order, ids as the provider sent them (else
    /// `c1`, `c2`, …), arguments literal.
    fn from_reply(
        file: SourceFile,
        format: InputFormat,
        reply: model_formats::Reply,
    ) -> (Batch, Vec<Diagnostic>) {
        let mut notes: Vec<Diagnostic> = reply
            .notes
            .into_iter()
            .map(|n| Diagnostic::warning(n).in_file(&file.name))
            .collect();
        if reply.calls.is_empty() {
            notes.push(
                Diagnostic::warning("the reply asks for no tool calls: nothing to run")
                    .in_file(&file.name),
            );
        }
        let calls = reply
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, mc)| {
                let (args, invalid) = match mc.args {
                    Ok(m) => (Args::literal(m), None),
                    Err(why) => (Args::default(), Some(why)),
                };
                Call {
                    explicit_id: mc.id.is_some(),
                    id: mc.id.unwrap_or_else(|| format!("c{}", i + 1)),
                    tool: mc.tool,
                    args: std::sync::Arc::new(args),
                    after: Vec::new(),
                    invalid,
                }
            })
            .collect();
        let batch = Batch {
            file,
            calls,
            from_model: true,
            input_format: format,
            usage: reply.usage,
            ..Batch::empty("")
        };
        (batch, notes)
    }

    /// The location of `needle` in call `index` (after `key`), falling back to the call's start.
    pub fn locate(
        &self,
        index: usize,
        key: Option<&str>,
        needle: &str,
    ) -> Option<crate::error::Location> {
        let text = &self.file.text;
        self.locator
            .find(text, index, key, needle)
            .or_else(|| self.locator.call_start(text, index))
            .map(|r| self.file.location(r.start, r.end))
    }

    /// Position of a call id among the calls.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.calls.iter().position(|c| c.id == id)
    }
}

/// What a batch's text holds.
enum Input {
    /// A batch: a document, a sequence, or the calls of JSON Lines (`true`).
    Batch(Value, bool),
    /// A model's reply, of this shape.
    Reply(InputFormat, model_formats::Reply),
}

/// Read the text as JSON Lines, YAML/JSON, or a model's reply.
fn read_input(file: &SourceFile, format: InputFormat) -> Result<Input, Vec<Diagnostic>> {
    let text = &file.text;
    let lines = if format == InputFormat::Jsonl {
        Some(parse_jsonl_lines(text))
    } else {
        parse_jsonl(text)
    };
    let value = match lines {
        Some(Ok(calls)) => return Ok(Input::Batch(Value::Array(calls), true)),
        Some(Err((line, msg))) => {
            let loc = file.location_at(line, 1, 1);
            let d = Diagnostic::error(format!("invalid JSON Lines: {msg}")).at(Some(loc));
            return Err(vec![d]);
        }
        None => {
            match yaml::parse(text) {
                Ok(v) => v,
                Err(e) => {
                    let loc = e.line.map(|l| file.location_at(l, e.col.unwrap_or(1), 1));
                    let d = Diagnostic::error(format!("invalid batch: {}", e.message))
                    .at(loc)
                    .in_file(&file.name)
                    .hint("a batch is YAML or JSON with `calls:`, a sequence of calls, or JSON Lines");
                    return Err(vec![d]);
                }
            }
        }
    };
    let detected = model_formats::detect(&value);
    let shape = match format {
        InputFormat::Auto => detected,
        f if f.is_model() => match detected {
            Some(d) if d != f => {
                let d = Diagnostic::error(format!(
                    "the input is {} reply, not {} (--input-format)",
                    d.provider(),
                    f.provider()
                ))
                .in_file(&file.name)
                .hint("leave --input-format out to detect the shape, or name the right one");
                return Err(vec![d]);
            }
            _ => Some(f),
        },
        _ => None,
    };
    let Some(shape) = shape else {
        return Ok(Input::Batch(value, false));
    };
    model_formats::read(shape, &value)
        .map(|r| Input::Reply(shape, r))
        .map_err(|e| vec![Diagnostic::error(e).in_file(&file.name)])
}

/// JSON Lines as asked for (`--input-format jsonl`): every non-empty line one JSON value.
fn parse_jsonl_lines(text: &str) -> Result<Vec<Value>, (usize, String)> {
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str::<Value>(l).map_err(|e| (n + 1, e.to_string()))?);
    }
    Ok(out)
}

/// JSON Lines: more than one non-empty line, each a JSON object. `None` when the text is not
/// in that shape (it is then read as YAML/JSON).
fn parse_jsonl(text: &str) -> Option<Result<Vec<Value>, (usize, String)>> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    if lines.is_empty() || !lines.iter().all(|(_, l)| l.trim_start().starts_with('{')) {
        return None;
    }
    if lines.len() == 1 {
        // One line: JSON Lines of one call when it is a call (`tool`, no `calls`), else a
        // document.
        let v = serde_json::from_str::<Value>(lines[0].1).ok()?;
        let one_call = v
            .as_object()
            .is_some_and(|o| o.contains_key("tool") && !o.contains_key("calls"));
        return one_call.then(|| Ok(vec![v]));
    }
    // A pretty-printed JSON document also has several lines starting with `{`; only treat
    // the text as JSON Lines when the first line is a whole object by itself.
    serde_json::from_str::<Value>(lines[0].1).ok()?;
    let mut out = Vec::with_capacity(lines.len());
    for (n, l) in lines {
        match serde_json::from_str::<Value>(l) {
            Ok(v) => out.push(v),
            Err(e) => return Some(Err((n + 1, e.to_string()))),
        }
    }
    Some(Ok(out))
}

struct Parser<'a> {
    file: &'a SourceFile,
    diags: Vec<Diagnostic>,
    locator: Locator,
    /// Default ids count from here (a chunk of a stream continues its predecessors' numbering).
    id_offset: usize,
    /// `--literal`: arguments are data, no references.
    literal: bool,
}

impl Parser<'_> {
    fn file_error(&mut self, msg: impl Into<String>, hint: Option<String>) {
        self.diags.push(
            Diagnostic::error(msg)
                .in_file(&self.file.name)
                .maybe_hint(hint),
        );
    }

    /// Locate a top-level key `key:` of the document.
    fn key_loc(&self, key: &str) -> Option<crate::error::Location> {
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

    fn doc_error(&mut self, key: &str, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.key_loc(key);
        self.diags.push(
            Diagnostic::error(msg)
                .at(loc)
                .in_file(&self.file.name)
                .maybe_hint(hint),
        );
    }

    /// A batch document's settings into `batch`; returns its calls.
    fn document(&mut self, doc: Map<String, Value>, batch: &mut Batch) -> Vec<Value> {
        for k in doc.keys() {
            if !DOC_KEYS.contains(&k.as_str()) {
                let hint = suggest(k, DOC_KEYS.iter().copied())
                    .or_else(|| Some(format!("known fields: {}", DOC_KEYS.join(", "))));
                self.doc_error(k, format!("unknown field `{k}` in the batch"), hint);
            }
        }
        batch.tenant = doc.get("tenant").and_then(|t| self.tenant(t));
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

    fn tenant(&mut self, t: &Value) -> Option<String> {
        match t {
            Value::String(t) if !t.is_empty() && check_id(t).is_ok() => Some(t.clone()),
            Value::String(t) => {
                let why = check_id(t)
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

    /// `surface` or `fail_run` (also spelled `fail-run`, as on the command line).
    fn on_tool_error(&mut self, v: &Value) -> Option<OnToolError> {
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
    fn deadline(&mut self, d: &Value, batch: &mut Batch) {
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
    fn budget(&mut self, b: &Value, batch: &mut Batch) {
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
    fn calls_of(&mut self, calls: Option<&Value>) -> Vec<Value> {
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

    fn narrowing(&mut self, c: &Value) -> Narrowing {
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

    fn call_error(
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
    fn call(&mut self, index: usize, value: Value) -> Option<Call> {
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
    fn call_id(&mut self, index: usize, id: Option<Value>) -> Option<String> {
        match id {
            None | Some(Value::Null) => Some(format!("c{}", self.id_offset + index + 1)),
            Some(Value::String(s)) => match check_id(&s) {
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

    fn check_call_keys(&mut self, index: usize, m: &Map<String, Value>, id: &str) {
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

    fn call_tool(&mut self, index: usize, tool: Option<&Value>, id: &str) -> Option<String> {
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
    fn call_args(&mut self, index: usize, args: Option<Value>, id: &str) -> Option<Args> {
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
    fn call_after(&mut self, index: usize, after: Option<&Value>, id: &str) -> Vec<String> {
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

/// Apply the batch's narrowing to a manifest limit: the smaller wins; a larger batch value
/// is clamped with a warning.
pub fn narrow(
    manifest: Option<u32>,
    batch: Option<u32>,
    what: &str,
    warnings: &mut Vec<Diagnostic>,
    file: &str,
) -> Option<u32> {
    match (manifest, batch) {
        (Some(m), Some(b)) if b > m => {
            warnings.push(
                Diagnostic::warning(format!("the batch asks for {what} = {b}, wider than the manifest's {m}; clamped to {m}"))
                    .in_file(file)
                    .hint("a batch can narrow the manifest's limits, never widen them"),
            );
            Some(m)
        }
        (Some(m), Some(b)) => Some(m.min(b)),
        (m, b) => m.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Batch, Vec<Diagnostic>), Vec<Diagnostic>> {
        Batch::parse(SourceFile::new("b.yaml", text))
    }

    #[test]
    fn accepts_every_shape_with_default_ids() {
        let doc =
            parse("tenant: acme\ncalls:\n  - tool: a\n  - id: x\n    tool: b\n    after: [c1]\n")
                .unwrap()
                .0;
        assert_eq!(doc.tenant.as_deref(), Some("acme"));
        assert_eq!(doc.calls[0].id, "c1");
        assert_eq!(doc.calls[1].after, vec!["c1"]);
        let seq = parse("- tool: a\n- tool: b\n").unwrap().0;
        assert_eq!(seq.calls[1].id, "c2");
        let json = parse(r#"{"calls": [{"tool": "a", "args": {"q": 1}}]}"#)
            .unwrap()
            .0;
        assert_eq!(json.calls[0].args.value["q"], 1);
        let jsonl = parse("{\"tool\": \"a\"}\n{\"tool\": \"b\", \"id\": \"z\"}\n")
            .unwrap()
            .0;
        assert_eq!(jsonl.calls[1].id, "z");
        // One line that is a call is JSON Lines of one call; one with `calls` is a document.
        let one = parse("{\"tool\": \"a\", \"args\": {\"q\": 2}}\n")
            .unwrap()
            .0;
        assert_eq!((one.calls.len(), one.calls[0].id.as_str()), (1, "c1"));
        assert_eq!(one.calls[0].args.value["q"], 2);
        let doc = parse("{\"calls\": [{\"tool\": \"a\"}], \"tenant\": \"t\"}\n")
            .unwrap()
            .0;
        assert_eq!(doc.tenant.as_deref(), Some("t"));
    }

    #[test]
    fn rejects_env_in_a_batch_with_location() {
        let e = parse("calls:\n  - tool: a\n    args: { p: \"${env:HOME}\" }\n").unwrap_err();
        assert!(
            e[0].message.contains("never read the environment"),
            "{}",
            e[0]
        );
        assert_eq!(e[0].location.as_ref().unwrap().line, 3);
    }

    #[test]
    fn reports_unknown_fields_and_bad_ids() {
        let e = parse("calls:\n  - tool: a\n    argz: {}\n  - id: \"a;rm\"\n    tool: b\n")
            .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].message.contains("unknown field `argz`"));
        assert_eq!(e[0].hint.as_deref(), Some("did you mean `args`?"));
        assert!(e[1].message.contains("contains `;`"));
    }

    #[test]
    fn narrowing_takes_the_smaller_and_warns_on_widening() {
        let mut w = Vec::new();
        assert_eq!(narrow(Some(8), Some(2), "x", &mut w, "f"), Some(2));
        assert!(w.is_empty());
        assert_eq!(narrow(Some(8), Some(20), "x", &mut w, "f"), Some(8));
        assert_eq!(w.len(), 1);
        assert_eq!(narrow(None, Some(3), "x", &mut w, "f"), Some(3));
        assert_eq!(narrow(Some(3), None, "x", &mut w, "f"), Some(3));
    }
}
