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
        for spec in &self.args {
            match args.get(&spec.name) {
                None if spec.required => problems.push(Problem {
                    arg: spec.name.clone(),
                    kind: ProblemKind::Missing,
                }),
                None => {}
                Some(v) => spec.check(v, &mut problems),
            }
        }
        for key in args.keys() {
            if extra.contains(&key.as_str()) || self.args.iter().any(|a| &a.name == key) {
                continue;
            }
            let suggestion = crate::error::suggest(key, self.args.iter().map(|a| a.name.as_str()));
            problems.push(Problem {
                arg: key.clone(),
                kind: ProblemKind::Unknown { suggestion },
            });
        }
        problems
    }
}

impl ArgSpec {
    fn check(&self, v: &Value, problems: &mut Vec<Problem>) {
        let mut push = |kind| {
            problems.push(Problem {
                arg: self.name.clone(),
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
pub fn value_kind(v: &Value) -> &'static str {
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
