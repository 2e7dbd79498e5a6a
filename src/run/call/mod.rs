//! One dispatched call, as its own task: finish taking its lanes (in the plan's fixed order),
//! invoke the tool (retrying transient failures of idempotent tools with backoff), classify how
//! it ended, give the lanes back in reverse order, and report to the coordinator.
//!
//! Layout: `acquire` takes the lanes (begun synchronously by the coordinator, so waiters
//! queue in call order, and finished here); `attempts` invokes the tool until it succeeds,
//! fails for good or is stopped, and classifies the outcome; this file holds the job, what it
//! reports and the results of calls that never went out.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod acquire;
mod attempts;
mod charge;
mod settle;

use super::store::{Backends, Lanes, Lease};
use crate::duration::millis;
use crate::events::ErrorKind;
use crate::events::{CallResult, ErrorInfo, Event, Status};
use crate::plan::Plan;
use crate::tools::{Invocation, StopLevel, ToolImpl};
pub(super) use acquire::{begin_acquire, Acquisition};
pub(super) use charge::{Charger, Ticket};
pub(crate) use settle::{Probe, PROBE_TIMEOUT};

/// Sends events, if anybody listens.
#[derive(Clone)]
pub(super) struct Emitter {
    pub(super) tx: Option<mpsc::UnboundedSender<Event>>,
    pub(super) lanes: bool,
    /// Calls of the run before this batch (a stream's earlier segments): events name calls
    /// by their place in the whole run.
    pub(super) base: usize,
}

impl Emitter {
    pub(super) fn emit(&self, mut e: Event) {
        let Some(tx) = &self.tx else { return };
        if self.base > 0 {
            e.shift_calls(self.base);
        }
        let _ = tx.send(e);
    }
    /// A call's final result (cloned only when somebody listens).
    ///
    /// Per-lane and per-attempt events (`lane`) go only to a live display; results always.
    pub(super) fn emit_finished(&self, r: &CallResult) {
        if self.tx.is_some() {
            self.emit(Event::CallFinished {
                result: Box::new(r.clone()),
            });
        }
    }
    pub(super) fn lane(&self, e: impl FnOnce() -> Event) {
        if self.lanes {
            self.emit(e());
        }
    }
}

/// What a call task sends back.
pub(super) struct Completion {
    pub(super) pos: usize,
    pub(super) result: CallResult,
    pub(super) ceiling_hit: bool,
    /// HTTP 429s this call met.
    pub(super) rejections: u32,
    /// The lanes the call still holds: given back when this is dropped (see [`Held`]).
    pub(super) held: Held,
}

/// A finished call's lanes, given back (in reverse order of acquisition, each announced
/// first) when this is dropped. The call's task sends its completion to the coordinator
/// first and drops this after, so that the next call waiting on a lane is the last task
/// woken and runs next on the same worker, rather than the coordinator.
#[derive(Default)]
pub(super) struct Held {
    leases: Vec<(usize, Lease)>,
    emitter: Option<Emitter>,
    pos: usize,
    weight: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        while let Some((lane, lease)) = self.leases.pop() {
            // Announce first: whoever the permits go to announces its acquisition after this.
            if let Some(emitter) = &self.emitter {
                let (pos, weight) = (self.pos, self.weight);
                emitter.lane(|| Event::LaneReleased {
                    call: pos,
                    lane,
                    weight,
                    held: true,
                });
            }
            drop(lease);
        }
    }
}

/// The backends a call holds, and the one it waited for longest.
type HeldBackends = (Vec<Box<dyn Send + Sync>>, Option<(Duration, String)>);

/// Base of the exponential backoff between retries.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// One dispatched call.
pub(super) struct Job {
    pub(super) pos: usize,
    pub(super) acquisition: Option<Acquisition>,
    pub(super) plan: Arc<Plan>,
    pub(super) tool: Arc<ToolImpl>,
    pub(super) lanes: Arc<dyn Lanes>,
    pub(super) store_backends: Arc<dyn Backends>,
    pub(super) inv: Invocation,
    pub(super) stop_rx: watch::Receiver<StopLevel>,
    pub(super) emitter: Emitter,
    pub(super) run_start: Instant,
    pub(super) ready_at: Instant,
    pub(super) timeout: Option<Duration>,
    pub(super) timeout_text: Option<String>,
    pub(super) ceiling: Option<Duration>,
    pub(super) retries: u32,
    /// To end the run *before* this call gives its lanes back, so that under fail_run (or a
    /// reached ceiling) no queued call slips into the freed permits.
    pub(super) stop_tx: Arc<watch::Sender<StopLevel>>,
    pub(super) fail_run: bool,
    /// The journal and this call's fingerprint: the dispatch is on disk before the tool runs.
    pub(super) journal: Option<(super::journal::Journal, String)>,
    /// This call leads its key in the read cache: an `ok` output is kept this long.
    pub(super) cache: Option<(super::cache::Lead, Duration)>,
    /// A write on backends cached reads read: once it has resolved (whatever its status —
    /// a failed or cut-off write may have landed), their marks change before anyone hears
    /// of it, so no read that waited for it finds an entry from before it.
    pub(super) marks: Option<(Arc<super::cache::Cache>, Arc<[String]>)>,
    /// The backends this call holds in a lane store other processes share, by name, after
    /// its lanes (every call takes them in that order, so no two wait for each other).
    pub(super) backends: Option<Arc<[(String, crate::plan::Claim)]>>,
    /// `[budget] per_tenant`: the call's place in line for its reservation in the lane
    /// store's window (asked in call order), awaited just before dispatch and given back if
    /// the call never reached its tool.
    pub(super) window: Option<Ticket>,
    /// A write's probe (`verify`): what settles it when it is cut off in flight.
    pub(super) probe: Option<Arc<Probe>>,
    /// A resumed write that was in flight when its run stopped: its probe is asked first.
    pub(super) settle_first: bool,
}

impl Job {
    /// Run the call. The job comes boxed: the call's future then holds a pointer, not the
    /// job's 750 bytes, so making it and boxing it copies a fraction of what it did.
    pub(super) async fn run(mut self: Box<Self>) -> Completion {
        let mut result = base_result(&self.plan, self.pos);
        result.idempotency_key = self.inv.idempotency_key.clone();
        let Some(mut acq) = self.acquisition.take() else {
            let r = never(&mut result, ErrorKind::LaneStore, "no lanes");
            return self.release(Vec::new(), r, false);
        };
        if let Err(r) = self.finish_acquire(&mut acq, &mut result).await {
            return self.release(acq.leases, r, false);
        }
        if acq.holds_backends() {
            // Its one backend read came with its last lane: held as `hold_backends` would.
            self.backends = None;
            if let Some((lead, _)) = &mut self.cache {
                lead.look_again().await;
            }
        }
        let leases = std::mem::take(&mut acq.leases);
        let _exclusive = match self.hold_exclusive().await {
            Ok(guard) => guard,
            Err((kind, why)) => {
                let r = never(&mut result, kind, &why);
                return self.release(leases, r, false);
            }
        };
        if let (Some((cache, marked)), Some(_)) = (&self.marks, &self.backends) {
            // A read another process sends from now on comes after this write: no entry
            // from before it may answer that read.
            cache.wrote(marked.clone()).await;
        }
        let (_backends, backend_wait) = match self.hold_backends().await {
            Ok((guards, wait)) if guards.is_empty() => (guards, wait),
            Ok((guards, wait)) => {
                if let Some((lead, _)) = &mut self.cache {
                    lead.look_again().await;
                }
                (guards, wait)
            }
            Err((kind, why)) => {
                let r = never(&mut result, kind, &why);
                return self.release(leases, r, false);
            }
        };
        let reserved = match self.reserve_window().await {
            Ok(r) => r,
            Err((kind, why)) => {
                let r = never(&mut result, kind, &why);
                return self.release(leases, r, false);
            }
        };
        let dispatched = Instant::now();
        result.queued_ms = Some(millis(dispatched.saturating_duration_since(self.ready_at)));
        let lane_wait = acq
            .longest
            .map(|(w, l)| (w, self.plan.lanes[l].name.clone()));
        result.waited_on = match (lane_wait, backend_wait) {
            (Some(l), Some(b)) => Some(if b.0 > l.0 { b.1 } else { l.1 }),
            (l, b) => l.or(b).map(|(_, name)| name),
        };
        result.started_ms = Some(millis(dispatched.saturating_duration_since(self.run_start)));
        let (ceiling_hit, rejections) = match self.send(&mut result, &leases, dispatched).await {
            Ok(sent) => sent,
            Err(r) => return self.release(leases, r, false),
        };
        if let (Some(id), Some(ticket), 0) = (reserved, &self.window, result.attempts) {
            ticket.refund(id);
        }
        if let Some((cache, backends)) = self.marks.take() {
            cache.wrote(backends).await;
        }
        if let Some((lead, ttl)) = self.cache.take() {
            if result.is_ok() {
                lead.publish(&result.output, ttl).await;
            } else {
                lead.abandon().await;
            }
        }
        result.event = result.status.event();
        result.duration_ms = Some(millis(dispatched.elapsed()));
        let mut c = self.release(leases, result, ceiling_hit);
        c.rejections = rejections;
        c
    }

    /// Send the call (its dispatch on disk first, when journaled), and settle it by its probe
    /// if it is a write cut off in flight (`verify`). `Err`: it was never sent.
    async fn send(
        &mut self,
        result: &mut CallResult,
        leases: &[(usize, Lease)],
        dispatched: Instant,
    ) -> Result<(bool, u32), CallResult> {
        let probe = self.probe.clone();
        if let (Some(p), true) = (&probe, self.settle_first) {
            if !Box::pin(self.settle_first(p, result)).await {
                return Ok((false, 0));
            }
        }
        if let Some((journal, fp)) = &self.journal {
            let record = super::journal::Journal::dispatch(self.inv.call_id(), self.pos, fp, 1);
            if let Err(e) = journal.record_durably(record).await {
                return Err(never(result, ErrorKind::Journal, &e));
            }
        }
        let (ceiling_hit, rejections) = self.attempts(result, leases, dispatched).await;
        match probe {
            Some(p) if settle::cut_off(result) => {
                let (c, r) = Box::pin(self.settle(&p, result, leases, dispatched)).await;
                Ok((ceiling_hit || c, rejections + r))
            }
            _ => Ok((ceiling_hit, rejections)),
        }
    }

    /// A `parallel_safe = false` tool: identical arguments never overlap, even across runs.
    /// Holds the store's lock for them (nothing for other tools).
    async fn hold_exclusive(
        &mut self,
    ) -> Result<Option<Box<dyn Send + Sync>>, (ErrorKind, String)> {
        if !self.plan.phases[self.plan.calls[self.pos].phase].alone {
            return Ok(None);
        }
        let key = format!(
            "{}\u{0}{}",
            self.inv.tool(),
            serde_json::to_string(self.inv.args()).unwrap_or_default()
        );
        let mut stop = self.stop_rx.clone();
        let held = tokio::select! {
            biased;
            _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => None,
            r = self.store_backends.clone().exclusive(key) => Some(r),
        };
        match held {
            Some(Ok(guard)) => Ok(guard),
            Some(Err(e)) => Err((ErrorKind::LaneStore, e.to_string())),
            None => Err((
                ErrorKind::RunEnded,
                "run ended while another run held the same call".into(),
            )),
        }
    }

    /// Wait for the call's reservation in its tenant's window (`[budget] per_tenant`): the
    /// id to give it back under, `None` when there is no window or the call costs nothing.
    async fn reserve_window(&mut self) -> Result<Option<String>, (ErrorKind, String)> {
        match &mut self.window {
            Some(ticket) => ticket.granted().await.map(Some),
            None => Ok(None),
        }
    }

    /// Hold the call's backends in the shared store, one after another by name.
    /// With the backend waited for longest (`backend:NAME`, 1 ms or more), for `waited_on`.
    async fn hold_backends(&mut self) -> Result<HeldBackends, (ErrorKind, String)> {
        let Some(claims) = self.backends.take() else {
            return Ok((Vec::new(), None));
        };
        let mut held = Vec::with_capacity(claims.len());
        let mut longest: Option<(Duration, String)> = None;
        for (backend, claim) in claims.iter() {
            if let Some(guard) = self.store_backends.try_backend(backend, *claim) {
                held.push(guard);
                continue;
            }
            let since = Instant::now();
            let mut stop = self.stop_rx.clone();
            let got = tokio::select! {
                biased;
                _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => None,
                r = self.store_backends.clone().backend(backend.clone(), *claim) => Some(r),
            };
            match got {
                Some(Ok(guard)) => held.push(guard),
                Some(Err(e)) => return Err((ErrorKind::LaneStore, e.to_string())),
                None => {
                    let why = format!("run ended while another run held backend `{backend}`");
                    return Err((ErrorKind::RunEnded, why));
                }
            }
            let waited = since.elapsed();
            if waited >= Duration::from_millis(1) && longest.as_ref().is_none_or(|l| waited > l.0) {
                longest = Some((waited, format!("backend:{backend}")));
            }
        }
        Ok((held, longest))
    }

    /// Package the result with the lanes still held (given back when [`Held`] drops).
    fn release(
        &self,
        leases: Vec<(usize, Lease)>,
        result: CallResult,
        ceiling_hit: bool,
    ) -> Completion {
        if ceiling_hit || (self.fail_run && !result.is_ok()) {
            self.stop_tx.send_if_modified(|l| {
                let running = *l == StopLevel::Running;
                if running {
                    *l = StopLevel::Graceful;
                }
                running
            });
        }
        Completion {
            rejections: 0,
            pos: self.pos,
            result,
            ceiling_hit,
            held: Held {
                leases,
                emitter: Some(self.emitter.clone()),
                pos: self.pos,
                weight: self.plan.calls[self.pos].weight,
            },
        }
    }
}

fn never(result: &mut CallResult, kind: ErrorKind, why: &str) -> CallResult {
    let mut r = result.clone();
    r.status = Status::NeverDispatched;
    r.event = Status::NeverDispatched.event();
    r.error = Some(ErrorInfo {
        kind,
        message: format!("never dispatched: {why}"),
    });
    r
}

/// Exponential backoff with jitter: 100ms, 200ms, 400ms, … (each 50–100% of that), capped.
fn backoff(attempt: u32) -> Duration {
    let exp = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(BACKOFF_MAX);
    exp.mul_f64(0.5 + fastrand::f64() * 0.5)
}

pub(super) fn base_result(plan: &Plan, p: usize) -> CallResult {
    let c = &plan.calls[p];
    CallResult {
        index: c.index,
        id: c.id.clone(),
        tool: c.tool_name.clone(),
        called_as: c.called_as.clone(),
        status: Status::NeverDispatched,
        event: Status::NeverDispatched.event(),
        output: Value::Null,
        error: None,
        attempts: 0,
        phase: c.phase,
        idempotency_key: None,
        cached: false,
        settled: None,
        queued_ms: None,
        waited_on: None,
        started_ms: None,
        duration_ms: None,
    }
}

pub(super) fn never_dispatched(plan: &Plan, p: usize, kind: ErrorKind, why: &str) -> CallResult {
    let mut r = base_result(plan, p);
    r.error = Some(ErrorInfo {
        kind,
        message: format!("never dispatched: {why}"),
    });
    r
}

#[cfg(test)]
mod tests {
    /// The size of what `f` returns (a future's state machine), without calling it.
    fn future_size<A, F: FnOnce(A) -> Fut, Fut>(_: F) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// Every call's future is made and boxed on the coordinator: its size is copied per call
    /// (3,264 bytes when the job was moved into it whole; 1,776 with the job boxed).
    #[test]
    fn a_calls_future_stays_small() {
        let size = future_size(super::Job::run);
        assert!(size <= 2048, "a call's future is {size} bytes");
    }
}
