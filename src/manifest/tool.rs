//! The fields every `[tools.NAME]` shares (effect, idempotency, lanes, weight, timeout,
//! retries, cost, approval, the argument schema). The kind's own fields are read by the kind
//! ([`crate::tools::Kind::parse`]).

use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};

use serde_json::Value;

use super::reader::{de_to_json, Reader};
use super::{Effect, Origin, Tool};
use crate::error::suggest;
use crate::schema::{ArgSchema, ArgSpec, ArgType};
use crate::tools::{Site, ToolKind};

/// Fields every tool may have, whatever its kind.
const COMMON_TOOL_KEYS: &[&str] = &[
    "kind",
    "description",
    "effect",
    "idempotent",
    "parallel_safe",
    "concurrent_writes",
    "timeout",
    "lanes",
    "weight",
    "retries",
    "cost",
    "expected",
    "requires_approval",
    "args",
];

/// `command, http, mcp and scripted`, or quoted: `"command", "http", "mcp" or "scripted"`.
fn kind_list(last: &str, quote: bool) -> String {
    let q = if quote { "\"" } else { "" };
    let quoted: Vec<String> = ToolKind::NAMES
        .iter()
        .map(|k| format!("{q}{k}{q}"))
        .collect();
    match quoted.split_last() {
        Some((l, rest)) if !rest.is_empty() => format!("{}{last}{l}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

impl Reader<'_> {
    pub(super) fn tool(
        &mut self,
        name: &str,
        ctx: &str,
        t: &DeTable<'_>,
        span: Range<usize>,
        base: &Path,
    ) -> Option<Tool> {
        if name.is_empty() {
            self.error(span.clone(), "a tool name cannot be empty", None);
        }
        let kind_name = match self.string(t, "kind", ctx) {
            Some((k, _)) if ToolKind::keys_of(&k).is_some() => k,
            Some((k, kspan)) => {
                self.error(
                    kspan,
                    format!("unknown tool kind `{k}` in {ctx}"),
                    suggest(&k, ToolKind::NAMES.iter().copied())
                        .or_else(|| Some(format!("kinds are {}", kind_list(" and ", false)))),
                );
                return None;
            }
            None => {
                if Reader::entry(t, "kind").is_none() {
                    self.error(
                        span,
                        format!("{ctx} has no `kind`"),
                        Some(format!("add kind = {}", kind_list(" or ", true))),
                    );
                }
                return None;
            }
        };
        let own = ToolKind::keys_of(&kind_name).unwrap_or_default();
        for (k, _) in t.iter() {
            let key = k.get_ref().as_ref();
            if COMMON_TOOL_KEYS.contains(&key) || own.contains(&key) {
                continue;
            }
            let other_kind = ToolKind::NAMES
                .iter()
                .find(|kn| ToolKind::keys_of(kn).is_some_and(|keys| keys.contains(&key)));
            let all: Vec<&str> = COMMON_TOOL_KEYS.iter().chain(own.iter()).copied().collect();
            let hint = match other_kind {
                Some(kn) => Some(format!(
                    "`{key}` belongs to {kn} tools; this tool is kind = \"{kind_name}\""
                )),
                None => suggest(key, all.iter().copied()),
            };
            self.error(k.span(), format!("unknown field `{key}` in {ctx}"), hint);
        }

        let site = Site {
            name,
            ctx,
            span: span.clone(),
            base,
        };
        let kind = ToolKind::parse(&kind_name, self, t, &site)?;
        let effect_decl = self
            .string(t, "effect", ctx)
            .and_then(|(s, es)| match s.as_str() {
                "read" => Some(Effect::Read),
                "write" => Some(Effect::Write),
                _ => {
                    self.error(
                        es,
                        format!("`effect` in {ctx} is `{s}`; use \"read\" or \"write\""),
                        None,
                    );
                    None
                }
            });
        let effect = effect_decl.unwrap_or(Effect::Write);
        // An MCP tool's annotations supply these defaults at run time (issue 5); until then
        // the manifest's silence means "write".
        if effect_decl.is_none() && !kind.announces_effect() {
            self.warn(
                span.clone(),
                format!("tool `{name}` does not declare `effect`; it is treated as a write"),
                Some("add effect = \"read\" if it changes nothing".into()),
            );
        }
        let idempotent_decl = self.boolean(t, "idempotent", ctx);
        let idempotent = idempotent_decl.unwrap_or(effect == Effect::Read);
        let concurrent_writes = self.boolean(t, "concurrent_writes", ctx).unwrap_or(false);
        if concurrent_writes && effect == Effect::Read {
            if let Some((k, _)) = Reader::entry(t, "concurrent_writes") {
                self.warn(
                    k.span(),
                    format!("`concurrent_writes` in {ctx} has no effect on a read tool"),
                    None,
                );
            }
        }
        let retries = match Reader::entry(t, "retries") {
            Some((_, v)) => match self.int(v, &format!("`retries` in {ctx}")) {
                Some(n) if (0..=100).contains(&n) => n as u32,
                Some(n) => {
                    self.error(
                        v.span(),
                        format!("`retries` in {ctx} is {n}; it must be between 0 and 100"),
                        None,
                    );
                    0
                }
                None => 0,
            },
            None => 0,
        };
        if retries > 0 && !idempotent {
            if let Some((k, _)) = Reader::entry(t, "retries") {
                self.warn(
                    k.span(),
                    format!("tool `{name}` is not idempotent, so its `retries` are never used"),
                    Some("retrying a write could make it twice; declare idempotent = true if its server dedupes by Idempotency-Key".into()),
                );
            }
        }
        if effect == Effect::Write && !idempotent {
            self.warn(
                span.clone(),
                format!("write tool `{name}` has no idempotency protection"),
                Some("a call cut off in flight is reported indeterminate and never retried; declare idempotent = true if the tool dedupes by FLUX_IDEMPOTENCY_KEY / Idempotency-Key".into()),
            );
        }
        let cost = match self.number(t, "cost", ctx) {
            Some((c, _)) if c >= 0.0 => c,
            Some((_, cs)) => {
                self.error(cs, format!("`cost` in {ctx} cannot be negative"), None);
                0.0
            }
            None => 0.0,
        };
        let timeout = self.duration(t, "timeout", ctx);
        if let Some((d, _)) = &timeout {
            if d.is_zero() {
                if let Some((_, v)) = Reader::entry(t, "timeout") {
                    self.error(
                        v.span(),
                        format!("`timeout` in {ctx} must be longer than zero"),
                        None,
                    );
                }
            }
        }
        let lanes = self.strings(t, "lanes", ctx).unwrap_or_default();
        let mut lane_names: Vec<String> = Vec::new();
        for (l, _) in &lanes {
            if !lane_names.contains(l) {
                lane_names.push(l.clone());
            }
        }
        let tool = Tool {
            name: name.to_string(),
            kind,
            description: self.string(t, "description", ctx).map(|(s, _)| s),
            effect,
            effect_origin: if effect_decl.is_some() {
                Origin::Manifest
            } else {
                Origin::Default
            },
            idempotent,
            idempotent_origin: if idempotent_decl.is_some() {
                Origin::Manifest
            } else {
                Origin::Default
            },
            parallel_safe: self.boolean(t, "parallel_safe", ctx).unwrap_or(true),
            concurrent_writes,
            timeout_text: timeout.as_ref().map(|(_, s)| s.clone()),
            timeout: timeout.map(|(d, _)| d),
            lanes: lane_names,
            weight: self.count_field(t, "weight", ctx).unwrap_or(1),
            retries,
            cost,
            expected: self.duration(t, "expected", ctx).map(|(d, _)| d),
            requires_approval: self.boolean(t, "requires_approval", ctx).unwrap_or(false),
            args: self.arg_schema(t, ctx),
            span,
        };
        // Lanes named but not declared are checked in `cross_checks`, once every lane is known.
        Some(tool)
    }

    fn arg_schema(&mut self, t: &DeTable<'_>, ctx: &str) -> Option<ArgSchema> {
        let at = self.table(t, "args", ctx)?;
        let mut schema = ArgSchema::default();
        for (k, v) in at.iter() {
            let name = k.get_ref().to_string();
            let actx = format!("argument `{name}` of {ctx}");
            let DeValue::Table(spec) = v.get_ref() else {
                self.type_error(
                    v.span(),
                    &actx,
                    "a table like { type = \"string\", required = true }",
                    v.get_ref(),
                );
                continue;
            };
            self.check_keys(
                spec,
                &[
                    "type",
                    "required",
                    "min",
                    "max",
                    "min_length",
                    "max_length",
                    "enum",
                    "description",
                ],
                &actx,
            );
            let ty = match self.string(spec, "type", &actx) {
                Some((s, ts)) => match ArgType::parse(&s) {
                    Some(ty) => ty,
                    None => {
                        self.error(
                            ts,
                            format!("unknown type `{s}` for {actx}"),
                            suggest(&s, ArgType::NAMES),
                        );
                        ArgType::Any
                    }
                },
                None => ArgType::Any,
            };
            let length = |r: &mut Self, key: &str| -> Option<u64> {
                let (n, ns) = r.number(spec, key, &actx)?;
                if n < 0.0 || n.fract() != 0.0 {
                    r.error(
                        ns,
                        format!("`{key}` of {actx} must be a whole number"),
                        None,
                    );
                    return None;
                }
                Some(n as u64)
            };
            let min_length = length(self, "min_length");
            let max_length = length(self, "max_length");
            let one_of =
                Reader::entry(spec, "enum").and_then(|(_, ev)| match de_to_json(ev.get_ref()) {
                    Value::Array(a) => Some(a),
                    _ => {
                        self.type_error(
                            ev.span(),
                            &format!("`enum` of {actx}"),
                            "an array",
                            ev.get_ref(),
                        );
                        None
                    }
                });
            schema.args.push(ArgSpec {
                ty,
                required: self.boolean(spec, "required", &actx).unwrap_or(false),
                min: self.number(spec, "min", &actx).map(|(n, _)| n),
                max: self.number(spec, "max", &actx).map(|(n, _)| n),
                min_length,
                max_length,
                one_of,
                description: self.string(spec, "description", &actx).map(|(s, _)| s),
                name,
            });
        }
        Some(schema)
    }
}
