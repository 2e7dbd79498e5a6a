//! The fields every `[tools.NAME]` shares (effect, idempotency, lanes, weight, timeout,
//! retries, cost, approval, the argument schema). The kind's own fields are read by the kind,
//! through its entry in the registry the manifest is handed ([`Kinds`]).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use toml::de::{DeTable, DeValue};

use serde_json::Value;

use super::kinds::{self, KindSettings, Kinds, Site};
use super::reader::{de_to_json, Reader};
use super::{Approval, BackendOrigin, Effect, Origin, Tool};
use crate::error::suggest;
use crate::schema::{ArgSchema, ArgSpec, ArgType};

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
    "approval",
    "cache",
    "verify",
    "args",
    "backend",
];

/// `command, http, mcp and scripted`, or quoted: `"command", "http", "mcp" or "scripted"`.
fn kind_list(kinds: &Kinds, last: &str, quote: bool) -> String {
    let q = if quote { "\"" } else { "" };
    let quoted: Vec<String> = kinds.iter().map(|k| format!("{q}{}{q}", k.name)).collect();
    match quoted.split_last() {
        Some((l, rest)) if !rest.is_empty() => format!("{}{last}{l}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

/// Why a tool of this effect cannot have a `cache` (`None`: it can).
pub(crate) fn cache_refusal(
    effect: Effect,
    idempotent: bool,
    effect_pending: bool,
) -> Option<String> {
    if effect == Effect::Write && !effect_pending {
        return Some("the tool is a write, and a write's result is never reused".into());
    }
    if !idempotent && !effect_pending {
        return Some("the tool is not idempotent".into());
    }
    None
}

/// Where a declaration came from: the manifest, or nowhere (a default).
fn origin(declared: bool) -> Origin {
    if declared {
        Origin::Manifest
    } else {
        Origin::Default
    }
}

impl Reader<'_> {
    /// One `[tools.NAME]`: the fields every tool has, and its kind's own (read by the kind).
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
        let kind_name = self.kind_name(t, ctx, &span)?;
        self.check_tool_keys(t, ctx, &kind_name);
        let site = Site {
            name,
            ctx,
            span: span.clone(),
            base,
        };
        let kind: Arc<dyn KindSettings> =
            (kinds::find(self.kinds, &kind_name)?.parse)(self, t, &site).into();
        let (effect, effect_origin) = self.effect(t, &site, &*kind);
        let idempotent_decl = self.boolean(t, "idempotent", ctx);
        let idempotent = idempotent_decl.unwrap_or(effect == Effect::Read);
        let idempotent_origin = origin(idempotent_decl.is_some());
        let concurrent_writes = self.concurrent_writes(t, ctx, effect);
        let retries = self.retries(t, name, ctx, idempotent);
        // A tool whose server announces its effect is judged once the server is asked.
        let effect_pending = effect_origin == Origin::Default && kind.announces_effect();
        let verify = self.verify(t, ctx);
        // A write with a probe is settled when cut off: it has its protection.
        if effect == Effect::Write && !idempotent && !effect_pending && verify.is_none() {
            self.warn(
                span.clone(),
                format!("write tool `{name}` has no idempotency protection"),
                Some("a call cut off in flight is reported indeterminate and never retried; declare idempotent = true if the tool dedupes by FLUX_IDEMPOTENCY_KEY / Idempotency-Key, or name a read that can tell whether it landed: verify = \"TOOL\"".into()),
            );
        }
        let timeout = self.timeout(t, ctx);
        let cache = self.cache(t, ctx, (effect, idempotent), effect_pending);
        let lanes = self.tool_lanes(t, ctx);
        let (backends, backends_origin) = self.backends(t, &site, &*kind, &lanes);
        let approval = self.approval(t, ctx);
        Some(Tool {
            name: name.to_string(),
            kind,
            description: self.string(t, "description", ctx).map(|(s, _)| s),
            effect,
            effect_origin,
            idempotent,
            idempotent_origin,
            parallel_safe: self.boolean(t, "parallel_safe", ctx).unwrap_or(true),
            concurrent_writes,
            timeout_text: timeout.as_ref().map(|(_, s)| s.clone()),
            timeout: timeout.map(|(d, _)| d),
            // Lanes named but not declared are checked in `cross_checks`, once all are known.
            lanes,
            backends,
            backends_origin,
            weight: self.count_field(t, "weight", ctx).unwrap_or(1),
            retries,
            cost: self.cost(t, ctx),
            expected: self.duration(t, "expected", ctx).map(|(d, _)| d),
            requires_approval: approval.0,
            approval: approval.1,
            cache,
            verify,
            args: self.arg_schema(t, ctx),
            span,
            discovered_from: None,
            listed: true,
        })
    }

    /// `requires_approval = true` and `approval = "none" | "required" | "out_of_band"`: whether
    /// calls need approval, and who may give it.
    fn approval(&mut self, t: &DeTable<'_>, ctx: &str) -> (bool, Approval) {
        let flag = self.boolean(t, "requires_approval", ctx);
        let Some((text, span)) = self.string(t, "approval", ctx) else {
            let a = if flag == Some(true) {
                Approval::Required
            } else {
                Approval::Unset
            };
            return (flag == Some(true), a);
        };
        let Some(a) = Approval::parse(&text) else {
            self.error(
                span,
                format!("`approval` in {ctx} is `{text}`"),
                Some("use \"required\", \"out_of_band\" or \"none\"".into()),
            );
            return (flag == Some(true), Approval::Unset);
        };
        let needs = matches!(a, Approval::Required | Approval::OutOfBand);
        if flag.is_some_and(|f| f != needs) {
            self.error(
                span,
                format!(
                    "{ctx} says both `requires_approval = {}` and `approval = \"{text}\"`",
                    !needs
                ),
                Some("keep one of them".into()),
            );
        }
        (needs, a)
    }

    /// `kind = "…"`: one of the registered kinds (`None`, reported, otherwise).
    fn kind_name(&mut self, t: &DeTable<'_>, ctx: &str, span: &Range<usize>) -> Option<String> {
        match self.string(t, "kind", ctx) {
            Some((k, _)) if kinds::find(self.kinds, &k).is_some() => Some(k),
            Some((k, kspan)) => {
                let all = kind_list(self.kinds, " and ", false);
                self.error(
                    kspan,
                    format!("unknown tool kind `{k}` in {ctx}"),
                    suggest(&k, self.kinds.iter().map(|k| k.name))
                        .or_else(|| Some(format!("kinds are {all}"))),
                );
                None
            }
            None => {
                if Reader::entry(t, "kind").is_none() {
                    let all = kind_list(self.kinds, " or ", true);
                    self.error(
                        span.clone(),
                        format!("{ctx} has no `kind`"),
                        Some(format!("add kind = {all}")),
                    );
                }
                None
            }
        }
    }

    /// Every field is a common one or the kind's own; one of another kind says so.
    fn check_tool_keys(&mut self, t: &DeTable<'_>, ctx: &str, kind_name: &str) {
        let kinds = self.kinds;
        let own = kinds::find(kinds, kind_name).map_or(&[][..], |k| k.keys);
        for (k, _) in t.iter() {
            let key = k.get_ref().as_ref();
            if COMMON_TOOL_KEYS.contains(&key) || own.contains(&key) {
                continue;
            }
            let other_kind = kinds
                .iter()
                .find(|kn| kn.keys.contains(&key))
                .map(|kn| kn.name);
            let all: Vec<&str> = COMMON_TOOL_KEYS.iter().chain(own.iter()).copied().collect();
            let hint = match other_kind {
                Some(kn) => Some(format!(
                    "`{key}` belongs to {kn} tools; this tool is kind = \"{kind_name}\""
                )),
                None => suggest(key, all.iter().copied()),
            };
            self.error(k.span(), format!("unknown field `{key}` in {ctx}"), hint);
        }
    }

    /// `effect`: declared, else a write (for a kind whose server announces it: until asked).
    fn effect(
        &mut self,
        t: &DeTable<'_>,
        site: &Site<'_>,
        kind: &dyn KindSettings,
    ) -> (Effect, Origin) {
        let ctx = site.ctx;
        let declared = self
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
        if declared.is_none() && !kind.announces_effect() {
            self.warn(
                site.span.clone(),
                format!(
                    "tool `{}` does not declare `effect`; it is treated as a write",
                    site.name
                ),
                Some("add effect = \"read\" if it changes nothing".into()),
            );
        }
        (
            declared.unwrap_or(Effect::Write),
            origin(declared.is_some()),
        )
    }

    fn concurrent_writes(&mut self, t: &DeTable<'_>, ctx: &str, effect: Effect) -> bool {
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
        concurrent_writes
    }

    /// `retries`: 0 to 100, and only ever used by an idempotent tool.
    fn retries(&mut self, t: &DeTable<'_>, name: &str, ctx: &str, idempotent: bool) -> u32 {
        let Some((k, v)) = Reader::entry(t, "retries") else {
            return 0;
        };
        let retries = match self.int(v, &format!("`retries` in {ctx}")) {
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
        };
        if retries > 0 && !idempotent {
            self.warn(
                k.span(),
                format!("tool `{name}` is not idempotent, so its `retries` are never used"),
                Some("retrying a write could make it twice; declare idempotent = true if its server dedupes by Idempotency-Key".into()),
            );
        }
        retries
    }

    pub(super) fn cost(&mut self, t: &DeTable<'_>, ctx: &str) -> f64 {
        match self.number(t, "cost", ctx) {
            Some((c, _)) if c >= 0.0 => c,
            Some((_, cs)) => {
                self.error(cs, format!("`cost` in {ctx} cannot be negative"), None);
                0.0
            }
            None => 0.0,
        }
    }

    /// `timeout`, and the text it was written as (for messages).
    pub(super) fn timeout(
        &mut self,
        t: &DeTable<'_>,
        ctx: &str,
    ) -> Option<(std::time::Duration, String)> {
        let timeout = self.duration(t, "timeout", ctx);
        if timeout.as_ref().is_some_and(|(d, _)| d.is_zero()) {
            if let Some((_, v)) = Reader::entry(t, "timeout") {
                self.error(
                    v.span(),
                    format!("`timeout` in {ctx} must be longer than zero"),
                    None,
                );
            }
        }
        timeout
    }

    /// `cache = "5m"`: only on a read, idempotent tool (a write's result is never reused). A
    /// tool whose server announces its effect is checked once the server is asked.
    fn cache(
        &mut self,
        t: &DeTable<'_>,
        ctx: &str,
        (effect, idempotent): (Effect, bool),
        effect_pending: bool,
    ) -> Option<std::time::Duration> {
        let (ttl, _) = self.duration(t, "cache", ctx)?;
        let span = Reader::entry(t, "cache").map(|(_, v)| v.span())?;
        if ttl.is_zero() {
            self.error(
                span,
                format!("`cache` in {ctx} must be longer than zero"),
                None,
            );
            return None;
        }
        if let Some(why) = cache_refusal(effect, idempotent, effect_pending) {
            self.error(
                span,
                format!("`cache` in {ctx}: {why}"),
                Some("only a read, idempotent tool's results can be reused; remove `cache`".into()),
            );
            return None;
        }
        Some(ttl)
    }

    /// `backend = "orders-db"` or a list; else its shared lanes, else what its kind says (an
    /// MCP tool: `mcp:SERVER`), else the tool itself (`tool:NAME`).
    fn backends(
        &mut self,
        t: &DeTable<'_>,
        site: &Site<'_>,
        kind: &dyn KindSettings,
        lanes: &[String],
    ) -> (Vec<String>, BackendOrigin) {
        match self.backend_list(t, site.ctx) {
            Some(mut b) if !b.is_empty() => {
                b.dedup();
                (b, BackendOrigin::Manifest)
            }
            _ if !lanes.is_empty() => (lanes.to_vec(), BackendOrigin::Lanes),
            _ => match kind.backend() {
                Some(b) => (vec![b], BackendOrigin::Kind),
                None => (vec![format!("tool:{}", site.name)], BackendOrigin::Tool),
            },
        }
    }

    /// `backend = "orders-db"` or a list of them, as written.
    pub(super) fn backend_list(&mut self, t: &DeTable<'_>, ctx: &str) -> Option<Vec<String>> {
        let (_, v) = Reader::entry(t, "backend")?;
        match v.get_ref() {
            DeValue::String(s) => Some(vec![s.to_string()]),
            DeValue::Array(_) => self
                .strings(t, "backend", ctx)
                .map(|l| l.into_iter().map(|(s, _)| s).collect()),
            other => {
                let what = format!("`backend` in {ctx}");
                self.type_error(v.span(), &what, "a string or an array of strings", other);
                None
            }
        }
    }

    /// `lanes`, each once, in the order written.
    pub(super) fn tool_lanes(&mut self, t: &DeTable<'_>, ctx: &str) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for (l, _) in self.strings(t, "lanes", ctx).unwrap_or_default() {
            if !names.contains(&l) {
                names.push(l);
            }
        }
        names
    }

    fn arg_schema(&mut self, t: &DeTable<'_>, ctx: &str) -> Option<ArgSchema> {
        let at = self.table(t, "args", ctx)?;
        Some(ArgSchema {
            args: self.arg_specs(at, ctx),
        })
    }

    /// The arguments (or an object's properties) declared in table `at` of `ctx`.
    fn arg_specs(&mut self, at: &DeTable<'_>, ctx: &str) -> Vec<ArgSpec> {
        let mut out = Vec::new();
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
            out.push(self.arg_spec(&name, spec, &actx));
        }
        out
    }

    /// One argument's declaration: type, bounds, and for an array its `items`, for an object
    /// its `properties`.
    fn arg_spec(&mut self, name: &str, spec: &DeTable<'_>, actx: &str) -> ArgSpec {
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
                "items",
                "properties",
            ],
            actx,
        );
        let ty = match self.string(spec, "type", actx) {
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
            let (n, ns) = r.number(spec, key, actx)?;
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
        let items = self
            .nested(spec, "items", ty, ArgType::Array, actx)
            .map(|item| {
                Box::new(self.arg_spec(&format!("{name}[]"), item, &format!("the items of {actx}")))
            });
        let properties = self
            .nested(spec, "properties", ty, ArgType::Object, actx)
            .map(|props| self.arg_specs(props, &format!("the properties of {actx}")));
        ArgSpec {
            ty,
            required: self.boolean(spec, "required", actx).unwrap_or(false),
            min: self.number(spec, "min", actx).map(|(n, _)| n),
            max: self.number(spec, "max", actx).map(|(n, _)| n),
            min_length,
            max_length,
            one_of,
            description: self.string(spec, "description", actx).map(|(s, _)| s),
            items,
            properties,
            name: name.to_string(),
        }
    }

    /// `items` (of an array) or `properties` (of an object) as a table, if declared on the
    /// right type.
    fn nested<'t, 'i>(
        &mut self,
        spec: &'t DeTable<'i>,
        key: &str,
        ty: ArgType,
        want: ArgType,
        actx: &str,
    ) -> Option<&'t DeTable<'i>> {
        let (k, v) = Reader::entry(spec, key)?;
        if ty != want {
            let what = if want == ArgType::Array {
                "array"
            } else {
                "object"
            };
            self.error(
                k.span(),
                format!("`{key}` of {actx} needs type = \"{what}\""),
                None,
            );
            return None;
        }
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.type_error(v.span(), &format!("`{key}` of {actx}"), "a table", other);
                None
            }
        }
    }
}
