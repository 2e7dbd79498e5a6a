//! The coordinator: one task that owns the run's state and dispatches calls.
//!
//! A call becomes *ready* when its phase has started and every in-phase edge has resolved.
//! Ready calls go through pre-dispatch one at a time, lowest call index first (a call still
//! waiting on its edges never holds back later independent calls): dependency success,
//! reference resolution, the argument guardrail and the budget. Only then is the call spawned
//! as its own task, which waits for its lanes and invokes the tool. Results come back over a
//! channel in any order; they are stored by index, so the report is in call order.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::lanes::{BoxFuture, LaneError, LaneStore, Lease};
use super::stats;
use super::tools::{Failure, Invocation, Stop, StopCause, StopLevel, ToolImpl};
use crate::batch::OnToolError;
use crate::duration::millis;
use crate::manifest::{Manifest, ToolKind};
use crate::plan::{CallPlan, Plan};
use crate::reference::ResolveError;
use crate::report::events::{CallResult, ErrorInfo, Event, LaneInfo, Outcome, Stats, Status};
use crate::schema::SCRIPTED_RESERVED;

/// Everything a run needs besides the plan.
pub struct RunConfig {
    pub run_id: String,
    pub lanes: Arc<dyn LaneStore>,
    /// Where events go (`None`: nobody listens).
    pub events: Option<mpsc::UnboundedSender<Event>>,
    /// Send per-lane wait/acquire/release events (only a live display needs them).
    pub lane_events: bool,
}

/// The finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run_id: String,
    pub outcome: Outcome,
    pub results: Vec<CallResult>,
    pub stats: Stats,
}

#[derive(Clone)]
struct Emitter {
    tx: Option<mpsc::UnboundedSender<Event>>,
    lanes: bool,
}

impl Emitter {
    fn emit(&self, e: Event) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(e);
        }
    }
    fn lane(&self, e: impl FnOnce() -> Event) {
        if self.lanes {
            self.emit(e());
        }
    }
}

struct Completion {
    pos: usize,
    result: CallResult,
    ceiling_hit: bool,
}

/// Base of the exponential backoff between retries.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Run `plan`. `signals` delivers SIGINT/SIGTERM: the first stops gracefully, the second at
/// once. Returns when every call has a result.
pub async fn execute(
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    config: RunConfig,
    mut signals: mpsc::UnboundedReceiver<()>,
) -> RunReport {
    let start = Instant::now();
    let emitter = Emitter {
        tx: config.events.clone(),
        lanes: config.lane_events,
    };
    let n = plan.calls.len();
    emitter.emit(Event::RunStarted {
        run_id: config.run_id.clone(),
        total: n,
        lanes: plan
            .lanes
            .iter()
            .map(|l| LaneInfo {
                name: l.name.clone(),
                limit: l.limit,
                rate: l.rate.map(|r| r.to_string()),
            })
            .collect(),
    });
    let tools: Vec<Arc<ToolImpl>> = manifest.tools.iter().map(ToolImpl::from_tool).collect();

    let pos_of: std::collections::HashMap<usize, usize> = plan
        .calls
        .iter()
        .enumerate()
        .map(|(p, c)| (c.index, p))
        .collect();
    let mut pending = vec![0usize; n];
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (p, c) in plan.calls.iter().enumerate() {
        for e in &c.edges {
            if let Some(&f) = pos_of.get(&e.from) {
                if plan.calls[f].phase == c.phase {
                    pending[p] += 1;
                    dependants[f].push(p);
                }
            }
        }
    }

    let mut results: Vec<Option<CallResult>> = vec![None; n];
    let mut ready_at: Vec<Option<Instant>> = vec![None; n];
    let mut ready: BTreeSet<usize> = BTreeSet::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Completion>();
    let (stop_tx, stop_rx) = watch::channel(StopLevel::Running);
    let stop_tx = Arc::new(stop_tx);
    let fail_run = plan.settings.on_tool_error == OnToolError::FailRun;
    let mut ending: Option<(Outcome, String)> = None;
    let mut budget_hit = false;
    let mut spent = 0.0f64;
    let mut in_flight = 0usize;
    let mut phase = 0usize;
    let mut phase_left = 0usize;
    let run_deadline = plan.settings.run_deadline.map(|d| start + d);
    let mut signals_open = true;

    let start_phase = |phase: usize,
                       ready: &mut BTreeSet<usize>,
                       ready_at: &mut Vec<Option<Instant>>,
                       pending: &[usize]|
     -> usize {
        let ph = &plan.phases[phase];
        let mut count = 0;
        for i in ph.start..ph.end {
            if let Some(&p) = pos_of.get(&i) {
                count += 1;
                if pending[p] == 0 {
                    ready.insert(p);
                    ready_at[p] = Some(Instant::now());
                }
            }
        }
        count
    };
    if !plan.phases.is_empty() {
        phase_left = start_phase(0, &mut ready, &mut ready_at, &pending);
    }

    loop {
        // Pre-dispatch, serial and in call order.
        while ending.is_none() {
            let Some(p) = ready.pop_first() else { break };
            let call = &plan.calls[p];
            match pre_dispatch(
                &manifest,
                &plan,
                call,
                &results,
                &mut spent,
                &mut budget_hit,
            ) {
                Ok(args) => {
                    let tool = &manifest.tools[call.tool];
                    let acquisition = match begin_acquire(&config.lanes, &plan, p, &emitter) {
                        Ok(a) => a,
                        Err(e) => {
                            let r = never_dispatched(&plan, p, "lane_store", &e);
                            finish(
                                p,
                                r,
                                &mut Ctx {
                                    plan: &plan,
                                    results: &mut results,
                                    pending: &mut pending,
                                    dependants: &dependants,
                                    ready: &mut ready,
                                    ready_at: &mut ready_at,
                                    phase_left: &mut phase_left,
                                    phase,
                                    emitter: &emitter,
                                },
                            );
                            continue;
                        }
                    };
                    let inv = Invocation {
                        call_id: call.id.clone(),
                        tool: call.tool_name.clone(),
                        tenant: plan.settings.tenant.clone(),
                        run_id: config.run_id.clone(),
                        idempotency_key: call
                            .write
                            .then(|| idempotency_key(&config.run_id, &call.id)),
                        args,
                        lease: lease_text(&config.run_id, &plan, call),
                        attempt: 1,
                    };
                    let job = Job {
                        pos: p,
                        acquisition: Some(acquisition),
                        plan: plan.clone(),
                        tool: tools[call.tool].clone(),
                        lanes: config.lanes.clone(),
                        inv,
                        stop_rx: stop_rx.clone(),
                        emitter: emitter.clone(),
                        run_start: start,
                        ready_at: ready_at[p].unwrap_or_else(Instant::now),
                        timeout: tool.timeout,
                        timeout_text: tool.timeout_text.clone(),
                        ceiling: plan.settings.tool_call_deadline,
                        retries: if tool.idempotent { tool.retries } else { 0 },
                        stop_tx: stop_tx.clone(),
                        fail_run,
                    };
                    in_flight += 1;
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        let c = job.run().await;
                        let _ = done.send(c);
                    });
                }
                Err((kind, why)) => {
                    let r = never_dispatched(&plan, p, kind, &why);
                    finish(
                        p,
                        r,
                        &mut Ctx {
                            plan: &plan,
                            results: &mut results,
                            pending: &mut pending,
                            dependants: &dependants,
                            ready: &mut ready,
                            ready_at: &mut ready_at,
                            phase_left: &mut phase_left,
                            phase,
                            emitter: &emitter,
                        },
                    );
                    if plan.settings.on_tool_error == OnToolError::FailRun && ending.is_none() {
                        ending = Some((
                            Outcome::Failed,
                            format!("call `{}` failed", plan.calls[p].id),
                        ));
                        let _ = stop_tx.send(StopLevel::Graceful);
                    }
                }
            }
        }
        if ending.is_none() && phase_left == 0 && ready.is_empty() {
            phase += 1;
            if phase >= plan.phases.len() {
                break;
            }
            phase_left = start_phase(phase, &mut ready, &mut ready_at, &pending);
            continue;
        }
        if in_flight == 0 && (ending.is_some() || ready.is_empty()) {
            if ending.is_some() {
                break;
            }
            if phase_left == 0 {
                continue;
            }
            // Calls left in the phase but none ready or in flight would be a scheduler bug;
            // classify them rather than hang.
            break;
        }
        let deadline = async {
            match run_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(c) = done_rx.recv() => {
                in_flight -= 1;
                let failed = !c.result.is_ok();
                let id = c.result.id.clone();
                finish(c.pos, c.result, &mut Ctx {
                    plan: &plan,
                    results: &mut results,
                    pending: &mut pending,
                    dependants: &dependants,
                    ready: &mut ready,
                    ready_at: &mut ready_at,
                    phase_left: &mut phase_left,
                    phase,
                    emitter: &emitter,
                });
                if ending.is_none() {
                    if c.ceiling_hit {
                        ending = Some((Outcome::DeadlineExceeded, format!("call `{id}` reached deadline.tool_call_seconds")));
                        let _ = stop_tx.send(StopLevel::Graceful);
                    } else if failed && plan.settings.on_tool_error == OnToolError::FailRun {
                        ending = Some((Outcome::Failed, format!("call `{id}` failed (on_tool_error = fail_run)")));
                        let _ = stop_tx.send(StopLevel::Graceful);
                    }
                }
            }
            _ = deadline, if ending.is_none() => {
                let d = plan.settings.run_deadline.map(crate::duration::format).unwrap_or_default();
                ending = Some((Outcome::DeadlineExceeded, format!("the run deadline of {d} was reached")));
                let _ = stop_tx.send(StopLevel::Graceful);
            }
            s = signals.recv(), if signals_open => {
                match s {
                    None => signals_open = false,
                    Some(()) => {
                        if matches!(ending, Some((Outcome::Interrupted, _))) || *stop_tx.borrow() >= StopLevel::Graceful && ending.is_some() {
                            let _ = stop_tx.send(StopLevel::Force);
                        }
                        if ending.is_none() {
                            ending = Some((Outcome::Interrupted, "interrupted".into()));
                            let _ = stop_tx.send(StopLevel::Graceful);
                        }
                    }
                }
            }
        }
    }

    // Everything without a result never went out.
    let why = ending.as_ref().map_or_else(
        || "the run ended".to_string(),
        |(_, w)| format!("run ended: {w}"),
    );
    for (p, slot) in results.iter_mut().enumerate() {
        if slot.is_none() {
            let r = never_dispatched(&plan, p, "run_ended", &why);
            emitter.emit(Event::CallFinished {
                result: Box::new(r.clone()),
            });
            *slot = Some(r);
        }
    }
    let results: Vec<CallResult> = results.into_iter().flatten().collect();
    let outcome = match ending {
        Some((o, _)) => o,
        None if budget_hit => Outcome::BudgetExhausted,
        None => Outcome::Completed,
    };
    let wall_ms = millis(start.elapsed());
    let stats = stats::compute(&plan, &results, wall_ms, config.lanes.stats(), 0);
    emitter.emit(Event::RunFinished {
        outcome,
        stats: Box::new(stats.clone()),
    });
    RunReport {
        run_id: config.run_id,
        outcome,
        results,
        stats,
    }
}

struct Ctx<'a> {
    plan: &'a Plan,
    results: &'a mut Vec<Option<CallResult>>,
    pending: &'a mut Vec<usize>,
    dependants: &'a [Vec<usize>],
    ready: &'a mut BTreeSet<usize>,
    ready_at: &'a mut Vec<Option<Instant>>,
    phase_left: &'a mut usize,
    phase: usize,
    emitter: &'a Emitter,
}

/// Record a call's final result and release whatever waited for it.
fn finish(p: usize, r: CallResult, ctx: &mut Ctx<'_>) {
    ctx.emitter.emit(Event::CallFinished {
        result: Box::new(r.clone()),
    });
    ctx.results[p] = Some(r);
    if ctx.plan.calls[p].phase == ctx.phase {
        *ctx.phase_left = ctx.phase_left.saturating_sub(1);
    }
    for &d in &ctx.dependants[p] {
        ctx.pending[d] -= 1;
        if ctx.pending[d] == 0 && ctx.plan.calls[d].phase == ctx.phase {
            ctx.ready.insert(d);
            ctx.ready_at[d] = Some(Instant::now());
        }
    }
}

/// The serial steps before a call may be dispatched. `Err((kind, why))` never dispatches it.
fn pre_dispatch(
    manifest: &Manifest,
    plan: &Plan,
    call: &CallPlan,
    results: &[Option<CallResult>],
    spent: &mut f64,
    budget_hit: &mut bool,
) -> Result<serde_json::Map<String, Value>, (&'static str, String)> {
    let pos_of = |index: usize| plan.calls.iter().position(|c| c.index == index);
    for e in &call.edges {
        if !e.reason.needs_success() {
            continue;
        }
        let dep = pos_of(e.from).and_then(|p| results[p].as_ref());
        if dep.is_none_or(|r| !r.is_ok()) {
            let id = dep.map_or_else(|| format!("#{}", e.from), |r| r.id.clone());
            return Err(("dependency_failed", format!("dependency {id} failed")));
        }
    }
    let lookup = |id: &str| -> Option<&Value> {
        plan.calls
            .iter()
            .position(|c| c.id == id)
            .and_then(|p| results[p].as_ref())
            .filter(|r| r.is_ok())
            .map(|r| &r.output)
    };
    let args = call.args.resolve(&lookup).map_err(|(arg, e)| {
        let msg = match e {
            ResolveError::NoOutput(t) => format!("argument `{arg}`: call `{t}` has no output"),
            ResolveError::Path(r, m) => format!(
                "argument `{arg}`: {r} cannot be resolved: `{}` — {}",
                m.at, m.why
            ),
        };
        ("dependency_failed", msg)
    })?;
    let tool = &manifest.tools[call.tool];
    if let Some(schema) = &tool.args {
        let extra: &[&str] = if matches!(tool.kind, ToolKind::Scripted(_)) {
            &SCRIPTED_RESERVED
        } else {
            &[]
        };
        let problems = schema.check(&args, extra);
        if !problems.is_empty() {
            return Err(("guardrail", format!("guardrail: {}", problems.join("; "))));
        }
    }
    if let Some(max) = plan.settings.max_cost {
        if call.cost > 0.0 {
            if *spent + call.cost > max + 1e-9 {
                *budget_hit = true;
                return Err((
                    "budget_exhausted",
                    format!(
                        "budget exhausted ({:.4} of {max} spent; this call costs {})",
                        *spent, call.cost
                    ),
                ));
            }
            *spent += call.cost;
        }
    }
    Ok(args.into_owned())
}

fn base_result(plan: &Plan, p: usize) -> CallResult {
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

fn never_dispatched(plan: &Plan, p: usize, kind: &str, why: &str) -> CallResult {
    let mut r = base_result(plan, p);
    r.error = Some(ErrorInfo {
        kind: kind.to_string(),
        message: format!("never dispatched: {why}"),
    });
    r
}

/// The idempotency key of a write call: stable for the call across retries and resume.
pub fn idempotency_key(run_id: &str, call_id: &str) -> String {
    format!("{run_id}:{call_id}")
}

fn lease_text(run_id: &str, plan: &Plan, call: &CallPlan) -> String {
    let lanes: Vec<Value> = call
        .lanes
        .iter()
        .map(|&l| serde_json::json!({"lane": plan.lanes[l].name, "weight": call.weight}))
        .collect();
    serde_json::json!({"run_id": run_id, "call": call.id, "lanes": lanes}).to_string()
}

/// One dispatched call.
struct Job {
    pos: usize,
    acquisition: Option<Acquisition>,
    plan: Arc<Plan>,
    tool: Arc<ToolImpl>,
    lanes: Arc<dyn LaneStore>,
    inv: Invocation,
    stop_rx: watch::Receiver<StopLevel>,
    emitter: Emitter,
    run_start: Instant,
    ready_at: Instant,
    timeout: Option<Duration>,
    timeout_text: Option<String>,
    ceiling: Option<Duration>,
    retries: u32,
    /// To end the run *before* this call gives its lanes back, so that under fail_run (or a
    /// reached ceiling) no queued call slips into the freed permits.
    stop_tx: Arc<watch::Sender<StopLevel>>,
    fail_run: bool,
}

/// A lane acquisition in progress.
type LeaseFuture = BoxFuture<'static, Result<Lease, LaneError>>;

/// Lanes a call holds, and where its acquisition stands.
struct Acquisition {
    leases: Vec<(usize, Lease)>,
    /// Next position in the call's lane list still to acquire.
    next: usize,
    /// A lane wait the coordinator began (so it is queued in call order): lane, since, future.
    pending: Option<(usize, Instant, LeaseFuture)>,
    /// A rate token reserved but not yet due: lane, since, how long to wait.
    token: Option<(usize, Instant, Duration)>,
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
fn begin_acquire(
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
                if store.has_rate(lane) {
                    let wait = store.reserve_token(lane).map_err(|e| e.to_string())?;
                    if !wait.is_zero() {
                        acq.token = Some((lane, since, wait));
                        break;
                    }
                }
            }
            std::task::Poll::Ready(Err(e)) => return Err(e.to_string()),
            std::task::Poll::Pending => {
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
                        if self.lanes.has_rate(lane) {
                            let wait = self
                                .lanes
                                .reserve_token(lane)
                                .map_err(|e| never(result, "lane_store", &e.to_string()))?;
                            if !wait.is_zero() {
                                acq.token = Some((lane, Instant::now(), wait));
                            }
                        }
                    }
                    other => {
                        self.emitter.lane(|| Event::LaneReleased {
                            call: pos,
                            lane,
                            weight,
                            held: false,
                        });
                        return Err(match other {
                            Some(Err(e)) => never(result, "lane_store", &e.to_string()),
                            _ => never(
                                result,
                                "run_ended",
                                &format!(
                                    "run ended while queued on lane {}",
                                    self.plan.lanes[lane].name
                                ),
                            ),
                        });
                    }
                }
            }
            if let Some((lane, since, wait)) = acq.token.take() {
                let mut stop = self.stop_rx.clone();
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|l| *l >= StopLevel::Graceful) => {
                        let why = format!("run ended while waiting for a rate token of lane {}", self.plan.lanes[lane].name);
                        return Err(never(result, "run_ended", &why));
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
                acq.note_wait(self.lanes.as_ref(), lane, since, true);
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

    async fn run(mut self) -> Completion {
        let mut result = base_result(&self.plan, self.pos);
        result.idempotency_key = self.inv.idempotency_key.clone();
        let mut acq = match self.acquisition.take() {
            Some(a) => a,
            None => {
                return self.release(
                    Vec::new(),
                    never(&mut result, "lane_store", "no lanes"),
                    false,
                )
            }
        };
        if let Err(r) = self.finish_acquire(&mut acq, &mut result).await {
            return self.release(acq.leases, r, false);
        }
        let leases = std::mem::take(&mut acq.leases);
        let longest = acq.longest;

        let dispatched = Instant::now();
        result.queued_ms = Some(millis(dispatched.saturating_duration_since(self.ready_at)));
        result.waited_on = longest.map(|(_, l)| self.plan.lanes[l].name.clone());
        result.started_ms = Some(millis(dispatched.saturating_duration_since(self.run_start)));
        let ceiling_at = self.ceiling.map(|c| dispatched + c);
        let mut ceiling_hit = false;
        let mut attempt = 1u32;
        loop {
            self.inv.attempt = attempt;
            result.attempts = attempt;
            let pos = self.pos;
            self.emitter.emit(Event::CallStarted { call: pos, attempt });
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
                    if transient && attempt <= self.retries {
                        let wait = backoff(attempt).max(retry_after.unwrap_or_default());
                        let mut stop_wait = self.stop_rx.clone();
                        let stopped = tokio::select! {
                            _ = stop_wait.wait_for(|l| *l >= StopLevel::Graceful) => true,
                            _ = tokio::time::sleep(wait) => false,
                        };
                        if !stopped {
                            attempt += 1;
                            continue;
                        }
                        // Stopped between attempts: the last attempt's failure stands.
                    }
                    result.status = Status::Error;
                    result.error = Some(ErrorInfo {
                        kind: kind.to_string(),
                        message,
                    });
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
                            kind: "timeout".into(),
                            message: format!(
                                "tool '{}' exceeded its {text} timeout",
                                self.inv.tool
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
                            kind: "timeout".into(),
                            message: format!("tool '{}' reached the run's tool_call_seconds ceiling of {text}; the run ends", self.inv.tool),
                        });
                    }
                    Some(StopCause::RunEnded) | None => {
                        let idempotent = self.plan.calls[self.pos].idempotent;
                        result.status = if idempotent {
                            Status::Cancelled
                        } else {
                            Status::Indeterminate
                        };
                        result.error = Some(ErrorInfo {
                            kind: "run_ended".into(),
                            message: if idempotent {
                                "cancelled in flight: safe to call again".into()
                            } else {
                                "cancelled in flight: the side effect may have landed".into()
                            },
                        });
                    }
                },
            }
            break;
        }
        result.event = result.status.event();
        result.duration_ms = Some(millis(dispatched.elapsed()));
        self.release(leases, result, ceiling_hit)
    }

    /// Give the lanes back in reverse order of acquisition and package the result.
    fn release(
        &self,
        mut leases: Vec<(usize, Lease)>,
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
        let weight = self.plan.calls[self.pos].weight;
        while let Some((lane, lease)) = leases.pop() {
            drop(lease);
            let pos = self.pos;
            self.emitter.lane(|| Event::LaneReleased {
                call: pos,
                lane,
                weight,
                held: true,
            });
        }
        Completion {
            pos: self.pos,
            result,
            ceiling_hit,
        }
    }
}

fn never(result: &mut CallResult, kind: &str, why: &str) -> CallResult {
    let mut r = result.clone();
    r.status = Status::NeverDispatched;
    r.event = Status::NeverDispatched.event();
    r.error = Some(ErrorInfo {
        kind: kind.to_string(),
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

/// A run id: time-ordered and unique enough to key idempotency across runs.
pub fn new_run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs:x}-{:08x}", fastrand::u32(..))
}

/// Resolves never: for callers with no signals to deliver.
pub fn no_signals() -> (mpsc::UnboundedSender<()>, mpsc::UnboundedReceiver<()>) {
    mpsc::unbounded_channel()
}

#[allow(dead_code)]
fn assert_send<F: Future + Send>(_: F) {}
