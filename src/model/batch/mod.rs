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

mod parser;
use parser::Parser;

/// `on_tool_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnToolError {
    /// A failed call loses only itself.
    Surface,
    /// The first failure ends the run (`fail_run`; `fail-run` is accepted too).
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
    /// `run_id`: the caller names the intent (idempotency keys derive from it).
    pub run_id: Option<String>,
    /// A model reply's own id (`chatcmpl-…`, `msg_…`, `resp_…`), for `--run-id-from-reply`.
    pub reply_id: Option<String>,
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
    "run_id",
    "concurrency",
    "on_tool_error",
    "deadline",
    "budget",
    "calls",
];
const CALL_KEYS: &[&str] = &["id", "tool", "args", "after"];

impl Batch {
    /// A batch of no calls and no settings of its own.
    pub fn empty(name: &str) -> Batch {
        Batch {
            file: SourceFile::new(name, ""),
            tenant: None,
            run_id: None,
            reply_id: None,
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

    /// A batch of one call `c{seq}` of `tool`, as a model's call (its arguments are data):
    /// what the gateway plans each `tools/call` as.
    pub(crate) fn one_call(seq: u64, tool: &str, args: Map<String, Value>) -> Batch {
        let mut b = Batch::empty("<mcp>");
        b.from_model = true;
        b.calls.push(Call {
            id: format!("c{seq}"),
            explicit_id: false,
            tool: tool.to_string(),
            args: std::sync::Arc::new(Args {
                value: args,
                holes: Vec::new(),
            }),
            after: Vec::new(),
            invalid: None,
        });
        b
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
        batch.calls.reserve_exact(calls.len());
        for (i, c) in calls.into_iter().enumerate() {
            if let Some(call) = p.call(i, c) {
                batch.calls.push(call);
            }
        }
        batch.locator = std::mem::take(&mut p.locator);
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
            reply_id: reply.id,
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
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    parse_lines(&lines)
}

/// Lines at which parsing them is shared with a second thread.
const SPLIT_AT: usize = 8192;

/// Each `(index, line)` as a JSON value, in order; the first bad line's number and error. A
/// long input is parsed in two halves at once (lines are independent; the first half's
/// error still comes first).
fn parse_lines(lines: &[(usize, &str)]) -> Result<Vec<Value>, (usize, String)> {
    let one = |part: &[(usize, &str)]| -> Result<Vec<Value>, (usize, String)> {
        let mut out = Vec::with_capacity(part.len());
        for &(n, l) in part {
            out.push(serde_json::from_str::<Value>(l).map_err(|e| (n + 1, e.to_string()))?);
        }
        Ok(out)
    };
    if lines.len() < SPLIT_AT {
        return one(lines);
    }
    let (front, back) = lines.split_at(lines.len() / 2);
    let (front, back) = std::thread::scope(|s| {
        let back = s.spawn(|| one(back));
        let front = one(front);
        (
            front,
            back.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
        )
    });
    let mut out = front?;
    out.extend(back?);
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
    Some(parse_lines(&lines))
}

/// Apply the batch's narrowing to a manifest limit: the smaller wins; a larger batch value
/// is clamped with a warning.
pub(crate) fn narrow(
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

    /// A long JSON Lines input is parsed in two halves at once: the calls keep their order
    /// and ids, and a bad line is named by its number in either half (the first one wins).
    #[test]
    fn long_json_lines_keep_call_order_and_name_the_first_bad_line() {
        let n = 2 * SPLIT_AT + 3;
        let mut lines: Vec<String> = (0..n).map(|i| format!("{{\"tool\": \"t{i}\"}}")).collect();
        let batch = parse(&lines.join("\n")).expect("valid").0;
        assert_eq!(batch.calls.len(), n);
        assert!(batch
            .calls
            .iter()
            .enumerate()
            .all(|(i, c)| c.tool == format!("t{i}")));
        assert_eq!(batch.calls[n - 1].id, format!("c{n}"));
        lines[n - 2] = "{\"tool\": ".into();
        let back = parse(&lines.join("\n")).expect_err("a bad line in the back half");
        assert_eq!(back[0].location.as_ref().map(|l| l.line), Some(n - 1));
        lines[5] = "{oops".into();
        let front = parse(&lines.join("\n")).expect_err("bad lines in both halves");
        assert_eq!(front.len(), 1);
        assert_eq!(front[0].location.as_ref().map(|l| l.line), Some(6));
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
