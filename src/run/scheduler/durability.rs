//! What makes a run durable and repeatable, at pre-dispatch: each call's fingerprint (tool,
//! invocation target, resolved arguments), the arguments a cassette records, a replayed
//! result, and what the journal of an earlier run says (a result to keep, or a write that
//! was in flight: settled by its probe when it has one — `verify` — else reported
//! indeterminate rather than sent twice).

use serde_json::{Map, Value};

use super::predispatch::Refusal;
use super::state::Coordinator;
use super::{idempotency_key, Ready};
use crate::events::{ErrorInfo, ErrorKind, Status};
use crate::run::call::{never_dispatched, Probe, PROBE_TIMEOUT};
use crate::run::journal;

impl Coordinator {
    /// Fingerprint call `p` to tool `t`; `Some` when a cassette or the journal settles it
    /// already.
    pub(super) fn durable(
        &mut self,
        p: usize,
        t: usize,
        args: &Map<String, Value>,
    ) -> Result<Option<Ready>, Refusal> {
        let call = &self.plan.calls[p];
        let tool = &self.manifest.tools[t];
        let fp = journal::fingerprint(&call.tool_name, &tool.kind.target(), args);
        self.fps[p] = Some(fp.clone());
        if self.record {
            self.recorded_args[p] = Some(Value::Object(args.clone()));
        }
        if let Some(cassette) = &self.replay {
            return match cassette.take(&call.id, &fp) {
                Ok(r) => Ok(Some(Ready::Reuse(Box::new(r)))),
                Err(why) => Err((ErrorKind::ReplayMiss, why)),
            };
        }
        let Some(resume) = &self.resume else {
            return Ok(None);
        };
        let key = (call.id.clone(), fp);
        if let Some(r) = resume.results.get(&key) {
            return Ok(Some(Ready::Reuse(Box::new(r.clone()))));
        }
        if resume.in_flight.contains(&key) && !call.idempotent && !self.retry_indeterminate {
            if tool.verify.is_some() {
                // Its probe says at dispatch whether it landed (and so whether to send it).
                self.settle_first.insert(p);
                return Ok(None);
            }
            return Ok(Some(Ready::Reuse(Box::new(self.indeterminate(p)))));
        }
        Ok(None)
    }

    /// The probe of write tool `t` (`verify`), ready to call.
    pub(super) fn probe_of(&self, t: usize) -> Option<std::sync::Arc<Probe>> {
        let tool = &self.manifest.tools[t];
        let v = tool.verify.as_ref()?;
        let pt = self.manifest.tools.iter().position(|x| x.name == v.tool)?;
        let probe = &self.manifest.tools[pt];
        let declared = probe.args.as_ref();
        Some(std::sync::Arc::new(Probe {
            tool: self.tools[pt].clone(),
            verify: v.clone(),
            declared: declared.map(|s| s.args.iter().map(|a| a.name.clone()).collect()),
            timeout: probe.timeout.or(tool.timeout).unwrap_or(PROBE_TIMEOUT),
            resend: v.resend && !self.no_resend,
        }))
    }

    /// The idempotency key of write call `p` (once fingerprinted): `RUN_ID:CALL_ID:FP`, FP
    /// its fingerprint (16 hex digits) — the same call of the same run has the same
    /// key on any machine, and a call edited under a reused run id does not.
    pub(super) fn idempotency_key(&self, p: usize) -> Option<String> {
        let call = &self.plan.calls[p];
        if !call.write {
            return None;
        }
        if let Some(key) = &self.plan.given_key {
            return Some(key.clone());
        }
        let fp = self.fps.get(p).and_then(Option::as_deref);
        let fp = fp.or_else(|| self.write_fps.get(&p).map(String::as_str));
        Some(idempotency_key(
            &self.run.run_id,
            &call.id,
            fp.unwrap_or(""),
        ))
    }

    /// A write that was in flight when the journaled run stopped: maybe it landed.
    fn indeterminate(&self, p: usize) -> crate::events::CallResult {
        let mut r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, "");
        r.status = Status::Indeterminate;
        r.event = Status::Indeterminate.event();
        r.idempotency_key = self.idempotency_key(p);
        r.error = Some(ErrorInfo {
            kind: ErrorKind::RunEnded,
            message: "cancelled in flight: the side effect may have landed (in flight when the journaled run stopped; --retry-indeterminate sends it again with the same idempotency key)".into(),
        });
        r
    }
}
