//! Manifest string templates: `${env:NAME}` secrets and `{arg}` placeholders.
//!
//! A template is parsed once into [`Segment`]s, so a value substituted for a placeholder is
//! never scanned again: an argument containing `${env:HOME}` stays that literal text and can
//! never read the environment. Secrets are read only when a call is invoked, and a template
//! is displayed with every secret as `***` ([`Template::redacted`]).

use serde_json::Value;

/// One piece of a manifest string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Lit(String),
    /// `${env:NAME}`: read from the environment at run time, never printed.
    Env(String),
    /// `{name}`: the call's argument `name`.
    Arg(String),
}

/// A parsed manifest string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub segments: Vec<Segment>,
}

/// A `${env:NAME}` the environment does not have at run time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("environment variable `{0}` (named by `${{env:{0}}}` in the manifest) is not set")]
pub struct MissingEnv(pub String);

impl Template {
    /// Parse `text`. With `placeholders` false, `{x}` is literal text (headers, env values).
    pub fn parse(text: &str, placeholders: bool) -> Result<Template, String> {
        let mut segments = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("${env:") {
                let end = after
                    .find('}')
                    .ok_or_else(|| format!("unclosed `${{env:` in `{}`", redact_raw(text)))?;
                let name = &after[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!(
                        "`${{env:{name}}}` is not a valid environment variable name"
                    ));
                }
                flush(&mut lit, &mut segments);
                segments.push(Segment::Env(name.to_string()));
                rest = &after[end + 1..];
                continue;
            }
            if placeholders {
                if let Some(after) = rest.strip_prefix('{') {
                    if let Some(end) = after.find('}') {
                        let name = &after[..end];
                        if is_ident(name) {
                            flush(&mut lit, &mut segments);
                            segments.push(Segment::Arg(name.to_string()));
                            rest = &after[end + 1..];
                            continue;
                        }
                    }
                }
            }
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                lit.push(c);
            }
            rest = chars.as_str();
        }
        flush(&mut lit, &mut segments);
        Ok(Template { segments })
    }

    /// The argument names this template substitutes.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Arg(a) => Some(a.as_str()),
            _ => None,
        })
    }

    pub fn has_secret(&self) -> bool {
        self.segments.iter().any(|s| matches!(s, Segment::Env(_)))
    }

    /// The text with every secret shown as `***` (placeholders kept as `{name}`).
    pub fn redacted(&self) -> String {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Lit(l) => out.push_str(l),
                Segment::Env(_) => out.push_str("***"),
                Segment::Arg(a) => {
                    out.push('{');
                    out.push_str(a);
                    out.push('}');
                }
            }
        }
        out
    }

    /// Render with secrets read from the environment and placeholders from `args`.
    /// `encode` is applied to each substituted argument (URL-encoding for http).
    pub fn render(
        &self,
        args: &serde_json::Map<String, Value>,
        encode: &dyn Fn(&str) -> String,
    ) -> Result<String, RenderError> {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Lit(l) => out.push_str(l),
                Segment::Env(name) => out.push_str(
                    &std::env::var(name).map_err(|_| RenderError::Env(MissingEnv(name.clone())))?,
                ),
                Segment::Arg(a) => {
                    let v = args
                        .get(a)
                        .ok_or_else(|| RenderError::MissingArg(a.clone()))?;
                    out.push_str(&encode(&value_text(v)));
                }
            }
        }
        Ok(out)
    }

    /// The text of a template with no placeholders, or `None` when it has secrets.
    pub fn literal(&self) -> Option<String> {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Lit(l) => out.push_str(l),
                _ => return None,
            }
        }
        Some(out)
    }
}

/// Why a template could not be rendered for a call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Env(MissingEnv),
    #[error("argument `{0}` is needed by a placeholder but the call does not give it")]
    MissingArg(String),
}

/// A JSON value as placeholder text: strings as they are, anything else as compact JSON.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn flush(lit: &mut String, segments: &mut Vec<Segment>) {
    if !lit.is_empty() {
        segments.push(Segment::Lit(std::mem::take(lit)));
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A map of templates as JSON, every secret shown as `***`.
pub(crate) fn redacted_map(m: &std::collections::BTreeMap<String, Template>) -> serde_json::Value {
    serde_json::Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.redacted())))
            .collect(),
    )
}

/// Replace every `${env:…}` in raw text with `***` (for messages about malformed text).
pub(crate) fn redact_raw(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${env:") {
        out.push_str(&rest[..i]);
        out.push_str("***");
        rest = match rest[i..].find('}') {
            Some(j) => &rest[i + j + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_env_and_placeholders() {
        let t = Template::parse("--id={id}&k=${env:KEY}", true).unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Lit("--id=".into()),
                Segment::Arg("id".into()),
                Segment::Lit("&k=".into()),
                Segment::Env("KEY".into()),
            ]
        );
        assert_eq!(t.redacted(), "--id={id}&k=***");
        assert!(t.has_secret());
    }

    #[test]
    fn braces_without_placeholders_stay_literal() {
        let t = Template::parse("{\"a\": 1} {x}", false).unwrap();
        assert_eq!(t.literal().unwrap(), "{\"a\": 1} {x}");
        let t = Template::parse("{not an ident}", true).unwrap();
        assert_eq!(t.literal().unwrap(), "{not an ident}");
    }

    #[test]
    fn substituted_values_are_never_rescanned() {
        let t = Template::parse("{q}", true).unwrap();
        let mut args = serde_json::Map::new();
        args.insert("q".into(), Value::String("${env:HOME}".into()));
        assert_eq!(t.render(&args, &|s| s.to_string()).unwrap(), "${env:HOME}");
        args.insert("q".into(), serde_json::json!({"a": [1, 2]}));
        assert_eq!(
            t.render(&args, &|s| s.to_string()).unwrap(),
            r#"{"a":[1,2]}"#
        );
    }

    #[test]
    fn rejects_bad_env_names() {
        assert!(Template::parse("${env:}", false).is_err());
        assert!(Template::parse("${env:A B}", false).is_err());
        assert!(Template::parse("${env:OPEN", false).is_err());
        assert_eq!(redact_raw("a ${env:X} b ${env:Y"), "a *** b ***");
    }
}
