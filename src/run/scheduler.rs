//! The coordinator: one task that owns the run's state and dispatches calls.
//!
//! A call becomes *ready* when its phase has started and every in-phase edge has resolved.
//! Ready calls go through pre-dispatch one at a time, lowest call index first (a call still
//! waiting on its edges never holds back later independent calls): dependency success,
//! reference resolution, the argument guardrail and the budget. Then the lanes that are free
//! are taken at once and the first that is not is queued for — still in call order — and the
//! call is spawned as its own task ([`super::call`]). Results come back over a channel in any
//! order; they are stored by index, so the report is in call order.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::call::{begin_acquire, never_dispatched, Completion, Emitter, Job};
use super::cassette::Cassette;
use super::gate::{Approvals, Approver, Gate, GateJob, Verdict};
use super::journal::{Journal, Resume};
use super::lanes::LaneStore;
use super::stats;
use crate::batch::OnToolError;
use crate::duration::millis;
use crate::events::ErrorKind;
use crate::events::{CallResult, Event, LaneInfo, Outcome, Stats, Status};
use crate::manifest::Manifest;
use crate::plan::Plan;
use crate::reference::ResolveError;
use crate::tools::{Invocation, RunInfo, StopLevel, ToolContext, ToolImpl};

/// Everything a run needs besides the plan.
pub struct RunConfig {
    pub run_id: String,
    pub lanes: Arc<dyn LaneStore>,
    /// Where events go (`None`: nobody listens).
    pub events: Option<mpsc::UnboundedSender<Event>>,
    /// Send per-lane wait/acquire/release events (only a live display needs them).
    pub lane_events: bool,
    /// MCP sessions (started for annotations before planning, or on first call).
    pub mcp: Option<Arc<crate::tools::mcp::McpHub>>,
    /// `--approve`.
    pub approvals: Approvals,
    /// Who answers what `--approve` did not (the terminal, in the binary).
    pub approver: Arc<dyn Approver>,
    /// `--journal`: where dispatches and results are recorded.
    pub journal: Option<Journal>,
    /// `--resume`: what an earlier run's journal holds.
    pub resume: Option<Arc<Resume>>,
    /// `--retry-indeterminate`.
    pub retry_indeterminate: bool,
    /// `--record`: keep fingerprints and resolved arguments for the cassette.
    pub record: bool,
    /// `--replay`: answer calls from this cassette instead of invoking tools.
    pub replay: Option<Arc<Cassette>>,
    /// When the run began, if before this batch (a stream's later chunks): times and the run
    /// deadline count from here. `None`: now.
    pub start: Option<Instant>,
    /// What the run already spent before this batch (a stream's earlier chunks), against
    /// the plan's `max_cost`.
    pub spent: f64,
}

/// The finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run_id: String,
    pub outcome: Outcome,
    pub results: Vec<CallResult>,
    pub stats: Stats,
    /// Each call's fingerprint and resolved arguments (when recording).
    pub fingerprints: Vec<Option<String>>,
    pub recorded_args: Vec<Option<Value>>,
    /// What the run has spent, this batch and any before it (see [`RunConfig::spent`]).
    pub spent: f64,
}

/// How many completions the coordinator may leave unread while it dispatches a wide phase:
/// reading them as it goes keeps memory flat when calls finish as fast as they start.
const DRAIN_EVERY: usize = 256;

/// How many calls beyond a lane's limit may wait in its queue as tasks. Further calls that
/// need the lane are *parked* — kept as an index (and their resolved arguments) until the
/// queue shortens — so a batch of any width waits in bounded memory (a waiting task costs a
/// few kB). Parked calls keep call order: a call never passes an earlier one parked on a lane
/// it needs.
const QUEUE_AHEAD: usize = 1024;

/// What pre-dispatch decided for a call that may go ahead.
enum Ready {
    /// Dispatch it, with these resolved arguments (`None`: the literal ones).
    Go(Option<Map<String, Value>>),
    /// The journal of an earlier run already settled it.
    Reuse(Box<CallResult>),
}

/// The run's state, owned by the coordinator task.
struct Coordinator {
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    lanes: Arc<dyn LaneStore>,
    run: Arc<RunInfo>,
    tools: Vec<Arc<ToolImpl>>,
    emitter: Emitter,
    start: Instant,
    results: Vec<Option<CallResult>>,
    /// In-phase edges still unresolved, per call.
    pending: Vec<u32>,
    dependants: Vec<Vec<usize>>,
    ready_at: Vec<Option<Instant>>,
    ready: BTreeSet<usize>,
    phase: usize,
    phase_left: usize,
    in_flight: usize,
    /// Per lane: dispatched calls that use it and have not completed; and how many may.
    outstanding: Vec<usize>,
    lane_cap: Vec<usize>,
    /// Per lane: parked calls (see [`QUEUE_AHEAD`]), their resolved arguments, and how many.
    parked: Vec<BTreeSet<usize>>,
    parked_args: std::collections::HashMap<usize, Option<Map<String, Value>>>,
    parked_n: usize,
    /// A completion may have made room for parked calls.
    recheck: bool,
    done_tx: mpsc::UnboundedSender<Completion>,
    stop_tx: Arc<watch::Sender<StopLevel>>,
    stop_rx: watch::Receiver<StopLevel>,
    ending: Option<(Outcome, String)>,
    budget_hit: bool,
    spent: f64,
    /// Calls whose cost is reserved against the budget (only kept under a budget): a call
    /// that is then never dispatched gives its reservation back.
    reserved: Vec<bool>,
    http_429: u64,
    journal: Option<Journal>,
    resume: Option<Arc<Resume>>,
    retry_indeterminate: bool,
    /// Each call's fingerprint (tool and resolved arguments), once resolved.
    fps: Vec<Option<String>>,
    /// Calls whose result came from the journal.
    reused: Vec<bool>,
    /// Whether calls are fingerprinted (journal, resume, record or replay).
    fingerprints: bool,
    record: bool,
    replay: Option<Arc<Cassette>>,
    recorded_args: Vec<Option<Value>>,
    /// Calls waiting at the gate (approval, before_call hook), and where they go.
    gating: usize,
    gate_tx: Option<mpsc::UnboundedSender<GateJob>>,
    /// Results handed to the after_call hook so far (they go in call order).
    after_next: usize,
    after_tx: Option<mpsc::UnboundedSender<Value>>,
}

impl Coordinator {
    fn start_phase(&mut self) {
        let ph = &self.plan.phases[self.phase];
        self.phase_left = ph.end - ph.start;
        let now = Instant::now();
        for p in ph.start..ph.end {
            if self.pending[p] == 0 {
                self.ready.insert(p);
                self.ready_at[p] = Some(now);
            }
        }
    }

    /// End the run (first reason wins): nothing new is dispatched, in-flight calls stop.
    fn end_run(&mut self, outcome: Outcome, why: String) {
        if self.ending.is_none() {
            self.ending = Some((outcome, why));
            self.stop_tx.send_if_modified(|l| {
                let running = *l == StopLevel::Running;
                if running {
                    *l = StopLevel::Graceful;
                }
                running
            });
        }
    }

    /// Hand every result that now follows its predecessors to the after_call hook.
    fn feed_after_hook(&mut self) {
        let Some(tx) = &self.after_tx else { return };
        while let Some(Some(r)) = self.results.get(self.after_next) {
            let c = &self.plan.calls[self.after_next];
            let _ = tx.send(serde_json::json!({
                "run_id": self.run.run_id,
                "call": {"index": c.index, "id": c.id, "tool": c.tool_name},
                "result": r,
            }));
            self.after_next += 1;
        }
    }

    /// A result the journal already holds: report it, do not record it again.
    fn finish_reused(&mut self, p: usize, r: CallResult) {
        self.reused[p] = true;
        self.finish(p, r);
    }

    /// Record a call's final result and release whatever waited for it.
    fn finish(&mut self, p: usize, r: CallResult) {
        if r.started_ms.is_none() && self.reserved.get(p).copied().unwrap_or(false) {
            // Never dispatched (refused at the gate, no lane, the run ended): not spent.
            self.reserved[p] = false;
            self.spent -= self.plan.calls[p].cost;
        }
        if let Some(j) = &self.journal {
            if !self.reused[p] {
                j.record(super::journal::Journal::result(
                    self.fps[p].as_deref().unwrap_or(""),
                    &r,
                ));
            }
        }
        let failed = !r.is_ok();
        let id = r.id.clone();
        self.emitter.emit_finished(&r);
        self.results[p] = Some(r);
        self.feed_after_hook();
        if self.plan.calls[p].phase == self.phase {
            self.phase_left = self.phase_left.saturating_sub(1);
        }
        for i in 0..self.dependants[p].len() {
            let d = self.dependants[p][i];
            self.pending[d] -= 1;
            if self.pending[d] == 0 && self.plan.calls[d].phase == self.phase {
                self.ready.insert(d);
                self.ready_at[d] = Some(Instant::now());
            }
        }
        if failed && self.plan.settings.on_tool_error == OnToolError::FailRun {
            self.end_run(
                Outcome::Failed,
                format!("call `{id}` failed (on_tool_error = fail_run)"),
            );
        }
    }

    fn completed(&mut self, c: Completion) {
        self.in_flight -= 1;
        for &lane in &self.plan.calls[c.pos].lanes {
            self.outstanding[lane] -= 1;
        }
        self.recheck |= self.parked_n > 0;
        self.http_429 += u64::from(c.rejections);
        let id = c.result.id.clone();
        self.finish(c.pos, c.result);
        if c.ceiling_hit {
            self.end_run(
                Outcome::DeadlineExceeded,
                format!("call `{id}` reached deadline.tool_call_seconds"),
            );
        }
    }

    /// The lane `p` must park on, if any: one whose queue is full, or where an earlier call is
    /// parked already.
    fn park_lane(&self, p: usize) -> Option<usize> {
        self.plan.calls[p].lanes.iter().copied().find(|&lane| {
            self.outstanding[lane] >= self.lane_cap[lane]
                || self.parked[lane].first().is_some_and(|&q| q < p)
        })
    }

    /// Dispatch parked calls that now have room, lowest call index first on each lane.
    fn unpark(&mut self) {
        while self.recheck && self.ending.is_none() {
            self.recheck = false;
            for lane in 0..self.parked.len() {
                while let Some(&q) = self.parked[lane].first() {
                    if self.outstanding[lane] >= self.lane_cap[lane] || self.ending.is_some() {
                        break;
                    }
                    self.parked[lane].remove(&q);
                    self.parked_n -= 1;
                    let args = self.parked_args.remove(&q).flatten();
                    // May park it again on another of its lanes, or complete it at once.
                    let before = self.parked_n;
                    self.spawn(q, args);
                    // It went out: another pass, for calls re-parked on lanes already passed.
                    // (The lowest parked call always goes out when its lanes have room, so a
                    // run with nothing in flight cannot be left with parked calls.)
                    self.recheck |= self.parked_n == before && self.parked_n > 0;
                }
            }
        }
    }

    /// Pre-dispatch every ready call, in call order, and spawn those that pass.
    fn dispatch_ready(&mut self, done_rx: &mut mpsc::UnboundedReceiver<Completion>) {
        let mut since_drain = 0;
        self.unpark();
        while self.ending.is_none() {
            let Some(p) = self.ready.pop_first() else {
                break;
            };
            match self.pre_dispatch(p) {
                Ok(Ready::Go(resolved)) => self.gate_or_spawn(p, resolved),
                Ok(Ready::Reuse(r)) => self.finish_reused(p, *r),
                Err((kind, why)) => {
                    let r = never_dispatched(&self.plan, p, kind, &why);
                    self.finish(p, r);
                }
            }
            since_drain += 1;
            if since_drain >= DRAIN_EVERY {
                since_drain = 0;
                while let Ok(c) = done_rx.try_recv() {
                    self.completed(c);
                }
            }
            self.unpark();
        }
    }

    /// The serial steps before a call may be dispatched: `Ok(resolved arguments, if any
    /// reference or escape had to be filled)`, or `Err((kind, why))` to never dispatch it.
    fn pre_dispatch(&mut self, p: usize) -> Result<Ready, (ErrorKind, String)> {
        let plan = &self.plan;
        let call = &plan.calls[p];
        for e in &call.edges {
            if !e.reason.needs_success() {
                continue;
            }
            if self.results[e.from].as_ref().is_none_or(|r| !r.is_ok()) {
                return Err((
                    ErrorKind::DependencyFailed,
                    format!("dependency {} failed", plan.calls[e.from].id),
                ));
            }
        }
        if let Some(ext) = &plan.external {
            if let Some(id) = call
                .external_deps
                .iter()
                .find(|id| ext.get(*id).is_none_or(Option::is_none))
            {
                return Err((
                    ErrorKind::DependencyFailed,
                    format!("dependency {id} failed"),
                ));
            }
        }
        let results = &self.results;
        let lookup = |id: &str| -> Option<&Value> {
            match plan.ids.get(id) {
                Some(&i) => results[i].as_ref().filter(|r| r.is_ok()).map(|r| &r.output),
                None => plan
                    .external
                    .as_ref()
                    .and_then(|e| e.get(id))
                    .and_then(Option::as_ref),
            }
        };
        let args = call.args.resolve(&lookup).map_err(|(arg, e)| {
            let msg = match e {
                ResolveError::NoOutput(t) => format!("argument `{arg}`: call `{t}` has no output"),
                ResolveError::Path(r, m) => {
                    format!(
                        "argument `{arg}`: {r} cannot be resolved: `{}` — {}",
                        m.at, m.why
                    )
                }
            };
            (ErrorKind::DependencyFailed, msg)
        })?;
        let tool = &self.manifest.tools[call.tool];
        if let Some(schema) = &tool.args {
            let extra = tool.kind.reserved();
            let problems = schema.check(&args, extra);
            if !problems.is_empty() {
                return Err((
                    ErrorKind::Guardrail,
                    format!(
                        "guardrail: {}",
                        problems
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                ));
            }
        }
        if self.fingerprints {
            let target = tool.kind.target();
            let fp = super::journal::fingerprint(&call.tool_name, &target, &args);
            if self.record {
                self.recorded_args[p] = Some(Value::Object(args.clone().into_owned()));
            }
            if let Some(cassette) = &self.replay {
                self.fps[p] = Some(fp.clone());
                return match cassette.take(&call.id, &fp) {
                    Ok(r) => Ok(Ready::Reuse(Box::new(r))),
                    Err(why) => Err((ErrorKind::ReplayMiss, why)),
                };
            }
            if let Some(resume) = &self.resume {
                let key = (call.id.clone(), fp.clone());
                if let Some(r) = resume.results.get(&key) {
                    self.fps[p] = Some(fp);
                    return Ok(Ready::Reuse(Box::new(r.clone())));
                }
                if resume.in_flight.contains(&key) && !call.idempotent && !self.retry_indeterminate
                {
                    let mut r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, "");
                    r.status = Status::Indeterminate;
                    r.event = Status::Indeterminate.event();
                    r.idempotency_key = call
                        .write
                        .then(|| idempotency_key(&self.run.run_id, &call.id));
                    r.error = Some(crate::events::ErrorInfo {
                        kind: ErrorKind::RunEnded,
                        message: "cancelled in flight: the side effect may have landed (in flight when the journaled run stopped; --retry-indeterminate sends it again with the same idempotency key)".into(),
                    });
                    self.fps[p] = Some(fp);
                    return Ok(Ready::Reuse(Box::new(r)));
                }
            }
            self.fps[p] = Some(fp);
        }
        if let Some(max) = plan.settings.max_cost {
            if call.cost > 0.0 {
                if self.spent + call.cost > max + 1e-9 {
                    self.budget_hit = true;
                    return Err((
                        ErrorKind::BudgetExhausted,
                        format!(
                            "budget exhausted ({} of {max} spent; this call costs {})",
                            crate::events::trim_float(self.spent),
                            call.cost
                        ),
                    ));
                }
                self.spent += call.cost;
                self.reserved[p] = true;
            }
        }
        Ok(Ready::Go(match args {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(m) => Some(m),
        }))
    }

    /// Calls that need approval or a before_call hook go through the gate (serially, in call
    /// order); the rest are spawned at once.
    fn gate_or_spawn(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        let call = &self.plan.calls[p];
        let needs_approval = self.manifest.tools[call.tool].requires_approval;
        match &self.gate_tx {
            Some(tx) if needs_approval || self.manifest.hooks.before_call.is_some() => {
                let args = resolved.clone().unwrap_or_else(|| call.args.value.clone());
                let job = GateJob {
                    pos: p,
                    id: call.id.clone(),
                    tool: call.tool_name.clone(),
                    needs_approval,
                    args,
                    resolved,
                };
                if tx.send(job).is_ok() {
                    self.gating += 1;
                } else {
                    let r = never_dispatched(
                        &self.plan,
                        p,
                        ErrorKind::Guardrail,
                        "the approval gate is gone",
                    );
                    self.finish(p, r);
                }
            }
            _ => self.spawn(p, resolved),
        }
    }

    fn spawn(&mut self, p: usize, resolved: Option<Map<String, Value>>) {
        if let Some(lane) = self.park_lane(p) {
            self.parked[lane].insert(p);
            self.parked_args.insert(p, resolved);
            self.parked_n += 1;
            return;
        }
        let call = &self.plan.calls[p];
        let acquisition = match begin_acquire(&self.lanes, &self.plan, p, &self.emitter) {
            Ok(a) => a,
            Err(e) => {
                let r = never_dispatched(&self.plan, p, ErrorKind::LaneStore, &e);
                self.finish(p, r);
                return;
            }
        };
        let tool = &self.manifest.tools[call.tool];
        let inv = Invocation {
            plan: self.plan.clone(),
            pos: p,
            run: self.run.clone(),
            resolved,
            idempotency_key: call
                .write
                .then(|| idempotency_key(&self.run.run_id, &call.id)),
            attempt: 1,
        };
        let job = Job {
            pos: p,
            acquisition: Some(acquisition),
            plan: self.plan.clone(),
            tool: self.tools[call.tool].clone(),
            lanes: self.lanes.clone(),
            inv,
            stop_rx: self.stop_rx.clone(),
            emitter: self.emitter.clone(),
            run_start: self.start,
            ready_at: self.ready_at[p].unwrap_or_else(Instant::now),
            timeout: tool.timeout,
            timeout_text: tool.timeout_text.clone(),
            ceiling: self.plan.settings.tool_call_deadline,
            retries: if tool.idempotent { tool.retries } else { 0 },
            stop_tx: self.stop_tx.clone(),
            fail_run: self.plan.settings.on_tool_error == OnToolError::FailRun,
            journal: self.journal.clone().zip(self.fps.get(p).cloned().flatten()),
        };
        self.in_flight += 1;
        for &lane in &call.lanes {
            self.outstanding[lane] += 1;
        }
        let mut fut = Box::pin(job.run());
        if self.tools[call.tool].inline() {
            // An in-process tool: poll it here once, and a call that completes at once (no
            // lane wait, no latency) is finished without a task or a channel round trip.
            // Whatever it registered a waker for is polled again by the task below, which
            // registers the real waker.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            if let std::task::Poll::Ready(mut c) = std::future::Future::poll(fut.as_mut(), &mut cx)
            {
                // Lanes first, as a spawned call gives them back before its completion is read.
                drop(std::mem::take(&mut c.held));
                self.completed(c);
                return;
            }
        }
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let mut c = fut.await;
            let held = std::mem::take(&mut c.held);
            let _ = done.send(c);
            drop(held);
        });
    }
}

/// [`execute`] as a task on the runtime's workers rather than on the thread that waits for
/// it: a call's completion then wakes the coordinator on a worker that is already running,
/// not a parked thread (a futex and a context switch per call otherwise).
pub async fn execute_spawned(
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    config: RunConfig,
    signals: mpsc::UnboundedReceiver<()>,
) -> RunReport {
    match tokio::spawn(execute(manifest, plan, config, signals)).await {
        Ok(report) => report,
        // Only a panic in the coordinator (a bug) gets here: it goes on as if not spawned.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Run `plan`. `signals` delivers SIGINT/SIGTERM: the first stops gracefully, the second at
/// once. Returns when every call has a result.
pub async fn execute(
    manifest: Arc<Manifest>,
    plan: Arc<Plan>,
    config: RunConfig,
    mut signals: mpsc::UnboundedReceiver<()>,
) -> RunReport {
    let start = config.start.unwrap_or_else(Instant::now);
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
    let mut pending = vec![0u32; n];
    let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (p, c) in plan.calls.iter().enumerate() {
        for e in &c.edges {
            if plan.calls[e.from].phase == c.phase {
                pending[p] += 1;
                dependants[e.from].push(p);
            }
        }
    }
    let plan_manifest_path = manifest.path.display().to_string();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Completion>();
    let (stop_tx, stop_rx) = watch::channel(StopLevel::Running);
    let fingerprints = config.journal.is_some()
        || config.resume.is_some()
        || config.record
        || config.replay.is_some();
    let mut co = Coordinator {
        tools: {
            let turn = plan
                .lanes
                .iter()
                .find(|l| l.key == crate::plan::LaneKey::Turn)
                .and_then(|l| l.limit);
            let ctx = ToolContext::for_tools(
                &manifest.tools,
                turn.map(|n| n as usize),
                config.mcp.clone(),
            );
            manifest
                .tools
                .iter()
                .map(|t| ToolImpl::from_tool(t, &ctx))
                .collect()
        },
        manifest,
        run: Arc::new(RunInfo {
            run_id: config.run_id.clone(),
            tenant: plan.settings.tenant.clone(),
            manifest: plan_manifest_path.clone(),
        }),
        plan: plan.clone(),
        lanes: config.lanes.clone(),
        emitter: emitter.clone(),
        start,
        results: vec![None; n],
        pending,
        dependants,
        ready_at: vec![None; n],
        ready: BTreeSet::new(),
        phase: 0,
        phase_left: 0,
        in_flight: 0,
        outstanding: vec![0; plan.lanes.len()],
        lane_cap: plan
            .lanes
            .iter()
            .map(|l| match (l.limit, l.rate) {
                (Some(n), _) => n as usize + QUEUE_AHEAD,
                (None, Some(_)) => 4 * QUEUE_AHEAD,
                (None, None) => usize::MAX,
            })
            .collect(),
        parked: vec![BTreeSet::new(); plan.lanes.len()],
        parked_args: std::collections::HashMap::new(),
        parked_n: 0,
        recheck: false,
        done_tx,
        stop_tx: Arc::new(stop_tx),
        stop_rx,
        ending: None,
        budget_hit: false,
        spent: config.spent,
        reserved: vec![
            false;
            if plan.settings.max_cost.is_some() {
                n
            } else {
                0
            }
        ],
        http_429: 0,
        journal: config.journal.clone(),
        resume: config.resume.clone(),
        retry_indeterminate: config.retry_indeterminate,
        // Kept only when used: at 100,000 calls each is megabytes.
        fps: vec![None; if fingerprints { n } else { 0 }],
        reused: vec![false; n],
        fingerprints,
        record: config.record,
        replay: config.replay.clone(),
        recorded_args: vec![None; if config.record { n } else { 0 }],
        gating: 0,
        gate_tx: None,
        after_next: 0,
        after_tx: None,
    };
    let needs_gate = co.manifest.hooks.before_call.is_some()
        || co.manifest.tools.iter().any(|t| t.requires_approval);
    let (verdict_tx, mut verdict_rx) = mpsc::unbounded_channel::<Verdict>();
    let gate_task = needs_gate.then(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        co.gate_tx = Some(tx);
        let gate = Gate {
            approvals: config.approvals.clone(),
            approver: config.approver.clone(),
            before_call: co.manifest.hooks.before_call.clone(),
            run_id: config.run_id.clone(),
        };
        tokio::spawn(gate.serve(rx, verdict_tx))
    });
    let after_task = co.manifest.hooks.after_call.clone().map(|argv| {
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        co.after_tx = Some(tx);
        tokio::spawn(async move {
            // An observer: its failures never change a result.
            while let Some(input) = rx.recv().await {
                let _ = super::gate::run_hook(&argv, &input).await;
            }
        })
    });
    let run_deadline = plan.settings.run_deadline.map(|d| start + d);
    let mut signals_open = true;
    if !plan.phases.is_empty() {
        co.start_phase();
    }

    loop {
        co.dispatch_ready(&mut done_rx);
        if co.ending.is_none() && co.phase_left == 0 && co.ready.is_empty() {
            co.phase += 1;
            if co.phase >= plan.phases.len() {
                break;
            }
            co.start_phase();
            continue;
        }
        if co.in_flight == 0
            && (co.ending.is_some() || (co.ready.is_empty() && co.gating == 0 && co.parked_n == 0))
        {
            // Ending with nothing in flight, or (a bug) calls left that nothing will release:
            // classify them below rather than hang.
            break;
        }
        let deadline = async {
            match run_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(c) = done_rx.recv() => co.completed(c),
            Some(v) = verdict_rx.recv(), if co.gating > 0 => {
                co.gating -= 1;
                match v {
                    Verdict::Proceed { pos, .. } if co.ending.is_some() => {
                        let r = never_dispatched(&plan, pos, ErrorKind::RunEnded, "the run ended while it waited for approval");
                        co.finish(pos, r);
                    }
                    Verdict::Proceed { pos, resolved } => co.spawn(pos, resolved),
                    Verdict::Refuse { pos, kind, why } => {
                        let r = never_dispatched(&plan, pos, kind, &why);
                        co.finish(pos, r);
                    }
                }
            }
            _ = deadline, if co.ending.is_none() => {
                let d = plan.settings.run_deadline.map(crate::duration::format).unwrap_or_default();
                co.end_run(Outcome::DeadlineExceeded, format!("the run deadline of {d} was reached"));
            }
            s = signals.recv(), if signals_open => match s {
                None => signals_open = false,
                Some(()) if co.ending.is_some() => {
                    // A second signal (or one after the run began ending): stop at once.
                    co.stop_tx.send_replace(StopLevel::Force);
                }
                Some(()) => co.end_run(Outcome::Interrupted, "interrupted".into()),
            },
        }
    }

    // Everything without a result never went out.
    let why = co.ending.as_ref().map_or_else(
        || "the run ended".to_string(),
        |(_, w)| format!("run ended: {w}"),
    );
    for p in 0..n {
        if co.results[p].is_none() {
            let r = never_dispatched(&plan, p, ErrorKind::RunEnded, &why);
            emitter.emit_finished(&r);
            co.results[p] = Some(r);
        }
    }
    co.feed_after_hook();
    if let Some(gate) = gate_task {
        // A question nobody answered must not keep the process alive.
        gate.abort();
    }
    co.after_tx = None;
    if let Some(after) = after_task {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), after).await;
    }
    let outcome = match &co.ending {
        Some((o, _)) => *o,
        None if co.budget_hit => Outcome::BudgetExhausted,
        None => Outcome::Completed,
    };
    // Mapped, not flattened, so the vector is reused in place (no second copy of every result).
    let results: Vec<CallResult> = std::mem::take(&mut co.results)
        .into_iter()
        .enumerate()
        .map(|(p, r)| r.unwrap_or_else(|| never_dispatched(&plan, p, ErrorKind::RunEnded, &why)))
        .collect();
    let stats = stats::compute(
        &plan,
        &results,
        millis(start.elapsed()),
        config.lanes.stats(),
        co.http_429,
    );
    emitter.emit(Event::RunFinished {
        outcome,
        stats: Box::new(stats.clone()),
    });
    RunReport {
        run_id: config.run_id,
        outcome,
        results,
        stats,
        fingerprints: std::mem::take(&mut co.fps),
        recorded_args: std::mem::take(&mut co.recorded_args),
        spent: co.spent,
    }
}

/// The idempotency key of a write call: stable for the call across retries and resume.
pub fn idempotency_key(run_id: &str, call_id: &str) -> String {
    format!("{run_id}:{call_id}")
}

/// A run id: time-ordered and unique enough to key idempotency across runs.
pub fn new_run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs:x}-{:08x}", fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    //! The scheduler on virtual time: scripted tools sleep on tokio's paused clock, so these
    //! assert exact makespans and orderings from the collected events, never wall-clock time.

    use std::path::PathBuf;

    use super::*;
    use crate::batch::Batch;
    use crate::error::SourceFile;
    use crate::events::Status;
    use crate::plan::{build, PlanOptions};
    use crate::run::lanes::MemoryLanes;

    const MANIFEST: &str = r#"
[concurrency]
max_concurrent_tools = 8
[concurrency.per_tool]
pair = 2
[tools.pair]
kind = "scripted"
effect = "read"
latency = "300ms"
[tools.read]
kind = "scripted"
effect = "read"
latency = "200ms"
output = { items = [{ id = "o-17" }] }
[tools.write]
kind = "scripted"
effect = "write"
latency = "500ms"
[tools.alone]
kind = "scripted"
effect = "write"
idempotent = true
parallel_safe = false
latency = "100ms"
[tools.stuck]
kind = "scripted"
effect = "read"
hang = true
timeout = "700ms"
"#;

    async fn run(batch: &str) -> (RunReport, Vec<Event>) {
        let m = Arc::new(
            Manifest::parse(
                SourceFile::new("t.toml", MANIFEST),
                PathBuf::from("/t/tools.toml"),
            )
            .unwrap(),
        );
        let (b, _) = Batch::parse(SourceFile::new("b.yaml", batch)).unwrap();
        let plan = Arc::new(build(&m, &b, &PlanOptions::default()).unwrap());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let config = RunConfig {
            run_id: "run-test".into(),
            lanes: Arc::new(MemoryLanes::new(&plan.lanes)),
            events: Some(tx),
            lane_events: true,
            mcp: None,
            approvals: Approvals::Ask,
            approver: Arc::new(crate::run::gate::NoApprover),
            journal: None,
            resume: None,
            retry_indeterminate: false,
            record: false,
            replay: None,
            start: None,
            spent: 0.0,
        };
        let (_signals, sig_rx) = mpsc::unbounded_channel();
        let report = execute(m, plan, config, sig_rx).await;
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (report, events)
    }

    /// The most permits of `lane` held at once, from the lane events.
    fn peak_held(events: &[Event], lane: usize) -> u32 {
        let (mut now, mut peak) = (0u32, 0u32);
        for e in events {
            match e {
                Event::LaneAcquired {
                    lane: l, weight, ..
                } if *l == lane => {
                    now += weight;
                    peak = peak.max(now);
                }
                Event::LaneReleased {
                    lane: l,
                    weight,
                    held: true,
                    ..
                } if *l == lane => now -= weight,
                _ => {}
            }
        }
        peak
    }

    #[tokio::test(start_paused = true)]
    async fn a_wide_batch_waits_as_parked_indices_not_tasks_and_keeps_call_order() {
        // 3,000 calls through a lane of 2: without parking each would be a waiting task.
        let mut batch = String::from("calls:\n");
        for _ in 0..3000 {
            batch.push_str("  - tool: pair\n");
        }
        batch.push_str("  - tool: read\n");
        let running = tokio::spawn(async move { run(&batch).await });
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert!(alive < 1100, "{alive} tasks alive for 3,000 queued calls");
        let (report, events) = running.await.unwrap();
        assert!(report.results.iter().all(|r| r.status == Status::Ok));
        // Two at a time, 300 ms each: 1,500 rounds, and never more than two in the lane.
        assert_eq!(report.stats.wall_ms, 1500 * 300);
        let lane = report
            .stats
            .lanes
            .iter()
            .position(|l| l.lane == "tool:pair")
            .unwrap();
        assert_eq!(peak_held(&events, lane), 2);
        // Parked calls still start in call order.
        let starts: Vec<u64> = report.results[..3000]
            .iter()
            .map(|r| r.started_ms.unwrap())
            .collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "out of order");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_lane_binds_exactly() {
        let (report, events) = run(
            "- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n- tool: pair\n",
        )
        .await;
        let tool_lane = match &events[0] {
            Event::RunStarted { lanes, .. } => {
                lanes.iter().position(|l| l.name == "tool:pair").unwrap()
            }
            _ => panic!("the first event is RunStarted"),
        };
        assert_eq!(peak_held(&events, tool_lane), 2);
        assert_eq!(report.stats.wall_ms, 900);
        let tool = report
            .stats
            .lanes
            .iter()
            .find(|l| l.lane == "tool:pair")
            .unwrap();
        assert_eq!(tool.peak_in_flight, 2);
        assert_eq!(tool.waits, 4);
        // Queued calls were dispatched in call order.
        let starts: Vec<u64> = report
            .results
            .iter()
            .map(|r| r.started_ms.unwrap())
            .collect();
        assert_eq!(starts, vec![0, 0, 300, 300, 600, 600]);
    }

    #[tokio::test(start_paused = true)]
    async fn references_and_write_chain_order_dispatch() {
        let (report, _) = run(
            "- { id: a, tool: read }\n- { id: w1, tool: write, args: { x: \"${a.items[0].id}\" } }\n- { id: w2, tool: write }\n- { id: b, tool: read }\n",
        )
        .await;
        let r = &report.results;
        assert!(r.iter().all(|x| x.status == Status::Ok));
        assert_eq!(r[1].started_ms, Some(200), "w1 waited for a's output");
        assert_eq!(r[1].output, serde_json::json!({"x": "o-17"}));
        assert_eq!(r[2].started_ms, Some(700), "w2 waited for w1 to resolve");
        assert_eq!(r[3].started_ms, Some(0), "reads never wait for writes");
        assert_eq!(report.stats.critical_path, vec!["a", "w1", "w2"]);
        assert_eq!(report.stats.critical_path_ms, 1200);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_phase_has_nothing_else_in_flight() {
        let (report, events) = run("- tool: pair\n- tool: alone\n- tool: pair\n").await;
        assert_eq!(report.results[1].started_ms, Some(300));
        assert_eq!(report.results[2].started_ms, Some(400));
        let mut running = 0;
        for e in &events {
            match e {
                Event::CallStarted { call, .. } => {
                    assert!(
                        *call != 1 || running == 0,
                        "the lone call started beside another"
                    );
                    running += 1;
                }
                Event::CallFinished { .. } => running -= 1,
                _ => {}
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_tool_times_out_at_its_own_ceiling() {
        let (report, _) = run("- tool: stuck\n- tool: pair\n").await;
        assert_eq!(report.results[0].status, Status::TimedOut);
        assert_eq!(report.results[0].duration_ms, Some(700));
        assert_eq!(report.results[1].status, Status::Ok);
        assert_eq!(report.stats.wall_ms, 700);
        assert_eq!(report.outcome, Outcome::Completed);
    }
}
