//! Typed reads of a spanned TOML table: each helper returns the value or records a
//! diagnostic at the field's line and column (wrong type, out of range, unknown field) and
//! returns `None`, so one pass reports every problem. The manifest's sections and each tool
//! kind's own fields are read through it.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use serde_json::Value;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::kinds::Kinds;
use crate::duration;
use crate::error::{suggest, Diagnostic, SourceFile};
use crate::template::Template;

/// Default bound on a tool's captured output.
pub(crate) const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;

/// Walks the spanned TOML tree, collecting diagnostics.
pub struct Reader<'a> {
    pub file: &'a SourceFile,
    pub diags: Vec<Diagnostic>,
    /// The kinds a tool may be of.
    pub kinds: &'a Kinds,
}

pub(crate) type Entry<'a, 'i> = (
    &'a Spanned<std::borrow::Cow<'i, str>>,
    &'a Spanned<DeValue<'i>>,
);

impl<'a> Reader<'a> {
    pub fn error(&mut self, span: Range<usize>, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.file.location(span.start, span.end);
        self.diags
            .push(Diagnostic::error(msg).at(Some(loc)).maybe_hint(hint));
    }

    pub fn warn(&mut self, span: Range<usize>, msg: impl Into<String>, hint: Option<String>) {
        let loc = self.file.location(span.start, span.end);
        self.diags
            .push(Diagnostic::warning(msg).at(Some(loc)).maybe_hint(hint));
    }

    pub fn type_error(&mut self, span: Range<usize>, ctx: &str, want: &str, got: &DeValue<'_>) {
        self.error(
            span,
            format!("{ctx} should be {want}, found {}", de_kind(got)),
            None,
        );
    }

    pub fn entry<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<Entry<'t, 'i>> {
        t.iter().find(|(k, _)| k.get_ref().as_ref() == key)
    }

    pub fn check_keys(&mut self, t: &DeTable<'_>, allowed: &[&str], ctx: &str) {
        for (k, _) in t.iter() {
            let key = k.get_ref().as_ref();
            if !allowed.contains(&key) {
                let hint = suggest(key, allowed.iter().copied())
                    .or_else(|| Some(format!("known fields: {}", allowed.join(", "))));
                self.error(k.span(), format!("unknown field `{key}` in {ctx}"), hint);
            }
        }
    }

    pub fn table<'t, 'i>(
        &mut self,
        t: &'t DeTable<'i>,
        key: &str,
        ctx: &str,
    ) -> Option<&'t DeTable<'i>> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::Table(tt) => Some(tt),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a table", other);
                None
            }
        }
    }

    pub fn string(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> Option<(String, Range<usize>)> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a string", other);
                None
            }
        }
    }

    pub fn boolean(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<bool> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.type_error(
                    v.span(),
                    &format!("`{key}` in {ctx}"),
                    "true or false",
                    other,
                );
                None
            }
        }
    }

    pub fn int(&mut self, v: &Spanned<DeValue<'_>>, ctx: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.error(v.span(), format!("{ctx} is out of range"), None);
                    None
                }
            },
            other => {
                self.type_error(v.span(), ctx, "an integer", other);
                None
            }
        }
    }

    /// A positive count (concurrency limits, weights, bursts): 1 ..= 1,000,000.
    pub fn count(&mut self, v: &Spanned<DeValue<'_>>, ctx: &str) -> Option<u32> {
        let n = self.int(v, ctx)?;
        if !(1..=1_000_000).contains(&n) {
            self.error(
                v.span(),
                format!("{ctx} is {n}; it must be between 1 and 1000000"),
                (n == 0).then(|| "leave the field out for no limit".to_string()),
            );
            return None;
        }
        u32::try_from(n).ok()
    }

    pub fn count_field(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<u32> {
        let (_, v) = Self::entry(t, key)?;
        self.count(v, &format!("`{key}` in {ctx}"))
    }

    pub fn number(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<(f64, Range<usize>)> {
        let (_, v) = Self::entry(t, key)?;
        let n = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            other => {
                self.type_error(v.span(), &format!("`{key}` in {ctx}"), "a number", other);
                return None;
            }
        };
        match n {
            Some(n) if n.is_finite() => Some((n, v.span())),
            _ => {
                self.error(
                    v.span(),
                    format!("`{key}` in {ctx} is not a finite number"),
                    None,
                );
                None
            }
        }
    }

    pub fn seconds(&mut self, t: &DeTable<'_>, key: &str, ctx: &str) -> Option<Duration> {
        let (n, span) = self.number(t, key, ctx)?;
        match duration::from_secs_f64(n) {
            Some(d) if n > 0.0 => Some(d),
            _ => {
                self.error(
                    span,
                    format!("`{key}` in {ctx} must be a positive number of seconds"),
                    None,
                );
                None
            }
        }
    }

    pub fn duration(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> Option<(Duration, String)> {
        let (_, v) = Self::entry(t, key)?;
        match v.get_ref() {
            DeValue::String(s) => match duration::parse(s) {
                Ok(d) => Some((d, s.to_string())),
                Err(e) => {
                    self.error(v.span(), format!("`{key}` in {ctx}: {e}"), None);
                    None
                }
            },
            other => {
                self.type_error(
                    v.span(),
                    &format!("`{key}` in {ctx}"),
                    "a duration string like \"5s\"",
                    other,
                );
                None
            }
        }
    }

    pub fn strings(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> Option<Vec<(String, Range<usize>)>> {
        let (_, v) = Self::entry(t, key)?;
        let DeValue::Array(items) = v.get_ref() else {
            self.type_error(
                v.span(),
                &format!("`{key}` in {ctx}"),
                "an array of strings",
                v.get_ref(),
            );
            return None;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), item.span())),
                other => self.type_error(
                    item.span(),
                    &format!("each of `{key}` in {ctx}"),
                    "a string",
                    other,
                ),
            }
        }
        Some(out)
    }

    pub fn template(&mut self, text: &str, span: Range<usize>, placeholders: bool) -> Template {
        match Template::parse(text, placeholders) {
            Ok(t) => t,
            Err(e) => {
                self.error(span, e, None);
                Template {
                    segments: Vec::new(),
                }
            }
        }
    }

    pub fn templates(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
        placeholders: bool,
    ) -> Option<Vec<Template>> {
        let items = self.strings(t, key, ctx)?;
        Some(
            items
                .into_iter()
                .map(|(s, span)| self.template(&s, span, placeholders))
                .collect(),
        )
    }

    pub fn template_map(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        ctx: &str,
    ) -> BTreeMap<String, Template> {
        let mut out = BTreeMap::new();
        if let Some(tt) = self.table(t, key, ctx) {
            for (k, v) in tt.iter() {
                match v.get_ref() {
                    DeValue::String(s) => {
                        let tpl = self.template(s, v.span(), false);
                        out.insert(k.get_ref().to_string(), tpl);
                    }
                    other => self.type_error(
                        v.span(),
                        &format!("`{key}.{}` in {ctx}", k.get_ref()),
                        "a string",
                        other,
                    ),
                }
            }
        }
        out
    }

    /// `max_output = "1MiB"`: the most output a call may produce.
    pub fn max_output(&mut self, t: &DeTable<'_>, ctx: &str) -> u64 {
        match self.string(t, "max_output", ctx) {
            Some((s, ss)) => match parse_size(&s) {
                Some(n) if n > 0 => n,
                _ => {
                    self.error(
                        ss,
                        format!("`max_output` in {ctx}: `{s}` is not a size"),
                        Some("write it like \"1MiB\", \"512KiB\" or \"100000\"".into()),
                    );
                    DEFAULT_MAX_OUTPUT
                }
            },
            None => DEFAULT_MAX_OUTPUT,
        }
    }
}

/// A table key as TOML writes it: bare when it can be, quoted otherwise.
pub(crate) fn quote_key(k: &str) -> String {
    if k.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        format!("\"{k}\"")
    }
}

/// A TOML value as JSON (datetimes become strings).
pub(crate) fn de_to_json(v: &DeValue<'_>) -> Value {
    match v {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(i.to_string())),
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(a) => Value::Array(a.iter().map(|x| de_to_json(x.get_ref())).collect()),
        DeValue::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), de_to_json(v.get_ref())))
                .collect(),
        ),
    }
}

fn de_kind(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Parse a byte size: `1048576`, `512KiB`, `1MiB`, `10MB`, `1GiB`.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}
