//! The `scripted` kind: deterministic behaviour with no process and no network, for examples,
//! tests and benchmarks. `latency`, `output` (placeholders `{arg}` in strings), `fail`,
//! `hang`, overridden per call by the reserved arguments `_latency`, `_output`, `_fail`,
//! `_hang`, and `_fail_attempts: N` (the first N attempts fail transiently, to exercise retries).

use std::time::Duration;

use serde_json::{Map, Value};

use std::future::Future;

use serde_json::json;
use toml::de::DeTable;

use super::{Failure, Invocation, Invoke, Kind, Site, Stop, ToolContext};
use crate::events::ErrorKind;
use crate::manifest::reader::{de_to_json, Reader};
use crate::manifest::Tool;
use crate::template::Template;

/// `kind = "scripted"`: deterministic behaviour, no process and no network.
#[derive(Debug, Clone)]
pub struct ScriptedSpec {
    pub latency: Duration,
    pub output: Option<Value>,
    pub fail: Option<String>,
    pub hang: bool,
}

impl Kind for ScriptedSpec {
    const NAME: &'static str = "scripted";
    const KEYS: &'static [&'static str] = &["latency", "output", "fail", "hang"];
    const RESERVED: &'static [&'static str] =
        &["_latency", "_fail", "_hang", "_output", "_fail_attempts"];
    const INLINE: bool = true;
    type Runner = ScriptedTool;

    fn parse(r: &mut Reader<'_>, t: &DeTable<'_>, site: &Site<'_>) -> ScriptedSpec {
        let ctx = site.ctx;
        ScriptedSpec {
            latency: r
                .duration(t, "latency", ctx)
                .map_or(Duration::ZERO, |(d, _)| d),
            output: Reader::entry(t, "output").map(|(_, v)| de_to_json(v.get_ref())),
            fail: r.string(t, "fail", ctx).map(|(s, _)| s),
            hang: r.boolean(t, "hang", ctx).unwrap_or(false),
        }
    }

    fn target(&self) -> String {
        if self.hang {
            "scripted (hangs)".into()
        } else {
            format!("scripted {}", crate::duration::format(self.latency))
        }
    }

    fn settings(&self) -> Value {
        json!({
            "latency": crate::duration::format(self.latency),
            "output": self.output,
            "fail": self.fail,
            "hang": self.hang,
        })
    }

    fn estimate(&self) -> Option<Duration> {
        (!self.hang).then_some(self.latency)
    }

    fn runner(&self, _tool: &Tool, _ctx: &ToolContext) -> Result<ScriptedTool, String> {
        Ok(ScriptedTool::new(self.clone()))
    }
}

impl Invoke for ScriptedTool {
    fn invoke<'a>(
        &'a self,
        inv: &'a Invocation,
        stop: &'a mut Stop,
    ) -> impl Future<Output = Result<Value, Failure>> + Send + 'a {
        // Not boxed: small, and often complete at the first poll (see `Kind::INLINE`).
        self.call(inv, stop)
    }
}

pub struct ScriptedTool {
    spec: ScriptedSpec,
}

impl ScriptedTool {
    pub fn new(spec: ScriptedSpec) -> ScriptedTool {
        ScriptedTool { spec }
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let args = inv.args();
        let latency = match args.get("_latency") {
            Some(Value::String(s)) => crate::duration::parse(s)
                .map_err(|e| Failure::failed(ErrorKind::Guardrail, format!("_latency: {e}")))?,
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
                kind: ErrorKind::ToolError,
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
            return Err(Failure::failed(ErrorKind::ToolError, message));
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
