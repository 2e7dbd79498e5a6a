//! Every use of `serde_yaml` lives here, so swapping to a maintained fork is a one-file change.
//!
//! [`parse`] turns YAML (and so JSON, a subset of it) into a `serde_json::Value`; [`Locator`]
//! finds where each call of a batch sits in the text, so a problem found after parsing (an
//! unknown tool, a bad reference) can still name a line and column. serde_yaml keeps no spans
//! on values, so the locator reads the block structure of the text itself; when it cannot
//! (flow style, unusual layout) a search of the whole text is the fallback.

use std::ops::Range;

use serde_json::Value;

/// A YAML syntax or structure error with its position (1-based).
#[derive(Debug, Clone)]
pub(crate) struct YamlError {
    pub message: String,
    pub line: Option<usize>,
    pub col: Option<usize>,
}

/// Parse a YAML (or JSON) document into JSON values.
pub(crate) fn parse(text: &str) -> Result<Value, YamlError> {
    serde_yaml::from_str::<Value>(text).map_err(|e| {
        let loc = e.location();
        let mut message = e.to_string();
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        YamlError {
            message,
            line: loc.as_ref().map(|l| l.line()),
            col: loc.as_ref().map(|l| l.column()),
        }
    })
}

/// Where each call of a batch starts and ends in the text.
#[derive(Debug, Clone, Default)]
pub struct Locator {
    /// Byte range of each call, when the layout could be read.
    regions: Option<Vec<Range<usize>>>,
    len: usize,
}

impl Locator {
    /// Read the layout of `text` for `count` calls. `jsonl`: one call per non-empty line.
    pub fn new(text: &str, count: usize, jsonl: bool) -> Locator {
        let regions = if jsonl {
            let mut out = Vec::new();
            let mut offset = 0;
            for line in text.split_inclusive('\n') {
                if !line.trim().is_empty() {
                    out.push(offset..offset + line.len());
                }
                offset += line.len();
            }
            Some(out)
        } else {
            block_items(text)
        };
        Locator {
            regions: regions.filter(|r| r.len() == count),
            len: text.len(),
        }
    }

    /// The byte range of call `index` (the whole text when the layout is unknown).
    pub fn region(&self, index: usize) -> Range<usize> {
        self.regions
            .as_ref()
            .and_then(|r| r.get(index).cloned())
            .unwrap_or(0..self.len)
    }

    /// Where `needle` appears in call `index`, after the key `key` when one is given.
    pub fn find(
        &self,
        text: &str,
        index: usize,
        key: Option<&str>,
        needle: &str,
    ) -> Option<Range<usize>> {
        let region = self.region(index);
        let body = text.get(region.clone())?;
        let mut from = 0;
        if let Some(key) = key {
            from = find_key(body, key)?;
        }
        let at = body[from..].find(needle)? + from;
        Some(region.start + at..region.start + at + needle.len())
    }

    /// The start of call `index` (its `- ` marker), when known.
    pub fn call_start(&self, text: &str, index: usize) -> Option<Range<usize>> {
        let r = self.regions.as_ref()?.get(index)?.clone();
        let body = &text[r.clone()];
        let skip = body.len() - body.trim_start().len();
        let line_len = body[skip..].find('\n').unwrap_or(body.len() - skip);
        Some(r.start + skip..r.start + skip + line_len)
    }
}

/// Offset just past `key:` (the key optionally quoted) in `body`.
fn find_key(body: &str, key: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = body[from..].find(key) {
        let start = from + i;
        let end = start + key.len();
        let before_ok = start == 0
            || matches!(
                body.as_bytes()[start - 1],
                b' ' | b'\t' | b'\n' | b'{' | b',' | b'"' | b'\'' | b'-'
            );
        let rest = body[end..].trim_start_matches(['"', '\'']).trim_start();
        if before_ok && rest.starts_with(':') {
            return Some(end);
        }
        from = end;
    }
    None
}

/// Ranges of the block-sequence items holding the calls: under a top-level `calls:` key, or
/// the document's own top-level sequence.
fn block_items(text: &str) -> Option<Vec<Range<usize>>> {
    let mut lines = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        lines.push((offset, line));
        offset += line.len();
    }
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let significant = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    };
    let mut start_line = 0;
    let has_calls_key = lines.iter().any(|(_, l)| l.starts_with("calls:"));
    if has_calls_key {
        start_line = lines.iter().position(|(_, l)| l.starts_with("calls:"))? + 1;
    }
    let first = (start_line..lines.len()).find(|&i| significant(lines[i].1))?;
    let item_indent = indent(lines[first].1);
    if !lines[first].1.trim_start().starts_with('-') {
        return None;
    }
    let mut items: Vec<Range<usize>> = Vec::new();
    let mut end = offset;
    for &(off, line) in &lines[first..] {
        if !significant(line) {
            continue;
        }
        let ind = indent(line);
        let trimmed = line.trim_start();
        if ind < item_indent
            || (ind == item_indent && !(trimmed.starts_with("- ") || trimmed.trim_end() == "-"))
        {
            end = off;
            break;
        }
        if ind == item_indent {
            if let Some(last) = items.last_mut() {
                last.end = off;
            }
            items.push(off..offset);
        }
    }
    if let Some(last) = items.last_mut() {
        last.end = last.end.min(end);
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "tenant: acme\ncalls:\n  - id: a\n    tool: search\n    args: { q: x }\n  - tool: fetch_ur\n    args:\n      x: \"${a.y}\"\non_tool_error: surface\n";

    #[test]
    fn parses_yaml_and_json() {
        assert_eq!(parse("a: 1").unwrap(), serde_json::json!({"a": 1}));
        assert_eq!(
            parse("{\"a\": [1]}").unwrap(),
            serde_json::json!({"a": [1]})
        );
        let e = parse("a: [1,").unwrap_err();
        assert!(e.line.is_some());
    }

    #[test]
    fn locates_calls_in_block_yaml() {
        let loc = Locator::new(DOC, 2, false);
        let r = loc.find(DOC, 1, Some("tool"), "fetch_ur").unwrap();
        assert_eq!(&DOC[r.clone()], "fetch_ur");
        let r2 = loc.find(DOC, 1, None, "${a.y}").unwrap();
        assert_eq!(&DOC[r2], "${a.y}");
        assert!(loc.region(1).end <= DOC.find("on_tool_error").unwrap());
        assert_eq!(&DOC[loc.call_start(DOC, 0).unwrap()], "- id: a");
    }

    #[test]
    fn locates_bare_sequences_and_jsonl() {
        let seq = "- tool: a\n- tool: b\n";
        let loc = Locator::new(seq, 2, false);
        assert_eq!(loc.find(seq, 1, Some("tool"), "b").unwrap().start, 18);
        let jl = "{\"tool\": \"a\"}\n\n{\"tool\": \"b\"}\n";
        let loc = Locator::new(jl, 2, true);
        assert_eq!(loc.find(jl, 1, Some("tool"), "b").unwrap().start, 25);
    }
}
