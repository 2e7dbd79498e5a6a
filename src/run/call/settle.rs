//! Settling a write cut off in flight (`verify = "TOOL"`): instead of leaving it
//! `indeterminate` for a person, its probe — a read of the manifest — is asked, with the
//! write's idempotency key and arguments, whether the effect landed.
//!
//! - *Applied*: the probe's output is the write's result (`ok`, `settled: "applied"`).
//! - *Not applied*: it provably never landed, so it is sent again once with the same key
//!   (`settled: "not_applied"`, and whatever the resend gets) — unless resending is off
//!   (`resend = false`, `--no-resend`) or the run is ending, when it is reported `not_applied`
//!   (a resumed journal sends it).
//! - *Unknown*: the probe failed, timed out or answered nothing readable; the write keeps its
//!   status (`indeterminate`, `timed_out`, `cancelled`) with the probe's error beside it.
//!
//! The probe runs inside the write's job, while the write still holds its lanes and
//! backends: no later call on them overtakes it. It has its own timeout (the probe tool's,
//! else the write's, else [`PROBE_TIMEOUT`]); a run that is ending lets it finish, and only a
//! forced stop (a second Ctrl-C) cuts it short.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::Job;
use crate::events::{CallResult, ErrorInfo, ErrorKind, Settled, Status};
use crate::manifest::Verify;
use crate::run::store::Lease;
use crate::tools::{Failure, Invocation, Stop, StopLevel, ToolImpl};

/// How long a probe may take when neither it nor its write has a timeout.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A write's probe, ready to call.
pub(crate) struct Probe {
    pub tool: Arc<ToolImpl>,
    pub verify: Verify,
    /// The argument names the probe declares (`None`: it declares no schema).
    pub declared: Option<Vec<String>>,
    pub timeout: Duration,
    /// Whether a write it finds not applied is sent again (`resend`, and no `--no-resend`).
    pub resend: bool,
}

/// What a probe said.
enum Said {
    Applied(Value),
    NotApplied,
    Unknown(String),
}

/// Whether `r` is a write cut off in flight: sent, and ended without an answer.
pub(super) fn cut_off(r: &CallResult) -> bool {
    r.attempts > 0
        && match r.status {
            Status::Indeterminate | Status::TimedOut => true,
            Status::Cancelled => r
                .error
                .as_ref()
                .is_some_and(|e| e.kind != ErrorKind::Guardrail),
            _ => false,
        }
}

impl Job {
    /// The write was cut off: ask its probe, and settle `result` by the answer (sending the
    /// write again once when it never landed and that is allowed).
    pub(super) async fn settle(
        &mut self,
        probe: &Probe,
        result: &mut CallResult,
        leases: &[(usize, Lease)],
        dispatched: Instant,
    ) -> (bool, u32) {
        match self.ask(probe).await {
            Said::Applied(output) => applied(result, output),
            Said::Unknown(why) => unknown(result, &probe.verify.tool, &why),
            Said::NotApplied if probe.resend && !self.ending() => {
                return self.resend(probe, result, leases, dispatched).await;
            }
            Said::NotApplied => not_applied(result, &probe.verify.tool, self.held_back()),
        }
        (false, 0)
    }

    /// A resumed write that was in flight when its run stopped: its probe says first whether
    /// to send it. `true`: send it (it never landed); `false`: `result` is settled.
    pub(super) async fn settle_first(&mut self, probe: &Probe, result: &mut CallResult) -> bool {
        let said = self.ask(probe).await;
        result.attempts = 1;
        match said {
            Said::Applied(output) => applied(result, output),
            Said::NotApplied if probe.resend => {
                result.settled = Some(Settled::NotApplied);
                return true;
            }
            Said::NotApplied => not_applied(result, &probe.verify.tool, Held::Off),
            Said::Unknown(why) => {
                result.status = Status::Indeterminate;
                result.error = Some(ErrorInfo {
                    kind: ErrorKind::RunEnded,
                    message: "cancelled in flight: the side effect may have landed (in flight when the journaled run stopped)".into(),
                });
                unknown(result, &probe.verify.tool, &why);
            }
        }
        false
    }

    /// Send the write again, once, with the same key; a resend cut off again is asked about
    /// once more, and never sent a third time.
    async fn resend(
        &mut self,
        probe: &Probe,
        result: &mut CallResult,
        leases: &[(usize, Lease)],
        dispatched: Instant,
    ) -> (bool, u32) {
        let before = result.attempts;
        result.error = None;
        self.retries = 0;
        let (ceiling_hit, rejections) = self.attempts(result, leases, dispatched).await;
        result.attempts += before;
        if cut_off(result) {
            match self.ask(probe).await {
                Said::Applied(output) => applied(result, output),
                Said::NotApplied => not_applied(result, &probe.verify.tool, Held::Resent),
                Said::Unknown(why) => unknown(result, &probe.verify.tool, &why),
            }
        }
        result.settled.get_or_insert(Settled::NotApplied);
        (ceiling_hit, rejections)
    }

    /// Why a write that never landed is not sent now: the run is ending, or resending is off.
    fn held_back(&self) -> Held {
        if self.ending() {
            Held::Ending
        } else {
            Held::Off
        }
    }

    /// Whether the run is ending (nothing is sent again then: a resumed journal sends it).
    fn ending(&self) -> bool {
        *self.stop_rx.borrow() >= StopLevel::Graceful
    }

    /// Call the probe with the write's key and arguments.
    async fn ask(&mut self, probe: &Probe) -> Said {
        let declared = probe
            .declared
            .as_ref()
            .map(|d| d.iter().map(String::as_str).collect());
        let args = match probe.verify.args_for(self.inv.args(), declared) {
            Ok(a) => a,
            Err(why) => return Said::Unknown(why),
        };
        let inv = Invocation {
            resolved: Some(args),
            attempt: 1,
            ..self.inv.clone()
        };
        let mut stop = Stop::for_probe(Instant::now() + probe.timeout, self.stop_rx.clone());
        match probe.tool.invoke(&inv, &mut stop).await {
            Ok(output) => read(output),
            Err(Failure::Absent(_)) => Said::NotApplied,
            Err(Failure::Failed { message, .. }) => Said::Unknown(message),
            Err(Failure::Lost(why)) => Said::Unknown(why),
            Err(Failure::Stopped) if *self.stop_rx.borrow() >= StopLevel::Force => {
                Said::Unknown("it was stopped (the run was forced to end)".into())
            }
            Err(Failure::Stopped) => Said::Unknown(format!(
                "it did not answer within {}",
                crate::duration::format(probe.timeout)
            )),
        }
    }
}

/// A probe's `ok` output: JSON with `"applied": false` says not applied; other JSON, applied;
/// nothing, or text that is not JSON, says nothing.
fn read(output: Value) -> Said {
    match &output {
        Value::Object(m) if m.get("applied") == Some(&Value::Bool(false)) => Said::NotApplied,
        Value::Object(_) | Value::Array(_) | Value::Bool(true) | Value::Number(_) => {
            Said::Applied(output)
        }
        Value::Null => Said::Unknown("it answered nothing".into()),
        Value::String(s) if s.trim().is_empty() => Said::Unknown("it answered nothing".into()),
        Value::String(_) => Said::Unknown("its answer is not JSON".into()),
        Value::Bool(false) => Said::NotApplied,
    }
}

fn applied(result: &mut CallResult, output: Value) {
    result.status = Status::Ok;
    result.output = output;
    result.error = None;
    result.settled = Some(Settled::Applied);
}

/// Why a write its probe found never landed was not sent (again).
#[derive(Clone, Copy)]
enum Held {
    /// `resend = false`, or `--no-resend`.
    Off,
    /// The run was ending.
    Ending,
    /// It was sent again once already, and that was cut off too.
    Resent,
}

fn not_applied(result: &mut CallResult, probe: &str, held: Held) {
    let why = match held {
        Held::Ending => "not sent again: the run was ending (a resumed journal sends it)",
        Held::Off => "not sent again (resend = false, or --no-resend)",
        Held::Resent => "sent again once and cut off again; not sent a third time",
    };
    let kind = result
        .error
        .as_ref()
        .map_or(ErrorKind::RunEnded, |e| e.kind);
    result.status = Status::NotApplied;
    result.error = Some(ErrorInfo {
        kind,
        message: format!("not applied: probe `{probe}` found the write never landed; {why}"),
    });
    result.settled = Some(Settled::NotApplied);
}

fn unknown(result: &mut CallResult, probe: &str, why: &str) {
    if let Some(e) = &mut result.error {
        e.message
            .push_str(&format!(" — probe `{probe}` could not tell: {why}"));
    }
    result.settled = Some(Settled::Unknown);
}

#[cfg(test)]
mod tests {
    //! Settling on tokio's paused clock: scripted writes that hang past their timeout, and
    //! probes that say applied, not applied, nothing readable, or nothing at all.

    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use crate::batch::Batch;
    use crate::error::SourceFile;
    use crate::events::{CallResult, Settled, Status};
    use crate::manifest::Manifest;
    use crate::plan::{build, PlanOptions};
    use crate::run::scheduler::{execute, RunConfig};
    use crate::run::store::MemoryLanes;

    const MANIFEST: &str = r#"
[tools.pay]
kind = "scripted"
effect = "write"
hang = true
timeout = "1s"
verify = "landed"
[tools.resent]
kind = "scripted"
effect = "write"
hang = true
timeout = "1s"
verify = "never"
[tools.once]
kind = "scripted"
effect = "write"
hang = true
timeout = "1s"
verify = { tool = "never", resend = false }
[tools.asks_stuck]
kind = "scripted"
effect = "write"
hang = true
timeout = "1s"
verify = { tool = "stuck", args = { order = "${args.order}" } }
[tools.asks_text]
kind = "scripted"
effect = "write"
hang = true
timeout = "1s"
verify = "text"
[tools.landed]
kind = "scripted"
effect = "read"
latency = "100ms"
[tools.never]
kind = "scripted"
effect = "read"
output = { applied = false }
[tools.stuck]
kind = "scripted"
effect = "read"
hang = true
timeout = "2s"
[tools.text]
kind = "scripted"
effect = "read"
output = "maybe"
"#;

    /// Run one call of `tool` with `{order: "o-1"}`: its result and how long the run took.
    async fn one(tool: &str) -> (CallResult, Duration) {
        let file = SourceFile::new("t.toml", MANIFEST);
        let m = Manifest::parse(file, PathBuf::from("/t/tools.toml"), crate::tools::KINDS);
        let m = Arc::new(m.expect("the manifest"));
        let text = format!("- {{ id: c, tool: {tool}, args: {{ order: o-1 }} }}\n");
        let (b, _) = Batch::parse(SourceFile::new("b.yaml", text.as_str())).expect("the batch");
        let plan = Arc::new(build(&m, &b, &PlanOptions::default()).expect("the plan"));
        let lanes: Arc<dyn crate::run::store::LaneStore> = Arc::new(MemoryLanes::new(&plan.lanes));
        let (_signals, rx) = tokio::sync::mpsc::unbounded_channel();
        let started = tokio::time::Instant::now();
        let report = execute(m, plan, RunConfig::bare("run-s", lanes), rx).await;
        let r = report.results.into_iter().next().expect("a result");
        (r, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn an_applied_write_is_ok_with_its_probes_output() {
        let (r, took) = one("pay").await;
        assert_eq!(
            (r.status, r.settled, r.attempts),
            (Status::Ok, Some(Settled::Applied), 1)
        );
        // The probe got the write's arguments and its key.
        assert_eq!(r.output, json!({"order": "o-1"}));
        assert!(r.error.is_none() && r.idempotency_key.is_some());
        assert_eq!(took, Duration::from_millis(1100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_landed_is_sent_again_once_and_never_a_third_time() {
        let (r, took) = one("resent").await;
        assert_eq!(r.status, Status::NotApplied, "{r:?}");
        assert_eq!((r.settled, r.attempts), (Some(Settled::NotApplied), 2));
        let m = r.error.map(|e| e.message).unwrap_or_default();
        assert!(
            m.ends_with("sent again once and cut off again; not sent a third time"),
            "{m}"
        );
        // Cut off, probed, resent, cut off, probed: two timeouts.
        assert_eq!(took, Duration::from_secs(2));
        let (r, _) = one("once").await;
        assert_eq!((r.status, r.attempts), (Status::NotApplied, 1));
        let m = r.error.map(|e| e.message).unwrap_or_default();
        assert!(
            m.contains("probe `never` found the write never landed; not sent again"),
            "{m}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_hangs_or_answers_text_leaves_the_write_timed_out_with_why() {
        for (tool, why, took_then) in [
            (
                "asks_stuck",
                "probe `stuck` could not tell: it did not answer within 2s",
                3,
            ),
            (
                "asks_text",
                "probe `text` could not tell: its answer is not JSON",
                1,
            ),
        ] {
            let (r, took) = one(tool).await;
            let settled = (r.status, r.settled);
            assert_eq!(
                settled,
                (Status::TimedOut, Some(Settled::Unknown)),
                "{tool}"
            );
            let m = r.error.map(|e| e.message).unwrap_or_default();
            assert!(m.ends_with(why), "{m}");
            assert_eq!(took, Duration::from_secs(took_then), "{tool}");
        }
    }
}
