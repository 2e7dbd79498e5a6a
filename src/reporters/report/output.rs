//! Results on stdout: `jsonl` (one result per line, call order), `json` (one document with
//! outcome and stats), `table` (comfy-table), and the streaming writer that prints each result
//! as soon as it and every earlier call have resolved.

use std::collections::BTreeMap;
use std::io::{self, Write};

use comfy_table::{presets, Cell, Color, Table};
use serde::Serialize;
use serde_json::Value;

use super::Reporter;
use crate::events::{CallResult, Event, Outcome, Stats, Status};

/// What a finished run looks like to the writers (serialized as the `json` document).
#[derive(serde::Serialize)]
pub(crate) struct RunDocument<'a> {
    pub run_id: &'a str,
    pub outcome: Outcome,
    pub results: &'a [CallResult],
    pub stats: &'a Stats,
}

/// One result as a JSON line, made in `line` (cleared first) and written whole: serde_json
/// writes a result in dozens of small pieces, each a call through `w` otherwise.
pub(crate) fn write_jsonl_line(
    w: &mut dyn Write,
    line: &mut Vec<u8>,
    r: &impl Serialize,
) -> io::Result<()> {
    line.clear();
    serde_json::to_writer(&mut *line, r)?;
    line.push(b'\n');
    w.write_all(line)
}

pub(crate) fn write_jsonl(w: &mut dyn Write, doc: &RunDocument<'_>) -> io::Result<()> {
    let mut line = Vec::with_capacity(512);
    for r in doc.results {
        write_jsonl_line(w, &mut line, r)?;
    }
    Ok(())
}

pub(crate) fn write_json(w: &mut dyn Write, doc: &RunDocument<'_>) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, doc)?;
    w.write_all(b"\n")
}

/// A short, single-line rendering of a value for tables.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut s: String = one_line.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

fn status_color(s: Status) -> Color {
    match s {
        Status::Ok => Color::Green,
        Status::Error | Status::TimedOut | Status::NotApplied => Color::Red,
        Status::Indeterminate => Color::Magenta,
        Status::Cancelled | Status::NeverDispatched => Color::Yellow,
    }
}

pub(crate) fn write_table(w: &mut dyn Write, doc: &RunDocument<'_>, color: bool) -> io::Result<()> {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "#",
        "id",
        "tool",
        "status",
        "time",
        "output / error",
    ]);
    if !color {
        t.force_no_tty();
    }
    // A terminal that reports no width (`script` without a size, some CI consoles) would
    // squeeze every column to one character: `fit` keeps the table's natural width then.
    super::term::fit(&mut t);
    for r in doc.results {
        let time = r.duration_ms.map_or_else(
            || "—".to_string(),
            |ms| crate::duration::format(std::time::Duration::from_millis(ms)),
        );
        let detail = match &r.error {
            Some(e) => shorten(&e.message, 70),
            None => shorten(
                &match &r.output {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                },
                70,
            ),
        };
        // A cut-off write its probe settled: `ok (settled)`, `not_applied (settled)`, …
        let status = match r.settled {
            Some(crate::events::Settled::Unknown) => {
                format!("{} (probe: unknown)", r.status.as_str())
            }
            Some(_) => format!("{} (settled)", r.status.as_str()),
            None => r.status.as_str().to_string(),
        };
        let mut status = Cell::new(status);
        if color {
            status = status.fg(status_color(r.status));
        }
        t.add_row(vec![
            Cell::new(r.index),
            Cell::new(&r.id),
            Cell::new(&r.tool),
            status,
            Cell::new(time),
            Cell::new(detail),
        ]);
    }
    writeln!(w, "{t}")
}

/// Renders one result as a JSON line's value (for `--emit` formats).
pub(crate) type RenderFn = Box<dyn Fn(&CallResult) -> Value + Send>;

/// Prints results as JSON lines in call order while the run goes on: a result is written
/// once it and every earlier call have resolved.
pub(crate) struct StreamWriter<W: Write + Send> {
    out: W,
    next: usize,
    waiting: BTreeMap<usize, CallResult>,
    /// Render a result as one line (`None`: the default result line).
    render: Option<RenderFn>,
    /// The line being written (kept: one allocation for the run).
    line: Vec<u8>,
    /// Set when stdout has gone away (a closed pipe); the run carries on regardless.
    pub broken: bool,
    /// Told once when stdout goes away, so the run can stop dispatching.
    on_broken: Option<Box<dyn FnOnce() + Send>>,
}

impl<W: Write + Send> StreamWriter<W> {
    pub(crate) fn new(out: W, render: Option<RenderFn>) -> Self {
        StreamWriter {
            out,
            next: 0,
            waiting: BTreeMap::new(),
            render,
            line: Vec::with_capacity(512),
            broken: false,
            on_broken: None,
        }
    }

    /// Call `f` once if stdout goes away (`| head -1`).
    pub(crate) fn on_broken(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_broken = Some(Box::new(f));
        self
    }

    fn write(&mut self, r: &CallResult) {
        if self.broken {
            return;
        }
        let res = match &self.render {
            Some(f) => write_jsonl_line(&mut self.out, &mut self.line, &f(r)),
            None => write_jsonl_line(&mut self.out, &mut self.line, r),
        };
        if res.is_err() {
            self.break_off();
        }
    }

    fn break_off(&mut self) {
        self.broken = true;
        if let Some(f) = self.on_broken.take() {
            f();
        }
    }
}

impl<W: Write + Send> Reporter for StreamWriter<W> {
    fn flush(&mut self) {
        if !self.broken && self.out.flush().is_err() {
            self.break_off();
        }
    }
    fn handle(&mut self, event: &Event) {
        // Results are numbered across the whole run (a stream's segments included), so
        // writing them in index order is call order.
        if let Event::CallFinished { result } = event {
            if result.index == self.next {
                // Next in call order (the common case): written as it is, not kept.
                self.write(result);
                self.next += 1;
            } else {
                self.waiting.insert(result.index, (**result).clone());
            }
            while let Some(r) = self.waiting.remove(&self.next) {
                self.write(&r);
                self.next += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(index: usize, status: Status) -> CallResult {
        CallResult {
            index,
            id: format!("c{}", index + 1),
            tool: "t".into(),
            called_as: None,
            status,
            event: status.event(),
            output: json!({"n": index}),
            error: None,
            attempts: 1,
            phase: 0,
            idempotency_key: None,
            cached: false,
            settled: None,
            queued_ms: Some(0),
            waited_on: None,
            started_ms: Some(0),
            duration_ms: Some(5),
        }
    }

    #[test]
    fn stream_writer_keeps_call_order() {
        let mut out = Vec::new();
        {
            let mut s = StreamWriter::new(&mut out, None);
            for i in [2, 0, 1] {
                s.handle(&Event::CallFinished {
                    result: Box::new(result(i, Status::Ok)),
                });
                if i == 2 {
                    assert!(s.waiting.contains_key(&2));
                }
            }
        }
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let idx: Vec<u64> = lines.iter().map(|l| l["index"].as_u64().unwrap()).collect();
        assert_eq!(idx, vec![0, 1, 2]);
    }

    #[test]
    fn shorten_folds_whitespace_and_cuts() {
        assert_eq!(shorten("a\n  b", 10), "a b");
        assert_eq!(shorten("abcdefghijkl", 5), "abcd…");
    }
}
