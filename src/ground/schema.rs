//! Argument schemas (`[tools.NAME.args]`): the guardrail checked before a call is dispatched.
//!
//! A schema lists the arguments a tool takes with a type and simple bounds. Checking returns
//! every problem, each naming the argument, so a literal argument that fails is a validation
//! error before anything runs and one that fails after a reference resolves is a `guardrail`
//! result for that call alone.

use serde_json::{Map, Value};

/// JSON types an argument may be declared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
    Any,
}

impl ArgType {
    pub fn parse(s: &str) -> Option<ArgType> {
        Some(match s {
            "string" => ArgType::String,
            "integer" => ArgType::Integer,
            "number" => ArgType::Number,
            "boolean" | "bool" => ArgType::Boolean,
            "object" => ArgType::Object,
            "array" => ArgType::Array,
            "any" => ArgType::Any,
            _ => return None,
        })
    }

    pub const NAMES: [&'static str; 7] = [
        "string", "integer", "number", "boolean", "object", "array", "any",
    ];

    fn accepts(self, v: &Value) -> bool {
        match self {
            ArgType::String => v.is_string(),
            ArgType::Integer => v.is_i64() || v.is_u64(),
            ArgType::Number => v.is_number(),
            ArgType::Boolean => v.is_boolean(),
            ArgType::Object => v.is_object(),
            ArgType::Array => v.is_array(),
            ArgType::Any => true,
        }
    }
}

/// One declared argument.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ArgSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ArgType,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    #[serde(rename = "enum", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An array's elements (`items = { type = "string" }`): each is checked against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<Box<ArgSpec>>,
    /// An object's fields (`properties = { city = { type = "string", required = true } }`):
    /// checked like a tool's arguments (required ones present, no others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub properties: Option<Vec<ArgSpec>>,
}

/// The whole schema of a tool's arguments.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ArgSchema {
    pub args: Vec<ArgSpec>,
}

/// One way arguments fail a schema: the argument and what is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The argument's name.
    pub arg: String,
    pub kind: ProblemKind,
}

/// What is wrong with an argument.
#[derive(Debug, Clone, PartialEq)]
pub enum ProblemKind {
    /// Required and absent.
    Missing,
    /// Not in the schema; `suggestion` is a "did you mean" for a near name.
    Unknown {
        suggestion: Option<String>,
    },
    /// The wrong JSON type (`found` is a phrase like "a string").
    WrongType {
        want: ArgType,
        found: &'static str,
    },
    BelowMin {
        value: Value,
        min: f64,
    },
    AboveMax {
        value: Value,
        max: f64,
    },
    TooLong {
        len: u64,
        max: u64,
    },
    TooShort {
        len: u64,
        min: u64,
    },
    NotOneOf {
        value: Value,
        allowed: Vec<Value>,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.arg;
        match &self.kind {
            ProblemKind::Missing => write!(f, "required argument `{name}` is missing"),
            ProblemKind::Unknown { suggestion } => {
                write!(f, "unknown argument `{name}`")?;
                match suggestion {
                    Some(h) => write!(f, " ({h})"),
                    None => Ok(()),
                }
            }
            ProblemKind::WrongType { want, found } => write!(
                f,
                "argument `{name}` should be {}, found {found}",
                type_phrase(*want)
            ),
            ProblemKind::BelowMin { value, min } => {
                write!(f, "argument `{name}` is {value}, below its minimum {min}")
            }
            ProblemKind::AboveMax { value, max } => {
                write!(f, "argument `{name}` is {value}, above its maximum {max}")
            }
            ProblemKind::TooLong { len, max } => write!(
                f,
                "argument `{name}` has length {len}, over its max_length {max}"
            ),
            ProblemKind::TooShort { len, min } => write!(
                f,
                "argument `{name}` has length {len}, under its min_length {min}"
            ),
            ProblemKind::NotOneOf { value, allowed } => {
                let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
                write!(
                    f,
                    "argument `{name}` is {value}, not one of {}",
                    allowed.join(", ")
                )
            }
        }
    }
}

impl ArgSchema {
    /// Every problem with `args`; empty when they conform. `extra` names arguments that are
    /// always allowed (a kind's reserved ones).
    pub fn check(&self, args: &Map<String, Value>, extra: &[&str]) -> Vec<Problem> {
        let mut problems = Vec::new();
        check_fields(&self.args, args, extra, "", &mut problems);
        problems
    }
}

impl ArgSchema {
    /// The arguments as a JSON Schema object, as models are offered them. `strict`: OpenAI's
    /// strict form — every field listed in `required`, an optional one as nullable, no length
    /// keywords (the guardrail still checks them before dispatch).
    pub fn json_schema(&self, strict: bool) -> Value {
        object_schema(&self.args, strict)
    }

    /// Why the schema cannot be offered in OpenAI's strict mode (`None`: it can).
    pub fn strict_refusal(&self) -> Option<String> {
        self.args.iter().find_map(ArgSpec::strict_refusal)
    }
}

fn object_schema(fields: &[ArgSpec], strict: bool) -> Value {
    let mut props = Map::new();
    for f in fields {
        props.insert(f.name.clone(), f.json_schema(strict, f.required));
    }
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| strict || f.required)
        .map(|f| f.name.as_str())
        .collect();
    serde_json::json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

/// A bound as JSON: a whole number for an integer argument (`1`, not `1.0`).
fn bound(ty: ArgType, n: f64) -> Value {
    if ty == ArgType::Integer && n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}

impl ArgSpec {
    /// This argument as JSON Schema. `present`: it is always sent (required, or not strict).
    fn json_schema(&self, strict: bool, present: bool) -> Value {
        let mut m = Map::new();
        let name = match self.ty {
            ArgType::Any => None,
            t => serde_json::to_value(t).ok(),
        };
        if let Some(t) = name {
            let nullable = strict && !present;
            m.insert(
                "type".into(),
                if nullable {
                    serde_json::json!([t, "null"])
                } else {
                    t
                },
            );
        }
        if let Some(d) = &self.description {
            m.insert("description".into(), Value::from(d.clone()));
        }
        if let Some(e) = &self.one_of {
            let mut e = e.clone();
            if strict && !present {
                e.push(Value::Null);
            }
            m.insert("enum".into(), Value::Array(e));
        }
        if let Some(n) = self.min {
            m.insert("minimum".into(), bound(self.ty, n));
        }
        if let Some(n) = self.max {
            m.insert("maximum".into(), bound(self.ty, n));
        }
        let (lo, hi) = match self.ty {
            ArgType::Array => ("minItems", "maxItems"),
            _ => ("minLength", "maxLength"),
        };
        if !strict || self.ty == ArgType::Array {
            if let Some(n) = self.min_length {
                m.insert(lo.into(), Value::from(n));
            }
            if let Some(n) = self.max_length {
                m.insert(hi.into(), Value::from(n));
            }
        }
        if let Some(item) = &self.items {
            m.insert("items".into(), item.json_schema(strict, true));
        }
        if let Some(fields) = &self.properties {
            if let Value::Object(o) = object_schema(fields, strict) {
                for (k, v) in o {
                    if k != "type" {
                        m.insert(k, v);
                    }
                }
            }
        }
        Value::Object(m)
    }

    fn strict_refusal(&self) -> Option<String> {
        match (self.ty, &self.properties) {
            (ArgType::Any, _) => Some(format!("`{}` has no type", self.name)),
            (ArgType::Object, None) => {
                Some(format!("object `{}` declares no properties", self.name))
            }
            (ArgType::Array, _) if self.items.is_none() => {
                Some(format!("array `{}` declares no items", self.name))
            }
            (_, Some(fields)) => fields.iter().find_map(ArgSpec::strict_refusal),
            _ => self.items.as_ref().and_then(|i| i.strict_refusal()),
        }
    }
}

/// The fields `specs` of an object `obj` whose path is `at` (`""` for a tool's arguments).
/// An optional field sent as `null` counts as absent (OpenAI's strict mode sends optional
/// fields so).
fn check_fields(
    specs: &[ArgSpec],
    obj: &Map<String, Value>,
    extra: &[&str],
    at: &str,
    problems: &mut Vec<Problem>,
) {
    let path = |name: &str| {
        if at.is_empty() {
            name.to_string()
        } else {
            format!("{at}.{name}")
        }
    };
    for spec in specs {
        match obj.get(&spec.name) {
            None if spec.required => problems.push(Problem {
                arg: path(&spec.name),
                kind: ProblemKind::Missing,
            }),
            Some(Value::Null) if !spec.required => {}
            None => {}
            Some(v) => spec.check_at(v, &path(&spec.name), problems),
        }
    }
    for key in obj.keys() {
        if extra.contains(&key.as_str()) || specs.iter().any(|a| &a.name == key) {
            continue;
        }
        let suggestion = crate::error::suggest(key, specs.iter().map(|a| a.name.as_str()));
        problems.push(Problem {
            arg: path(key),
            kind: ProblemKind::Unknown { suggestion },
        });
    }
}

impl ArgSpec {
    /// A spec with only a name and a type.
    pub fn new(name: &str, ty: ArgType) -> ArgSpec {
        ArgSpec {
            name: name.to_string(),
            ty,
            required: false,
            min: None,
            max: None,
            min_length: None,
            max_length: None,
            one_of: None,
            description: None,
            items: None,
            properties: None,
        }
    }

    /// Check value `v` of the argument at path `at` (`lines[2].qty`).
    fn check_at(&self, v: &Value, at: &str, problems: &mut Vec<Problem>) {
        let before = problems.len();
        self.check_here(v, at, problems);
        if problems.len() > before {
            return;
        }
        match (v, &self.items, &self.properties) {
            (Value::Array(a), Some(item), _) => {
                for (i, x) in a.iter().enumerate() {
                    item.check_at(x, &format!("{at}[{i}]"), problems);
                }
            }
            (Value::Object(m), _, Some(fields)) => check_fields(fields, m, &[], at, problems),
            _ => {}
        }
    }

    fn check_here(&self, v: &Value, at: &str, problems: &mut Vec<Problem>) {
        let mut push = |kind| {
            problems.push(Problem {
                arg: at.to_string(),
                kind,
            })
        };
        if !self.ty.accepts(v) {
            push(ProblemKind::WrongType {
                want: self.ty,
                found: value_kind(v),
            });
            return;
        }
        if let Some(n) = v.as_f64() {
            if let Some(min) = self.min.filter(|m| n < *m) {
                push(ProblemKind::BelowMin {
                    value: v.clone(),
                    min,
                });
            }
            if let Some(max) = self.max.filter(|m| n > *m) {
                push(ProblemKind::AboveMax {
                    value: v.clone(),
                    max,
                });
            }
        }
        let len = match v {
            Value::String(s) => Some(s.chars().count() as u64),
            Value::Array(a) => Some(a.len() as u64),
            _ => None,
        };
        if let Some(len) = len {
            if let Some(max) = self.max_length.filter(|m| len > *m) {
                push(ProblemKind::TooLong { len, max });
            }
            if let Some(min) = self.min_length.filter(|m| len < *m) {
                push(ProblemKind::TooShort { len, min });
            }
        }
        if let Some(one_of) = &self.one_of {
            if !one_of.contains(v) {
                push(ProblemKind::NotOneOf {
                    value: v.clone(),
                    allowed: one_of.clone(),
                });
            }
        }
    }
}

fn type_phrase(t: ArgType) -> &'static str {
    match t {
        ArgType::String => "a string",
        ArgType::Integer => "an integer",
        ArgType::Number => "a number",
        ArgType::Boolean => "a boolean",
        ArgType::Object => "an object",
        ArgType::Array => "an array",
        ArgType::Any => "anything",
    }
}

/// A short name for a JSON value's type, for messages.
pub(crate) fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> ArgSchema {
        ArgSchema {
            args: vec![
                ArgSpec {
                    name: "query".into(),
                    ty: ArgType::String,
                    required: true,
                    min: None,
                    max: None,
                    min_length: None,
                    max_length: Some(5),
                    one_of: None,
                    description: None,
                    items: None,
                    properties: None,
                },
                ArgSpec {
                    name: "limit".into(),
                    ty: ArgType::Integer,
                    required: false,
                    min: Some(1.0),
                    max: Some(50.0),
                    min_length: None,
                    max_length: None,
                    one_of: None,
                    description: None,
                    items: None,
                    properties: None,
                },
            ],
        }
    }

    fn check(v: Value) -> Vec<String> {
        schema()
            .check(v.as_object().unwrap(), &[])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn accepts_conforming_args() {
        assert!(check(json!({"query": "abc", "limit": 3})).is_empty());
    }

    #[test]
    fn reports_every_problem() {
        let p = check(json!({"limit": 99, "querry": "x"}));
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("required argument `query` is missing"));
        assert!(p[1].contains("above its maximum 50"));
        assert!(p[2].contains("unknown argument `querry` (did you mean `query`?)"));
    }

    fn nested() -> ArgSchema {
        let mut sku = ArgSpec::new("sku", ArgType::String);
        sku.required = true;
        let mut qty = ArgSpec::new("qty", ArgType::Integer);
        qty.min = Some(1.0);
        let mut line = ArgSpec::new("lines[]", ArgType::Object);
        line.properties = Some(vec![sku, qty]);
        let mut lines = ArgSpec::new("lines", ArgType::Array);
        lines.required = true;
        lines.max_length = Some(3);
        lines.items = Some(Box::new(line));
        let mut tags = ArgSpec::new("tags", ArgType::Array);
        tags.items = Some(Box::new(ArgSpec::new("tags[]", ArgType::String)));
        ArgSchema {
            args: vec![lines, tags],
        }
    }

    #[test]
    fn nested_items_and_properties_are_checked_with_their_paths() {
        let s = nested();
        let ok = json!({"lines": [{"sku": "a", "qty": 2}, {"sku": "b"}], "tags": ["x"], });
        assert!(s.check(ok.as_object().unwrap(), &[]).is_empty());
        let bad = json!({"lines": [{"qty": 0}, {"sku": 3, "colour": "red"}], "tags": ["x", 7]});
        let p: Vec<String> = s
            .check(bad.as_object().unwrap(), &[])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            p,
            [
                "required argument `lines[0].sku` is missing",
                "argument `lines[0].qty` is 0, below its minimum 1",
                "argument `lines[1].sku` should be a string, found an integer",
                "unknown argument `lines[1].colour`",
                "argument `tags[1]` should be a string, found an integer",
            ],
            "{p:?}"
        );
        let long = json!({"lines": [{"sku": "a"}, {"sku": "a"}, {"sku": "a"}, {"sku": "a"}]});
        assert_eq!(s.check(long.as_object().unwrap(), &[]).len(), 1);
        // An optional field sent as null (OpenAI's strict mode) is absent.
        let nulls = json!({"lines": [{"sku": "a", "qty": null}], "tags": null});
        assert!(s.check(nulls.as_object().unwrap(), &[]).is_empty());
    }

    #[test]
    fn the_json_schema_has_typed_bounds_and_nested_shapes() {
        let v = schema().json_schema(false);
        assert_eq!(
            v,
            json!({"type": "object", "additionalProperties": false, "required": ["query"],
                "properties": {"query": {"type": "string", "maxLength": 5},
                               "limit": {"type": "integer", "minimum": 1, "maximum": 50}}})
        );
        assert!(
            v.to_string().contains("\"minimum\":1,"),
            "an integer bound is written 1: {v}"
        );
        let n = nested().json_schema(true);
        assert_eq!(n["required"], json!(["lines", "tags"]));
        assert_eq!(n["properties"]["tags"]["type"], json!(["array", "null"]));
        assert_eq!(n["properties"]["lines"]["maxItems"], 3);
        let line = &n["properties"]["lines"]["items"];
        assert_eq!(line["required"], json!(["sku", "qty"]));
        assert_eq!(
            line["properties"]["qty"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(line["additionalProperties"], false);
        assert_eq!(nested().strict_refusal(), None);
        assert!(schema().strict_refusal().is_none());
        let any = ArgSchema {
            args: vec![ArgSpec::new("x", ArgType::Any)],
        };
        assert_eq!(any.strict_refusal().as_deref(), Some("`x` has no type"));
    }

    #[test]
    fn checks_types_and_lengths() {
        let p = check(json!({"query": "toolong", "limit": "3"}));
        assert!(p[0].contains("max_length 5"), "{p:?}");
        assert!(
            p[1].contains("should be an integer, found a string"),
            "{p:?}"
        );
    }
}
