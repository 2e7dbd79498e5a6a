//! `verify` on a write tool: the read that settles a call of it cut off in flight.
//!
//! `verify = "TOOL"`, or `verify = { tool = "TOOL", args = { … }, resend = false }`. The probe
//! is a read tool of the manifest; it is called with the write's idempotency key and, without
//! `args`, the write's own arguments (those the probe declares, when it declares any); `args`
//! may refer to the write's arguments as a batch refers to a call's output
//! (`"${args.order_id}"`). Checked once every tool is known ([`Reader::verify_checks`]): the
//! probe exists, is a read and not the write itself, and its required arguments are given.

use std::ops::Range;

use serde_json::Value;
use toml::de::{DeTable, DeValue};

use super::reader::{de_to_json, Reader};
use super::{Effect, Manifest, Origin, Tool};
use crate::error::suggest;
use crate::error::Diagnostic;
use crate::reference::{Args, ResolveError};

/// The keys of `verify = { … }`.
const KEYS: &[&str] = &["tool", "args", "resend"];

/// `verify` on a write tool.
#[derive(Debug, Clone)]
pub struct Verify {
    /// The probe: a read tool of the manifest.
    pub tool: String,
    /// Its arguments; `None`: the write's own (those the probe declares, if it declares any).
    /// References name the write's arguments: `${args.NAME}`.
    pub args: Option<Args>,
    /// A write its probe found never landed is sent again once, with the same key
    /// (`resend = false`: it is reported `not_applied`).
    pub resend: bool,
    /// The `verify` value, for diagnostics.
    pub span: Range<usize>,
}

impl Verify {
    /// The probe's arguments for a write called with `args`; `Err` names what could not be
    /// filled in.
    pub fn args_for(
        &self,
        args: &serde_json::Map<String, Value>,
        declared: Option<Vec<&str>>,
    ) -> Result<serde_json::Map<String, Value>, String> {
        let Some(template) = &self.args else {
            return Ok(match declared {
                Some(names) => args
                    .iter()
                    .filter(|(k, _)| names.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                None => args.clone(),
            });
        };
        let whole = Value::Object(args.clone());
        let lookup = |target: &str| (target == "args").then_some(&whole);
        template
            .resolve(&lookup)
            .map(std::borrow::Cow::into_owned)
            .map_err(|(arg, e)| {
                let why = match e {
                    ResolveError::NoOutput(t) => format!("`{t}` is not the write's arguments"),
                    ResolveError::Path(r, m) => format!("{r}: `{}` — {}", m.at, m.why),
                };
                format!("argument `{arg}` of probe `{}`: {why}", self.tool)
            })
    }
}

impl Reader<'_> {
    /// `verify` in `[tools.NAME]` (`ctx`), as written; checked against the other tools later.
    pub(super) fn verify(&mut self, t: &DeTable<'_>, ctx: &str) -> Option<Verify> {
        let (_, v) = Reader::entry(t, "verify")?;
        let span = v.span();
        match v.get_ref() {
            DeValue::String(s) => Some(Verify {
                tool: s.to_string(),
                args: None,
                resend: true,
                span,
            }),
            DeValue::Table(vt) => self.verify_table(vt, span, ctx),
            other => {
                let want = "a tool name or a table { tool, args, resend }";
                self.type_error(span, &format!("`verify` in {ctx}"), want, other);
                None
            }
        }
    }

    fn verify_table(&mut self, vt: &DeTable<'_>, span: Range<usize>, ctx: &str) -> Option<Verify> {
        let vctx = format!("`verify` in {ctx}");
        self.check_keys(vt, KEYS, &vctx);
        let Some((tool, _)) = self.string(vt, "tool", &vctx) else {
            if Reader::entry(vt, "tool").is_none() {
                let hint = "name the read tool that tells whether a call landed: verify = { tool = \"get_refund\" }";
                self.error(
                    span.clone(),
                    format!("{vctx} has no `tool`"),
                    Some(hint.into()),
                );
            }
            return None;
        };
        let args = match self.table(vt, "args", &vctx) {
            Some(at) => Some(self.probe_args(at, &vctx)?),
            None => None,
        };
        let resend = self.boolean(vt, "resend", &vctx).unwrap_or(true);
        Some(Verify {
            tool,
            args,
            resend,
            span,
        })
    }

    /// `args = { … }` of a probe: references only to the write's arguments (`${args.NAME}`).
    fn probe_args(&mut self, at: &DeTable<'_>, vctx: &str) -> Option<Args> {
        let span = Reader::entry(at, "").map_or(0..0, |(_, v)| v.span());
        let value = match de_to_json(&DeValue::Table(at.clone())) {
            Value::Object(m) => m,
            _ => return None,
        };
        let (args, errors) = Args::compile(value);
        let span = at.iter().next().map_or(span, |(k, _)| k.span());
        if let Some(e) = errors.first() {
            self.error(span, format!("`args` of {vctx}: {}", e.message), None);
            return None;
        }
        if let Some((h, r)) = args.refs().find(|(_, r)| r.target != "args") {
            self.error(
                span,
                format!(
                    "`args` of {vctx}: argument `{}` refers to `{r}`",
                    h.arg_name()
                ),
                Some("a probe's arguments may refer only to the write's: \"${args.NAME}\"".into()),
            );
            return None;
        }
        Some(args)
    }

    /// Every `verify` against the tools: its probe exists, is a read, is not the write itself,
    /// and gets every argument it requires; and only a write has one.
    pub(super) fn verify_checks(&mut self, m: &Manifest) {
        for tool in &m.tools {
            let Some(v) = &tool.verify else { continue };
            let ctx = format!("`verify` of tool `{}`", tool.name);
            if tool.effect != Effect::Write {
                let hint = "only a write can be cut off with an unknown outcome; remove `verify`";
                self.error(
                    v.span.clone(),
                    format!("{ctx}: `{}` is a read", tool.name),
                    Some(hint.into()),
                );
                continue;
            }
            let Some(probe) = m.tools.iter().find(|t| t.name == v.tool) else {
                if m.whole_servers().next().is_some() {
                    // A whole server's tool, maybe: known once it is asked (`discovered`).
                    continue;
                }
                let names = m.tools.iter().map(|t| t.name.as_str());
                let hint = suggest(&v.tool, names)
                    .or_else(|| Some("name a read tool of this manifest".into()));
                self.error(
                    v.span.clone(),
                    format!("{ctx} names `{}`, which is not a tool", v.tool),
                    hint,
                );
                continue;
            };
            if probe.effect_origin == Origin::Default && probe.kind.announces_effect() {
                // Its server says whether it reads: checked once it is asked (`discovered`).
                continue;
            }
            if let Some(why) = refusal(tool, probe) {
                let hint = "a probe only reads: it must never make the effect it looks for";
                self.error(
                    v.span.clone(),
                    format!("{ctx}: `{}` {why}", v.tool),
                    Some(hint.into()),
                );
                continue;
            }
            if let Some(missing) = missing_args(v, tool, probe) {
                let hint = format!("give it: verify = {{ tool = \"{}\", args = {{ {missing} = \"${{args.NAME}}\" }} }}", v.tool);
                self.error(
                    v.span.clone(),
                    format!(
                        "{ctx}: probe `{}` requires `{missing}`, which the write does not pass it",
                        v.tool
                    ),
                    Some(hint),
                );
            }
        }
    }
}

/// What [`Reader::verify_checks`] left to the servers, once they have been asked (their
/// tools learnt, their annotations read): a probe that is still not a tool, or is a write.
/// Such a write is never settled (its probe is not called); each of `writes` (the ones a run
/// calls) is an error to say.
pub(crate) fn discovered(m: &Manifest, writes: &[String]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for tool in m.tools.iter().filter(|t| writes.contains(&t.name)) {
        let Some(v) = &tool.verify else { continue };
        let at = Some(m.file.location(v.span.start, v.span.end));
        let why = match m.tools.iter().find(|t| t.name == v.tool) {
            None => Some("is not a tool, nor one its servers offer"),
            // Not asked about (its write is not called here): nothing known yet.
            Some(p) if p.effect_origin == Origin::Default && p.kind.announces_effect() => None,
            Some(probe) => refusal(tool, probe),
        };
        if let Some(why) = why {
            let msg = format!("`verify` of tool `{}`: `{}` {why}", tool.name, v.tool);
            let hint = "name a read tool of this manifest or of a whole server (as it is served)";
            out.push(Diagnostic::error(msg).at(at).hint(hint));
        }
    }
    out
}

/// Why `probe` cannot settle calls of `write` (`None`: it can).
fn refusal(write: &Tool, probe: &Tool) -> Option<&'static str> {
    if probe.name == write.name {
        return Some("is the write itself");
    }
    if probe.effect == Effect::Write {
        return Some("is a write (effect = \"write\")");
    }
    if probe.verify.is_some() {
        return Some("has a probe of its own");
    }
    None
}

/// A required argument of `probe` that the write does not hand it, if any.
fn missing_args(v: &Verify, write: &Tool, probe: &Tool) -> Option<String> {
    let probe_args = &probe.args.as_ref()?.args;
    let given: Vec<&str> = match &v.args {
        Some(a) => a.value.keys().map(String::as_str).collect(),
        // The write's own arguments: those its schema declares (any, when it has none).
        None => match &write.args {
            Some(s) => s.args.iter().map(|a| a.name.as_str()).collect(),
            None => return None,
        },
    };
    let required = probe_args.iter().filter(|a| a.required);
    required
        .map(|a| a.name.as_str())
        .find(|r| !given.contains(r))
        .map(str::to_string)
}
