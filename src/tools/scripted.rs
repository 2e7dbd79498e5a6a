//! The `scripted` kind: deterministic behaviour with no process and no network, for examples,
//! tests and benchmarks. `latency`, `output` (placeholders `{arg}` in strings), `fail`,
//! `hang`, overridden per call by the reserved arguments `_latency`, `_output`, `_fail`,
//! `_hang`, and `_fail_attempts: N` (the first N attempts fail transiently, to exercise retries).
//! `kv = "get"` / `kv = "put"` reads or writes the run's in-memory key-value store
//! ([`ToolContext::kv`]): `get` answers the value at argument `key` (`null` when unset), `put`
//! sets it to argument `value` and answers the value it replaced — a stateful backend with no
//! process, for examples and for the differential test of the scheduler.

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
    pub kv: Option<KvOp>,
}

/// What a `kv` tool does to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    Get,
    Put,
}

impl Kind for ScriptedSpec {
    const NAME: &'static str = "scripted";
    const KEYS: &'static [&'static str] = &["latency", "output", "fail", "hang", "kv"];
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
            kv: match r.string(t, "kv", ctx) {
                Some((s, _)) if s == "get" => Some(KvOp::Get),
                Some((s, _)) if s == "put" => Some(KvOp::Put),
                Some((s, span)) => {
                    let msg = format!("`kv` in {ctx} is `{s}`; use \"get\" or \"put\"");
                    r.error(span, msg, None);
                    None
                }
                None => None,
            },
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
            "kv": self.kv.map(|k| if k == KvOp::Get { "get" } else { "put" }),
        })
    }

    fn estimate(&self) -> Option<Duration> {
        (!self.hang).then_some(self.latency)
    }

    fn runner(&self, _tool: &Tool, ctx: &ToolContext) -> Result<ScriptedTool, String> {
        Ok(ScriptedTool {
            spec: self.clone(),
            kv: ctx.kv.clone(),
        })
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
    kv: super::invoke::KvStore,
}

impl ScriptedTool {
    pub fn new(spec: ScriptedSpec) -> ScriptedTool {
        ScriptedTool {
            spec,
            kv: Default::default(),
        }
    }

    /// A `kv` tool's effect on the store: the value read, or the value a put replaced.
    fn kv(&self, op: KvOp, args: &Map<String, Value>) -> Value {
        let key = match args.get("key") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let mut store = self.kv.lock().unwrap_or_else(|e| e.into_inner());
        match op {
            KvOp::Get => store.get(&key).cloned().unwrap_or(Value::Null),
            KvOp::Put => {
                let value = args.get("value").cloned().unwrap_or(Value::Null);
                store.insert(key, value).unwrap_or(Value::Null)
            }
        }
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
        if let Some(op) = self.spec.kv {
            return Ok(self.kv(op, args));
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
