//! The `scripted` kind: deterministic behaviour with no process and no network, for examples,
//! tests and benchmarks. `latency`, `output` (placeholders `{arg}` in strings), `fail`,
//! `hang`, overridden per call by the reserved arguments `_latency`, `_output`, `_fail`,
//! `_hang`, and `_fail_attempts: N` (the first N attempts fail transiently, to exercise retries).

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Failure, Invocation, Stop};
use crate::manifest::ScriptedSpec;
use crate::template::Template;

pub struct ScriptedTool {
    spec: ScriptedSpec,
}

impl ScriptedTool {
    pub fn new(spec: ScriptedSpec) -> ScriptedTool {
        ScriptedTool { spec }
    }

    pub async fn invoke(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let args = inv.args();
        let latency = match args.get("_latency") {
            Some(Value::String(s)) => crate::duration::parse(s)
                .map_err(|e| Failure::failed("guardrail", format!("_latency: {e}")))?,
            Some(Value::Number(n)) => Duration::from_millis(n.as_u64().unwrap_or(0)),
            _ => self.spec.latency,
        };
        let hang = args
            .get("_hang")
            .and_then(Value::as_bool)
            .unwrap_or(self.spec.hang);
        if hang {
            stop.stopped().await;
            return Err(Failure::Stopped);
        }
        if !latency.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(latency) => {}
                _ = stop.stopped() => return Err(Failure::Stopped),
            }
        }
        let fail_attempts = args
            .get("_fail_attempts")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if u64::from(inv.attempt) <= fail_attempts {
            return Err(Failure::Failed {
                kind: "tool_error",
                message: format!("scripted transient failure (attempt {})", inv.attempt),
                transient: true,
                retry_after: None,
            });
        }
        let fail = match args.get("_fail") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Bool(true)) => Some("scripted failure".into()),
            Some(Value::Bool(false)) => None,
            _ => self.spec.fail.clone(),
        };
        if let Some(message) = fail {
            return Err(Failure::failed("tool_error", message));
        }
        Ok(match args.get("_output") {
            Some(v) => v.clone(),
            None => match &self.spec.output {
                Some(v) => fill(v, args),
                None => Value::Object(
                    args.iter()
                        .filter(|(k, _)| !k.starts_with('_'))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
            },
        })
    }
}

/// Replace `{arg}` placeholders inside the strings of an output value.
fn fill(v: &Value, args: &Map<String, Value>) -> Value {
    match v {
        Value::String(s) if s.contains('{') => match Template::parse(s, true) {
            Ok(t) if t.placeholders().next().is_some() && !t.has_secret() => {
                // A string that is exactly one placeholder keeps the argument's type.
                if let [crate::template::Segment::Arg(a)] = t.segments.as_slice() {
                    if let Some(x) = args.get(a) {
                        return x.clone();
                    }
                }
                t.render(args, &|s| s.to_string())
                    .map_or_else(|_| v.clone(), Value::String)
            }
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, args)).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), fill(x, args))).collect())
        }
        other => other.clone(),
    }
}
