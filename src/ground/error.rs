//! Errors a user sees and the exit codes they map to.
//!
//! [`Diagnostic`] is one problem in a file (manifest or batch) with its location, the
//! offending source line and a hint; validation collects every one of them rather than
//! stopping at the first. [`Error`] is "could not run the batch": a failed or timed-out
//! *call* is never an `Error`, it is a classified result (see `run`).

use std::fmt::{self, Write as _};
use std::sync::Arc;

/// Every call succeeded.
pub(crate) const EXIT_OK: u8 = 0;
/// The run completed but one or more calls failed.
pub(crate) const EXIT_CALLS_FAILED: u8 = 1;
/// Bad usage, or an invalid manifest or batch: nothing was run.
pub(crate) const EXIT_INVALID: u8 = 2;
/// The run was ended early or cut short (fail_run, a deadline, the budget).
pub(crate) const EXIT_ENDED_EARLY: u8 = 3;
/// The run paused: every call ran that could, and some wait for an approval (resume the
/// journal with `--approve ID@HASH`).
pub(crate) const EXIT_PAUSED: u8 = 4;
/// The run was interrupted by SIGINT/SIGTERM (128 + SIGINT).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// A file whose text is kept so that problems can point into it.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name shown to the user (the path as given, or `<stdin>`).
    pub name: String,
    /// The whole text.
    pub text: Arc<str>,
    /// Lines that came before `text` in what the user gave (a stream's earlier chunks), so
    /// locations name the line as the user counts it.
    pub lines_before: usize,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<Arc<str>>) -> Self {
        SourceFile {
            name: name.into(),
            text: text.into(),
            lines_before: 0,
        }
    }

    /// The same text, standing after `lines` earlier lines of its input.
    pub fn after_lines(mut self, lines: usize) -> Self {
        self.lines_before = lines;
        self
    }

    /// Line and column (both 1-based, column in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let (line, col) = self.local_line_col(offset);
        (line + self.lines_before, col)
    }

    fn local_line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }

    /// A location for the byte range `start..end`.
    pub fn location(&self, start: usize, end: usize) -> Location {
        let (line, col) = self.local_line_col(start);
        let text = self.line_text(line);
        let line = line + self.lines_before;
        let width = self.text[floor_char_boundary(&self.text, start)
            ..floor_char_boundary(&self.text, end.max(start))]
            .lines()
            .next()
            .map_or(1, |s| s.chars().count().max(1));
        Location {
            file: self.name.clone(),
            line,
            col,
            line_text: Some(text),
            width,
        }
    }

    /// A location at a line and column of `text` already known (1-based).
    pub fn location_at(&self, line: usize, col: usize, width: usize) -> Location {
        Location {
            file: self.name.clone(),
            line: line + self.lines_before,
            col,
            line_text: Some(self.line_text(line)),
            width: width.max(1),
        }
    }

    fn line_text(&self, line: usize) -> String {
        self.text
            .lines()
            .nth(line.saturating_sub(1))
            .unwrap_or("")
            .to_string()
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Where a problem is: a file, and inside it a line and column when the format gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub col: usize,
    /// The source line, shown under the message with a caret.
    pub line_text: Option<String>,
    /// How many characters the caret underlines.
    pub width: usize,
}

/// How serious a diagnostic is: errors stop the run (exit 2), warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a manifest or batch.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A lowercase fragment: "call `fetch-2` uses unknown tool `fetch_ur`".
    pub message: String,
    pub location: Option<Location>,
    /// A file-only location when no line is known.
    pub file: Option<String>,
    /// "did you mean `fetch_url`?"
    pub hint: Option<String>,
    /// The call and the tool it is about, when it is about one (for `validate --format json`).
    pub call: Option<String>,
    pub tool: Option<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            location: None,
            file: None,
            hint: None,
            call: None,
            tool: None,
        }
    }

    /// Say which call, to which tool, this is about.
    pub fn for_call(mut self, call: &str, tool: &str) -> Self {
        self.call = Some(call.to_string());
        self.tool = Some(tool.to_string());
        self
    }

    /// Say which tool this is about.
    pub fn for_tool(mut self, tool: &str) -> Self {
        self.tool = Some(tool.to_string());
        self
    }

    pub fn warning(message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(message)
        }
    }

    pub fn at(mut self, location: Option<Location>) -> Self {
        if let Some(loc) = &location {
            self.file = Some(loc.file.clone());
        }
        self.location = location;
        self
    }

    pub fn in_file(mut self, file: &str) -> Self {
        if self.file.is_none() {
            self.file = Some(file.to_string());
        }
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn maybe_hint(mut self, hint: Option<String>) -> Self {
        if hint.is_some() {
            self.hint = hint;
        }
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The diagnostic as a JSON object for `validate --format json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.location.as_ref().map(|l| l.line),
            "column": self.location.as_ref().map(|l| l.col),
            "hint": self.hint,
            "call": self.call,
            "tool": self.tool,
        })
    }
}

impl fmt::Display for Diagnostic {
    /// ```text
    /// error: call `fetch-2` uses unknown tool `fetch_ur`
    ///   ——▶ batch.yaml:14:9
    ///    │
    /// 14 │   tool: fetch_ur
    ///    │         ^^^^^^^^
    /// did you mean `fetch_url`?
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        writeln!(f, "{label}: {}", self.message)?;
        match (&self.location, &self.file) {
            (Some(loc), _) => {
                let num = loc.line.to_string();
                let pad = " ".repeat(num.len());
                writeln!(f, "{pad} ——▶ {}:{}:{}", loc.file, loc.line, loc.col)?;
                if let Some(text) = &loc.line_text {
                    let shown: String = text.chars().take(200).collect();
                    writeln!(f, "{pad} │")?;
                    writeln!(f, "{num} │ {shown}")?;
                    let mut caret = String::new();
                    for c in text.chars().take(loc.col.saturating_sub(1)) {
                        caret.push(if c == '\t' { '\t' } else { ' ' });
                    }
                    for _ in 0..loc.width.min(120) {
                        caret.push('^');
                    }
                    writeln!(f, "{pad} │ {caret}")?;
                }
            }
            (None, Some(file)) => writeln!(f, "  ——▶ {file}")?,
            (None, None) => {}
        }
        if let Some(hint) = &self.hint {
            writeln!(f, "{hint}")?;
        }
        Ok(())
    }
}

/// Render several diagnostics, errors first, then warnings, each in file order.
pub(crate) fn render_all(diags: &[Diagnostic]) -> String {
    let mut out = String::new();
    for d in diags {
        let _ = writeln!(out, "{d}");
    }
    out
}

/// The name closest to `name` among `candidates`, if one is close enough to be a likely typo.
pub(crate) fn suggest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = strsim::levenshtein(name, c);
        let close = d < 3 || (d <= name.len() / 3 && d < 5);
        if close && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}

/// "Could not run the batch": each variant knows its exit code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The manifest or batch has errors; every one of them is listed.
    #[error("{}", render_all(.0))]
    Invalid(Vec<Diagnostic>),
    /// The command line asked for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// Reading or writing a file failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn exit_code(&self) -> u8 {
        EXIT_INVALID
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_lines_and_chars() {
        let f = SourceFile::new("a.yaml", "one\ntwo: é x\nthree");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(4), (2, 1));
        let x = f.text.find('x').unwrap();
        assert_eq!(f.line_col(x), (2, 8));
    }

    #[test]
    fn renders_location_caret_and_hint() {
        let f = SourceFile::new("batch.yaml", "calls:\n  - tool: fetch_ur\n");
        let start = f.text.find("fetch_ur").unwrap();
        let d = Diagnostic::error("call `c1` uses unknown tool `fetch_ur`")
            .at(Some(f.location(start, start + 8)))
            .hint("did you mean `fetch_url`?");
        let s = d.to_string();
        assert!(s.contains("batch.yaml:2:11"), "{s}");
        assert!(s.contains("  - tool: fetch_ur"), "{s}");
        assert!(s.contains("          ^^^^^^^^"), "{s}");
        assert!(s.ends_with("did you mean `fetch_url`?\n"), "{s}");
    }

    #[test]
    fn suggests_near_names_only() {
        let names = ["search", "booking", "db.getOrders"];
        assert_eq!(
            suggest("serch", names),
            Some("did you mean `search`?".into())
        );
        assert_eq!(suggest("zzzzzzzz", names), None);
    }
}
