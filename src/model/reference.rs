//! Data references between calls: `${ID}` and `${ID.a.b[0].c}` inside argument strings.
//!
//! An argument that is exactly one reference takes the referenced JSON value (typed); a
//! reference inside a longer string is replaced by its text; `$${` writes a literal `${`.
//! [`Args`] compiles a call's arguments once into the literal value plus the places
//! ("holes") that need resolving, so a call without references costs nothing at dispatch.

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};

use crate::template::value_text;

/// One step of a path into an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

impl fmt::Display for PathSeg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSeg::Key(k) => write!(f, ".{k}"),
            PathSeg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// `${target.path…}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub target: String,
    pub path: Vec<PathSeg>,
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${{{}", self.target)?;
        for s in &self.path {
            write!(f, "{s}")?;
        }
        write!(f, "}}")
    }
}

/// Why a reference could not be followed into an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMissing {
    /// The path walked so far, ending with the step that failed ("orders[3]").
    pub at: String,
    pub why: String,
}

impl Reference {
    /// Follow the path into `output`.
    pub fn walk<'v>(&self, output: &'v Value) -> Result<&'v Value, PathMissing> {
        let mut cur = output;
        let mut at = self.target.clone();
        for seg in &self.path {
            at.push_str(&seg.to_string());
            cur = match (seg, cur) {
                (PathSeg::Key(k), Value::Object(m)) => m.get(k).ok_or_else(|| PathMissing {
                    at: at.clone(),
                    why: format!("no key `{k}` (keys: {})", keys_preview(m)),
                })?,
                (PathSeg::Index(i), Value::Array(a)) => a.get(*i).ok_or_else(|| PathMissing {
                    at: at.clone(),
                    why: format!("index {i} is past the end (length {})", a.len()),
                })?,
                (PathSeg::Key(_), other) => {
                    return Err(PathMissing {
                        at,
                        why: format!("{} has no keys", crate::schema::value_kind(other)),
                    })
                }
                (PathSeg::Index(_), other) => {
                    return Err(PathMissing {
                        at,
                        why: format!("{} cannot be indexed", crate::schema::value_kind(other)),
                    })
                }
            };
        }
        Ok(cur)
    }
}

fn keys_preview(m: &Map<String, Value>) -> String {
    let keys: Vec<&str> = m.keys().take(8).map(String::as_str).collect();
    if keys.is_empty() {
        "none".into()
    } else {
        keys.join(", ")
    }
}

/// A piece of an argument string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Lit(String),
    Ref(Reference),
}

/// A string argument containing references or `$${` escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrTemplate {
    pub pieces: Vec<Piece>,
}

/// A syntax problem in an argument string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefSyntaxError {
    pub message: String,
    /// The `${…}` text at fault, for locating it.
    pub text: String,
}

impl StrTemplate {
    /// Parse `s`; `Ok(None)` when it has no `${` at all (the common case).
    pub fn parse(s: &str) -> Result<Option<StrTemplate>, RefSyntaxError> {
        if !s.contains("${") {
            return Ok(None);
        }
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            if i > 0 && rest.as_bytes()[i - 1] == b'$' {
                // `$${` is a literal `${`.
                lit.push_str(&rest[..i - 1]);
                lit.push_str("${");
                rest = &rest[i + 2..];
                continue;
            }
            lit.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let end = after.find('}').ok_or_else(|| RefSyntaxError {
                message: "unclosed `${`: write `$${` for a literal".into(),
                text: rest[i..].chars().take(40).collect(),
            })?;
            let body = &after[..end];
            let text = format!("${{{body}}}");
            let reference = parse_ref(body).map_err(|message| RefSyntaxError { message, text })?;
            if !lit.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Ref(reference));
            rest = &after[end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Some(StrTemplate { pieces }))
    }

    pub fn refs(&self) -> impl Iterator<Item = &Reference> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Ref(r) => Some(r),
            Piece::Lit(_) => None,
        })
    }

    /// Resolve with `lookup` giving each target's output.
    pub fn resolve<'v>(
        &self,
        lookup: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<Value, ResolveError> {
        if let [Piece::Ref(r)] = self.pieces.as_slice() {
            return Ok(follow(r, lookup)?.clone());
        }
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit(l) => out.push_str(l),
                Piece::Ref(r) => out.push_str(&value_text(follow(r, lookup)?)),
            }
        }
        Ok(Value::String(out))
    }
}

fn follow<'v>(
    r: &Reference,
    lookup: &dyn Fn(&str) -> Option<&'v Value>,
) -> Result<&'v Value, ResolveError> {
    let out = lookup(&r.target).ok_or_else(|| ResolveError::NoOutput(r.target.clone()))?;
    r.walk(out)
        .map_err(|m| ResolveError::Path(r.to_string(), m))
}

/// Why a reference could not be resolved at dispatch time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    NoOutput(String),
    Path(String, PathMissing),
}

/// Parse the inside of `${…}`.
fn parse_ref(body: &str) -> Result<Reference, String> {
    if let Some(name) = body.strip_prefix("env:") {
        return Err(format!(
            "`${{env:{name}}}`: a batch can never read the environment (only the manifest may use ${{env:…}})"
        ));
    }
    let end = body.find(['.', '[']).unwrap_or(body.len());
    let target = &body[..end];
    if target.is_empty() {
        return Err(format!("`${{{body}}}` names no call"));
    }
    crate::ids::check_id("call id", target).map_err(|e| format!("`${{{body}}}`: {e}"))?;
    let mut path = Vec::new();
    let mut rest = &body[end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let e = r.find(['.', '[']).unwrap_or(r.len());
            if e == 0 {
                return Err(format!("`${{{body}}}` has an empty key"));
            }
            path.push(PathSeg::Key(r[..e].to_string()));
            rest = &r[e..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let e = r
                .find(']')
                .ok_or_else(|| format!("`${{{body}}}` has an unclosed `[`"))?;
            let idx: usize = r[..e]
                .trim()
                .parse()
                .map_err(|_| format!("`${{{body}}}`: `[{}]` is not an array index", &r[..e]))?;
            path.push(PathSeg::Index(idx));
            rest = &r[e + 1..];
        } else {
            return Err(format!(
                "`${{{body}}}` is not a reference (write `${{id.key[0]}}`)"
            ));
        }
    }
    Ok(Reference {
        target: target.to_string(),
        path,
    })
}

/// Where a templated string sits inside the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    pub pointer: Vec<PathSeg>,
    pub template: StrTemplate,
}

impl Hole {
    /// The argument's name as a user would write it: `order_id`, `items[0].id`.
    pub fn arg_name(&self) -> String {
        let mut s = String::new();
        for (i, seg) in self.pointer.iter().enumerate() {
            match seg {
                PathSeg::Key(k) if i == 0 => s.push_str(k),
                other => s.push_str(&other.to_string()),
            }
        }
        s
    }
}

/// A call's arguments: the literal object and the holes to fill at dispatch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    pub value: Map<String, Value>,
    pub holes: Vec<Hole>,
}

impl Args {
    /// Compile an argument object, returning every syntax problem.
    pub fn compile(value: Map<String, Value>) -> (Args, Vec<RefSyntaxError>) {
        let mut holes = Vec::new();
        let mut errors = Vec::new();
        let mut pointer = Vec::new();
        for (k, v) in &value {
            pointer.push(PathSeg::Key(k.clone()));
            scan(v, &mut pointer, &mut holes, &mut errors);
            pointer.pop();
        }
        (Args { value, holes }, errors)
    }

    /// Arguments that are data: no holes, nothing in them is a reference.
    pub fn literal(value: Map<String, Value>) -> Args {
        Args {
            value,
            holes: Vec::new(),
        }
    }

    /// Every reference, with the argument it sits in.
    pub fn refs(&self) -> impl Iterator<Item = (&Hole, &Reference)> {
        self.holes
            .iter()
            .flat_map(|h| h.template.refs().map(move |r| (h, r)))
    }

    /// The arguments with every hole filled.
    pub fn resolve<'v>(
        &self,
        lookup: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<Cow<'_, Map<String, Value>>, (String, ResolveError)> {
        if self.holes.is_empty() {
            return Ok(Cow::Borrowed(&self.value));
        }
        let mut out = self.value.clone();
        for h in &self.holes {
            let v = h.template.resolve(lookup).map_err(|e| (h.arg_name(), e))?;
            if let Some(slot) = pointer_mut(&mut out, &h.pointer) {
                *slot = v;
            }
        }
        Ok(Cow::Owned(out))
    }

    /// The arguments with holes left as written (for `plan`, and for literal schema checks).
    pub fn literal_without_holes(&self) -> Map<String, Value> {
        let mut out = self.value.clone();
        for h in &self.holes {
            if h.template.refs().next().is_none() {
                if let Ok(v) = h.template.resolve(&|_| None) {
                    if let Some(slot) = pointer_mut(&mut out, &h.pointer) {
                        *slot = v;
                    }
                }
            }
        }
        out
    }

    /// Top-level argument names whose value contains a reference.
    pub fn referenced_args(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for h in &self.holes {
            if h.template.refs().next().is_some() {
                if let Some(PathSeg::Key(k)) = h.pointer.first() {
                    if !out.contains(k) {
                        out.push(k.clone());
                    }
                }
            }
        }
        out
    }
}

fn scan(
    v: &Value,
    pointer: &mut Vec<PathSeg>,
    holes: &mut Vec<Hole>,
    errors: &mut Vec<RefSyntaxError>,
) {
    match v {
        Value::String(s) => match StrTemplate::parse(s) {
            Ok(Some(template)) => holes.push(Hole {
                pointer: pointer.clone(),
                template,
            }),
            Ok(None) => {}
            Err(e) => errors.push(e),
        },
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointer.push(PathSeg::Index(i));
                scan(x, pointer, holes, errors);
                pointer.pop();
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                pointer.push(PathSeg::Key(k.clone()));
                scan(x, pointer, holes, errors);
                pointer.pop();
            }
        }
        _ => {}
    }
}

fn pointer_mut<'a>(root: &'a mut Map<String, Value>, pointer: &[PathSeg]) -> Option<&'a mut Value> {
    let (first, rest) = pointer.split_first()?;
    let PathSeg::Key(k) = first else { return None };
    let mut cur = root.get_mut(k)?;
    for seg in rest {
        cur = match (seg, cur) {
            (PathSeg::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (PathSeg::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_refs_and_escapes() {
        let t = StrTemplate::parse("${orders.orders[0].id}")
            .unwrap()
            .unwrap();
        assert_eq!(
            t.pieces,
            vec![Piece::Ref(Reference {
                target: "orders".into(),
                path: vec![
                    PathSeg::Key("orders".into()),
                    PathSeg::Index(0),
                    PathSeg::Key("id".into())
                ],
            })]
        );
        let t = StrTemplate::parse("cost $${x} for ${a}").unwrap().unwrap();
        assert_eq!(t.pieces[0], Piece::Lit("cost ${x} for ".into()));
        assert!(StrTemplate::parse("plain").unwrap().is_none());
    }

    #[test]
    fn rejects_env_and_malformed_refs() {
        let e = StrTemplate::parse("${env:HOME}").unwrap_err();
        assert!(e.message.contains("never read the environment"), "{e:?}");
        assert!(StrTemplate::parse("${a.b").is_err());
        assert!(StrTemplate::parse("${a[x]}").is_err());
        assert!(StrTemplate::parse("${}").is_err());
        assert!(StrTemplate::parse("${a..b}").is_err());
    }

    #[test]
    fn whole_ref_is_typed_inner_ref_is_text() {
        let out = json!({"orders": [{"id": "o-17", "n": 3}]});
        let lookup = |id: &str| (id == "orders").then_some(&out);
        let (args, errs) = Args::compile(
            json!({"a": "${orders.orders[0].n}", "b": "id=${orders.orders[0].id}", "c": [ "${orders}" ]})
                .as_object()
                .unwrap()
                .clone(),
        );
        assert!(errs.is_empty());
        let r = args.resolve(&lookup).unwrap();
        assert_eq!(r["a"], json!(3));
        assert_eq!(r["b"], json!("id=o-17"));
        assert_eq!(r["c"][0], out);
    }

    #[test]
    fn missing_paths_name_the_argument_and_path() {
        let out = json!({"orders": []});
        let lookup = |_: &str| Some(&out);
        let (args, _) = Args::compile(
            json!({"order_id": "${orders.orders[0].id}"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let (arg, err) = args.resolve(&lookup).unwrap_err();
        assert_eq!(arg, "order_id");
        match err {
            ResolveError::Path(r, m) => {
                assert_eq!(r, "${orders.orders[0].id}");
                assert_eq!(m.at, "orders.orders[0]");
                assert!(m.why.contains("past the end"));
            }
            other => panic!("{other:?}"),
        }
    }
}
