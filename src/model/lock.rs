//! `tools.lock`: what a model or client is shown, pinned — every served tool's definition, and
//! every prompt and resource template of a server served whole, each with a hash of it. Written
//! by `flux-tools lock` beside the manifest, read back to say what changed since.
//!
//! What is hashed is a definition's canonical JSON (keys sorted, no spaces, strings as they are:
//! one changed space is a change) of the fields a model or client reads: a tool's name, title,
//! description, input and output schema and annotations; a prompt's name, title, description
//! and arguments; a resource template's URI template, name, title, description and MIME type.
//! Icons, `_meta` and execution hints are not (they tell a client how, not the model what).
//! The file keeps each definition's text too (pretty JSON, keys sorted), so a review's diff
//! shows what changed; its hash is checked against that text when it is read.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::hash::{canonical, hex};

/// The lock's file name, beside the manifest.
pub(crate) const FILE: &str = "tools.lock";
/// The format written (a newer one is refused, not misread).
const VERSION: u32 = 1;

/// What a pinned definition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Tool,
    Prompt,
    ResourceTemplate,
}

impl Kind {
    /// The fields of its definition that are pinned.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Tool => &[
                "name",
                "title",
                "description",
                "inputSchema",
                "outputSchema",
                "annotations",
            ],
            Kind::Prompt => &["name", "title", "description", "arguments"],
            Kind::ResourceTemplate => &["uriTemplate", "name", "title", "description", "mimeType"],
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::ResourceTemplate => "resource template",
        }
    }
}

/// One pinned definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pin {
    pub kind: Kind,
    /// The name it is served under (a resource template: its URI template).
    pub name: String,
    /// Where it comes from: `manifest`, or `mcp:SERVER`.
    pub from: String,
    /// `sha256:` and the hex digest of the definition's canonical JSON.
    pub hash: String,
    /// The definition: pretty JSON, keys sorted.
    pub definition: String,
}

impl Pin {
    /// The pin of `item` (a tool, prompt or resource template as a client is sent it).
    pub(crate) fn new(kind: Kind, name: &str, from: String, item: &Value) -> Pin {
        let picked: Map<String, Value> = (kind.fields().iter())
            .filter_map(|f| Some((f.to_string(), item.get(*f)?.clone())))
            .collect();
        let definition = sorted(&Value::Object(picked));
        Pin {
            kind,
            name: name.to_string(),
            from,
            hash: digest(&definition),
            definition: serde_json::to_string_pretty(&definition).unwrap_or_default(),
        }
    }

    /// `tool `search``: how messages name it.
    pub(crate) fn label(&self) -> String {
        format!("{} `{}`", self.kind.as_str(), self.name)
    }
}

/// `v` with every object's keys in order (the text a pin keeps).
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn digest(v: &Value) -> String {
    format!("sha256:{}", hex(&Sha256::digest(canonical(v).as_bytes())))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFile {
    version: u32,
    #[serde(default, rename = "pin")]
    pins: Vec<Pin>,
}

/// The text of a lock of `pins` (sorted by kind and name: one order, whatever the servers').
pub(crate) fn render(pins: &[Pin]) -> String {
    let mut pins = pins.to_vec();
    pins.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let file = LockFile {
        version: VERSION,
        pins,
    };
    let body = toml::to_string_pretty(&file).unwrap_or_default();
    format!(
        "# What the model is shown, pinned: written by `flux-tools lock`. Review it as code; in CI,\n\
         # `flux-tools lock --check` fails when the servers differ from it, and\n\
         # `flux-tools lock --update` accepts what changed.\n\n{body}"
    )
}

/// The pins of a lock's `text` (named `name` in errors), each one's hash checked against its
/// definition: a hash edited by hand is reported, never trusted.
pub(crate) fn parse(name: &str, text: &str) -> Result<Vec<Pin>, String> {
    let file: LockFile = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| {
            let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
            format!(":{line}")
        });
        format!(
            "{name}{}: {}\nhint: write it again with `flux-tools lock --update`",
            at.unwrap_or_default(),
            e.message()
        )
    })?;
    if file.version != VERSION {
        return Err(format!(
            "{name}: version {} is not one this flux-tools reads ({VERSION})\nhint: write it again with `flux-tools lock --update`",
            file.version
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for pin in &file.pins {
        if !seen.insert((pin.kind, pin.name.as_str())) {
            return Err(format!("{name}: {} is pinned twice", pin.label()));
        }
        let text: Value = serde_json::from_str(&pin.definition)
            .map_err(|e| format!("{name}: the definition of {} is not JSON: {e}", pin.label()))?;
        if digest(&sorted(&text)) != pin.hash {
            return Err(format!(
                "{name}: the hash of {} is not its definition's (edited by hand?)\nhint: review the definition, then `flux-tools lock --update`",
                pin.label()
            ));
        }
    }
    Ok(file.pins)
}

/// A lock in force: what it pins, and whether a tool new to it is served (`[serve] pin =
/// "new-allowed"`) or held back like a changed one (`"strict"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct InForce {
    pub pins: Vec<Pin>,
    pub new_allowed: bool,
}

impl InForce {
    /// What holds the tool `now` back, as a person reads it (`None`: it is served as it is).
    pub(crate) fn holds(&self, now: &Pin) -> Option<String> {
        let pinned = (self.pins.iter()).find(|p| (p.kind, &p.name) == (now.kind, &now.name));
        match pinned {
            Some(was) if was.hash == now.hash => None,
            Some(was) => Some(Change::Changed { was, now }.describe()),
            None if self.new_allowed => None,
            None => Some(Change::New(now).describe()),
        }
    }

    /// The lock with `pin` accepted in place of what it pinned under its name.
    pub(crate) fn accept(&mut self, pin: Pin) {
        self.pins
            .retain(|p| (p.kind, &p.name) != (pin.kind, &pin.name));
        self.pins.push(pin);
    }
}

/// How the definitions now differ from a lock.
#[derive(Debug, PartialEq)]
pub(crate) enum Change<'a> {
    /// Its definition is not the one pinned.
    Changed { was: &'a Pin, now: &'a Pin },
    /// Not in the lock.
    New(&'a Pin),
    /// In the lock, no longer offered.
    Removed(&'a Pin),
}

/// What differs between `locked` and `now`, in the lock's order.
pub(crate) fn changes<'a>(locked: &'a [Pin], now: &'a [Pin]) -> Vec<Change<'a>> {
    let find =
        |pins: &'a [Pin], p: &Pin| pins.iter().find(|q| (q.kind, &q.name) == (p.kind, &p.name));
    let mut out: Vec<Change<'a>> = Vec::new();
    for was in locked {
        match find(now, was) {
            Some(now) if now.hash != was.hash => out.push(Change::Changed { was, now }),
            Some(_) => {}
            None => out.push(Change::Removed(was)),
        }
    }
    out.extend(
        now.iter()
            .filter(|p| find(locked, p).is_none())
            .map(Change::New),
    );
    let key = |c: &Change<'a>| match c {
        Change::Changed { was: p, .. } | Change::New(p) | Change::Removed(p) => {
            (p.kind, p.name.clone())
        }
    };
    out.sort_by_key(key);
    out
}

impl Change<'_> {
    /// What a person reviewing it reads: a line naming it, and for a changed definition the
    /// lines that differ (`-` pinned, `+` now).
    pub(crate) fn describe(&self) -> String {
        match self {
            Change::New(p) => format!("new: {} (from {}), {}\n", p.label(), p.from, p.hash),
            Change::Removed(p) => format!("removed: {} (from {})\n", p.label(), p.from),
            Change::Changed { was, now } => {
                let mut s = format!(
                    "changed: {} (from {}): {} → {}\n",
                    now.label(),
                    now.from,
                    was.hash,
                    now.hash
                );
                s.push_str(&line_diff(&was.definition, &now.definition));
                s
            }
        }
    }
}

/// The lines between the first and the last that differ: `-` in `was`, `+` in `now`.
fn line_diff(was: &str, now: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (was.lines().collect(), now.lines().collect());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = (a[head..].iter().rev())
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = String::new();
    for l in &a[head..a.len() - tail] {
        let _ = writeln!(out, "  - {l}");
    }
    for l in &b[head..b.len() - tail] {
        let _ = writeln!(out, "  + {l}");
    }
    out
}

#[cfg(test)]
mod tests;
