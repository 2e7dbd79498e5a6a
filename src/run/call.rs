//! One dispatched call, as its own task: finish taking its lanes (in the plan's fixed order),
//! invoke the tool (retrying transient failures of idempotent tools with backoff), classify how
//! it ended, give the lanes back in reverse order, and report to the coordinator.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::lanes::{Admission, Answer, BoxFuture, LaneError, LaneStore, Lease};
use crate::duration::millis;
use crate::events::ErrorKind;
use crate::events::{CallResult, ErrorInfo, Event, Status};
use crate::plan::{LaneKey, Plan};
use crate::tools::{Failure, Invocation, Stop, StopCause, StopLevel, ToolImpl};

/// Sends events, if anybody listens.
#[derive(Clone)]
pub(super) struct Emitter {
    pub(super) tx: Option<mpsc::UnboundedSender<Event>>,
    pub(super) lanes: bool,
}

impl Emitter {
    pub(super) fn emit(&self, e: Event) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
        }
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

/// Base of the exponential backoff between retries.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// One dispatched call.
pub(super) struct Job {
    pub(super) pos: usize,
    pub(super) acquisition: Option<Acquisition>,
    pub(super) plan: Arc<Plan>,
    pub(super) tool: Arc<ToolImpl>,
    pub(super) lanes: Arc<dyn LaneStore>,
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
}

/// A lane acquisition in progress.
type LeaseFuture = BoxFuture<'static, Result<Lease, LaneError>>;

/// How long to wait before dispatch for a lane's rate token or back-off: known, or still
/// being asked of a store that answers after I/O.
enum Admit {
    Known(Admission),
    Asking(BoxFuture<'static, Result<Admission, LaneError>>),
}

/// Lanes a call holds, and where its acquisition stands.
pub(super) struct Acquisition {
    leases: Vec<(usize, Lease)>,
    /// Next position in the call's lane list still to acquire.
    next: usize,
    /// A lane wait the coordinator began (so it is queued in call order): lane, since, future.
    pending: Option<(usize, Instant, LeaseFuture)>,
    /// A rate token reserved (or a back-off) not yet due: lane, since, how long to wait.
    token: Option<(usize, Instant, Admit)>,
    /// The lane waited on longest so far.
    longest: Option<(Duration, usize)>,
}

impl Acquisition {
    fn note_wait(&mut self, lanes: &dyn LaneStore, lane: usize, since: Instant, token: bool) {
        let waited = since.elapsed();
        if waited >= Duration::from_millis(1) {
            lanes.record_wait(lane, waited, token);
            if self.longest.is_none_or(|(w, _)| waited > w) {
                self.longest = Some((waited, lane));
            }
        }
    }
}

/// Start acquiring a ready call's lanes, synchronously and in call order: every lane that is
/// free is taken at once; the first that is not is queued for (its future polled once) and
/// the call's task finishes the job.
pub(super) fn begin_acquire(
    store: &Arc<dyn LaneStore>,
    plan: &Plan,
    pos: usize,
    emitter: &Emitter,
) -> Result<Acquisition, String> {
    let call = &plan.calls[pos];
    let mut acq = Acquisition {
        leases: Vec::with_capacity(call.lanes.len()),
        next: 0,
        pending: None,
        token: None,
        longest: None,
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while acq.next < call.lanes.len() {
        let lane = call.lanes[acq.next];
        acq.next += 1;
        let since = Instant::now();
        let mut fut = store.clone().acquire(lane, call.weight, pos as u64);
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(lease)) => {
                emitter.lane(|| Event::LaneAcquired {
                    call: pos,
                    lane,
                    weight: call.weight,
                });
                acq.leases.push((lane, lease));
                match store.clone().admission(lane) {
                    Answer::Now(adm) => {
                        let adm = adm.map_err(|e| e.to_string())?;
                        if !adm.wait.is_zero() {
                            if adm.token {
                                emitter.lane(|| Event::RateWaiting {
                                    call: pos,
                                    lane,
                                    waiting: true,
                                });
                            }
                            acq.token = Some((lane, since, Admit::Known(adm)));
                            break;
                        }
                    }
                    Answer::Later(asking) => {
                        acq.token = Some((lane, since, Admit::Asking(asking)));
                        break;
                    }
                }
            }
            std::task::Poll::Ready(Err(e)) => return Err(e.to_string()),
            std::task::Poll::Pending => {
                match store.clone().held_elsewhere(lane) {
                    Answer::Now(Some(held)) => emitter.lane(|| Event::LaneShared { lane, held }),
                    Answer::Now(None) => {}
                    Answer::Later(asking) => {
                        let emitter = emitter.clone();
                        tokio::spawn(async move {
                            if let Some(held) = asking.await {
                                emitter.lane(|| Event::LaneShared { lane, held });
                            }
                        });
                    }
                }
                emitter.lane(|| Event::LaneWaiting {
                    call: pos,
                    lane,
                    weight: call.weight,
                });
                acq.pending = Some((lane, since, fut));
                break;
            }
        }
    }
    Ok(acq)
}

impl Job {
    /// Finish acquiring lanes. `Err` is the never-dispatched result.
    async fn finish_acquire(
        &mut self,
        acq: &mut Acquisition,
        result: &mut CallResult,
    ) -> Result<(), CallResult> {
        let call = &self.plan.calls[self.pos];
        let (pos, weight) = (self.pos, call.weight);
        loop {
            if let Some((lane, since, fut)) = acq.pending.take() {
                let mut stop = self.stop_rx.clone();
                let lease = tokio::select! {
                    biased;
                    _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => None,
                    r = fut => Some(r),
                };
                match lease {
                    Some(Ok(lease)) => {
                        self.emitter.lane(|| Event::LaneAcquired {
                            call: pos,
                            lane,
                            weight,
                        });
                        acq.leases.push((lane, lease));
                        acq.note_wait(self.lanes.as_ref(), lane, since, false);
                        let admit = match self.lanes.clone().admission(lane) {
                            Answer::Now(adm) => Admit::Known(adm.map_err(|e| {
                                never(result, ErrorKind::LaneStore, &e.to_string())
                            })?),
                            Answer::Later(asking) => Admit::Asking(asking),
                        };
                        if let Admit::Known(adm) = &admit {
                            if adm.token && !adm.wait.is_zero() {
                                self.emitter.lane(|| Event::RateWaiting {
                                    call: pos,
                                    lane,
                                    waiting: true,
                                });
                            }
                        }
                        acq.token = Some((lane, Instant::now(), admit));
                    }
                    other => {
                        self.emitter.lane(|| Event::LaneReleased {
                            call: pos,
                            lane,
                            weight,
                            held: false,
                        });
                        return Err(match other {
                            Some(Err(e)) => never(result, ErrorKind::LaneStore, &e.to_string()),
                            _ => never(
                                result,
                                ErrorKind::RunEnded,
                                &format!(
                                    "run ended while queued on lane {}",
                                    self.plan.lanes[lane].name
                                ),
                            ),
                        });
                    }
                }
            }
            if let Some((lane, since, admit)) = acq.token.take() {
                let adm = match admit {
                    Admit::Known(adm) => adm,
                    Admit::Asking(asking) => {
                        let adm = asking
                            .await
                            .map_err(|e| never(result, ErrorKind::LaneStore, &e.to_string()))?;
                        if adm.token && !adm.wait.is_zero() {
                            self.emitter.lane(|| Event::RateWaiting {
                                call: pos,
                                lane,
                                waiting: true,
                            });
                        }
                        adm
                    }
                };
                if !adm.wait.is_zero() {
                    let mut stop = self.stop_rx.clone();
                    let stopped = tokio::select! {
                        biased;
                        _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
                        _ = tokio::time::sleep(adm.wait) => false,
                    };
                    if adm.token {
                        self.emitter.lane(|| Event::RateWaiting {
                            call: pos,
                            lane,
                            waiting: false,
                        });
                    }
                    if stopped {
                        let why = format!(
                            "run ended while waiting for a rate token of lane {}",
                            self.plan.lanes[lane].name
                        );
                        return Err(never(result, ErrorKind::RunEnded, &why));
                    }
                    acq.note_wait(self.lanes.as_ref(), lane, since, adm.token);
                }
            }
            if acq.next >= call.lanes.len() {
                return Ok(());
            }
            let lane = call.lanes[acq.next];
            acq.next += 1;
            self.emitter.lane(|| Event::LaneWaiting {
                call: pos,
                lane,
                weight,
            });
            acq.pending = Some((
                lane,
                Instant::now(),
                self.lanes.clone().acquire(lane, weight, pos as u64),
            ));
        }
    }

    pub(super) async fn run(mut self) -> Completion {
        let mut result = base_result(&self.plan, self.pos);
        result.idempotency_key = self.inv.idempotency_key.clone();
        let mut acq = match self.acquisition.take() {
            Some(a) => a,
            None => {
                return self.release(
                    Vec::new(),
                    never(&mut result, ErrorKind::LaneStore, "no lanes"),
                    false,
                )
            }
        };
        if let Err(r) = self.finish_acquire(&mut acq, &mut result).await {
            return self.release(acq.leases, r, false);
        }
        let leases = std::mem::take(&mut acq.leases);
        let longest = acq.longest;
        // A parallel_safe = false tool: identical arguments never overlap, even across runs.
        let _exclusive = if self.plan.phases[self.plan.calls[self.pos].phase].alone {
            let key = format!(
                "{}\u{0}{}",
                self.inv.tool(),
                serde_json::to_string(self.inv.args()).unwrap_or_default()
            );
            let mut stop = self.stop_rx.clone();
            let held = tokio::select! {
                biased;
                _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => None,
                r = self.lanes.clone().exclusive(key) => Some(r),
            };
            match held {
                Some(Ok(guard)) => guard,
                Some(Err(e)) => {
                    return self.release(
                        leases,
                        never(&mut result, ErrorKind::LaneStore, &e.to_string()),
                        false,
                    )
                }
                None => {
                    let why = "run ended while another run held the same call";
                    return self.release(
                        leases,
                        never(&mut result, ErrorKind::RunEnded, why),
                        false,
                    );
                }
            }
        } else {
            None
        };

        let dispatched = Instant::now();
        result.queued_ms = Some(millis(dispatched.saturating_duration_since(self.ready_at)));
        result.waited_on = longest.map(|(_, l)| self.plan.lanes[l].name.clone());
        result.started_ms = Some(millis(dispatched.saturating_duration_since(self.run_start)));
        if let Some((journal, fp)) = &self.journal {
            let record = super::journal::Journal::dispatch(self.inv.call_id(), self.pos, fp, 1);
            if let Err(e) = journal.record_durably(record).await {
                return self.release(leases, never(&mut result, ErrorKind::Journal, &e), false);
            }
        }
        let ceiling_at = self.ceiling.map(|c| dispatched + c);
        let mut ceiling_hit = false;
        let mut attempt = 1u32;
        let mut rejections = 0u32;
        loop {
            self.inv.attempt = attempt;
            result.attempts = attempt;
            let pos = self.pos;
            self.emitter
                .lane(|| Event::CallStarted { call: pos, attempt });
            let mut stop = Stop::new(
                self.timeout.map(|t| Instant::now() + t),
                ceiling_at,
                self.stop_rx.clone(),
            );
            let outcome = self.tool.invoke(&self.inv, &mut stop).await;
            match outcome {
                Ok(v) => {
                    result.status = Status::Ok;
                    result.output = v;
                }
                Err(Failure::Failed {
                    kind,
                    message,
                    transient,
                    retry_after,
                }) => {
                    let wait = backoff(attempt).max(retry_after.unwrap_or_default());
                    if kind.is_rate_limit() || retry_after.is_some() {
                        // The partner pushed back: the tool's own and shared lanes wait it out,
                        // so the other calls in them do not keep hammering it.
                        rejections += u32::from(kind.is_rate_limit());
                        for &(lane, _) in &leases {
                            if matches!(
                                self.plan.lanes[lane].key,
                                LaneKey::Tool(_) | LaneKey::BatchTool(_) | LaneKey::Shared(_)
                            ) {
                                self.lanes.clone().back_off(lane, wait);
                            }
                        }
                    }
                    if transient
                        && attempt <= self.retries
                        && Self::before_retry(&self.lanes, &self.stop_rx, &leases, wait).await
                    {
                        attempt += 1;
                        continue;
                    }
                    // Not retryable, or stopped between attempts: the last failure stands.
                    result.status = Status::Error;
                    result.error = Some(ErrorInfo { kind, message });
                }
                Err(Failure::Stopped) => match stop.cause() {
                    Some(StopCause::Timeout) => {
                        let text = self.timeout_text.clone().unwrap_or_else(|| {
                            self.timeout
                                .map(crate::duration::format)
                                .unwrap_or_default()
                        });
                        result.status = Status::TimedOut;
                        result.error = Some(ErrorInfo {
                            kind: ErrorKind::Timeout,
                            message: format!(
                                "tool '{}' exceeded its {text} timeout",
                                self.inv.tool()
                            ),
                        });
                    }
                    Some(StopCause::Ceiling) => {
                        ceiling_hit = true;
                        let text = self
                            .ceiling
                            .map(crate::duration::format)
                            .unwrap_or_default();
                        result.status = Status::TimedOut;
                        result.error = Some(ErrorInfo {
                            kind: ErrorKind::Timeout,
                            message: format!("tool '{}' reached the run's tool_call_seconds ceiling of {text}; the run ends", self.inv.tool()),
                        });
                    }
                    Some(StopCause::RunEnded) | None => {
                        self.cut_off(&mut result, ErrorKind::RunEnded, None);
                    }
                },
                Err(Failure::Lost(why)) => {
                    self.cut_off(&mut result, ErrorKind::ConnectionLost, Some(why))
                }
            }
            break;
        }
        result.event = result.status.event();
        result.duration_ms = Some(millis(dispatched.elapsed()));
        let mut c = self.release(leases, result, ceiling_hit);
        c.rejections = rejections;
        c
    }

    /// Classify a call cut off in flight: `cancelled` if its tool is idempotent (safe to call
    /// again), else `indeterminate` (the side effect may have landed).
    fn cut_off(&self, result: &mut CallResult, kind: ErrorKind, why: Option<String>) {
        let idempotent = self.plan.calls[self.pos].idempotent;
        result.status = if idempotent {
            Status::Cancelled
        } else {
            Status::Indeterminate
        };
        let mut message = if idempotent {
            "cancelled in flight: safe to call again".to_string()
        } else {
            "cancelled in flight: the side effect may have landed".to_string()
        };
        if let Some(why) = why {
            message.push_str(&format!(" ({why})"));
        }
        result.error = Some(ErrorInfo { kind, message });
    }

    /// Wait before a retry: the backoff, then a fresh rate token in every rate-limited lane
    /// (each request spends one). `false` if the run ended meanwhile.
    async fn before_retry(
        lanes: &Arc<dyn LaneStore>,
        stop_rx: &watch::Receiver<StopLevel>,
        leases: &[(usize, Lease)],
        wait: Duration,
    ) -> bool {
        let mut stop = stop_rx.clone();
        let stopped = tokio::select! {
            _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
            _ = tokio::time::sleep(wait) => false,
        };
        if stopped {
            return false;
        }
        for &(lane, _) in leases {
            let Ok(adm) = lanes.clone().admission(lane).get().await else {
                continue;
            };
            if !adm.wait.is_zero() {
                let mut stop = stop_rx.clone();
                let stopped = tokio::select! {
                    _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => true,
                    _ = tokio::time::sleep(adm.wait) => false,
                };
                if stopped {
                    return false;
                }
            }
        }
        true
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
        status: Status::NeverDispatched,
        event: Status::NeverDispatched.event(),
        output: Value::Null,
        error: None,
        attempts: 0,
        phase: c.phase,
        idempotency_key: None,
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
