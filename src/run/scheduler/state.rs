//! The coordinator's state, and what happens when a call settles: its result is recorded (and
//! journaled), whatever waited on it is released, and under `fail_run` a failure ends the run.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::caching::CacheAnswer;
use super::{RunConfig, QUEUE_AHEAD};
use crate::batch::OnToolError;
use crate::events::{CallResult, ErrorKind, Outcome};
use crate::manifest::Manifest;
use crate::manifest::TenantWindow;
use crate::plan::{LaneSpec, Plan};
use crate::run::cache::{Cache, Lead};
use crate::run::call::{Completion, Emitter};
use crate::run::cassette::Cassette;
use crate::run::gate::GateJob;
use crate::run::journal::{Journal, Resume};
use crate::run::store::{Backends, Claims, LaneFigures, Lanes, TenantSpend};
use crate::tools::{RunInfo, StopLevel, ToolImpl};

/// The run's state, owned by the coordinator task.
pub(super) struct Coordinator {
    pub(super) manifest: Arc<Manifest>,
    pub(super) plan: Arc<Plan>,
    /// The store's facets the run uses: its lanes and their figures, its backends, its
    /// tenant's spend.
    pub(super) lanes: Arc<dyn Lanes>,
    pub(super) figures: Arc<dyn LaneFigures>,
    pub(super) backends: Arc<dyn Backends>,
    pub(super) spend: Arc<dyn TenantSpend>,
    pub(super) run: Arc<RunInfo>,
    pub(super) tools: Vec<Arc<ToolImpl>>,
    pub(super) emitter: Emitter,
    pub(super) start: Instant,
    pub(super) results: Vec<Option<CallResult>>,
    /// In-phase edges still unresolved, per call.
    pub(super) pending: Vec<u32>,
    pub(super) dependants: Vec<Vec<usize>>,
    pub(super) ready_at: Vec<Option<Instant>>,
    pub(super) ready: BTreeSet<usize>,
    pub(super) phase: usize,
    pub(super) phase_left: usize,
    pub(super) in_flight: usize,
    /// Per lane: dispatched calls that use it and have not completed; and how many may.
    pub(super) outstanding: Vec<usize>,
    pub(super) lane_cap: Vec<usize>,
    /// Per lane: parked calls (see [`QUEUE_AHEAD`]), their resolved arguments, and how many.
    pub(super) parked: Vec<BTreeSet<usize>>,
    pub(super) parked_args: std::collections::HashMap<usize, Option<Map<String, Value>>>,
    pub(super) parked_n: usize,
    /// A completion may have made room for parked calls.
    pub(super) recheck: bool,
    pub(super) done_tx: mpsc::UnboundedSender<Completion>,
    pub(super) stop_tx: Arc<watch::Sender<StopLevel>>,
    pub(super) stop_rx: watch::Receiver<StopLevel>,
    pub(super) ending: Option<(Outcome, String)>,
    pub(super) budget_hit: bool,
    pub(super) spent: f64,
    /// Calls whose cost is reserved against the budget (only kept under a budget): a call
    /// that is then never dispatched gives its reservation back.
    pub(super) reserved: Vec<bool>,
    pub(super) http_429: u64,
    pub(super) journal: Option<Journal>,
    pub(super) resume: Option<Arc<Resume>>,
    pub(super) retry_indeterminate: bool,
    pub(super) no_resend: bool,
    /// Writes in flight when the resumed run stopped that their probe settles before
    /// anything is sent (`verify`).
    pub(super) settle_first: std::collections::HashSet<usize>,
    /// Each call's fingerprint (tool and resolved arguments), once resolved.
    pub(super) fps: Vec<Option<String>>,
    /// The fingerprints of write calls when calls are not fingerprinted otherwise: a
    /// write's idempotency key carries its fingerprint.
    pub(super) write_fps: std::collections::HashMap<usize, String>,
    /// Calls whose result came from the journal.
    pub(super) reused: Vec<bool>,
    /// Whether calls are fingerprinted (journal, resume, record or replay).
    pub(super) fingerprints: bool,
    pub(super) record: bool,
    pub(super) replay: Option<Arc<Cassette>>,
    pub(super) recorded_args: Vec<Option<Value>>,
    /// Calls waiting at the gate (approval, before_call hook), and where they go.
    pub(super) gating: usize,
    pub(super) gate_tx: Option<mpsc::UnboundedSender<GateJob>>,
    /// Results handed to the after_call hook so far (they go in call order).
    pub(super) after_next: usize,
    pub(super) after_tx: Option<mpsc::UnboundedSender<Value>>,
    /// The read cache; the keys this run's calls lead (stored by their jobs); lookups that
    /// wait, where their answers come, and the resolved arguments of their calls.
    pub(super) cache: Option<Arc<Cache>>,
    pub(super) leads: HashMap<usize, Lead>,
    pub(super) cache_waiting: usize,
    pub(super) cache_tx: Option<mpsc::UnboundedSender<CacheAnswer>>,
    pub(super) cache_args: HashMap<usize, Option<Map<String, Value>>>,
    /// Per tool, the backends whose cache marks it touches: a cached read looks at its
    /// backends' marks, a write on a backend some cached read reads changes its mark.
    pub(super) marked: Vec<Option<Arc<[String]>>>,
    /// Per tool, the backends its calls hold in a lane store other processes share (for the
    /// order of side effects across runs and gateways; empty when the store is not shared).
    pub(super) claims: Vec<Option<Claims>>,
    /// `[budget] per_tenant`, with the run's tenant.
    pub(super) window: Option<(Arc<TenantWindow>, Arc<str>)>,
    /// Its reservations, asked in call order (started by the first call that costs).
    pub(super) charger: Option<crate::run::call::Charger>,
    /// Calls counted against `max_calls` (this batch and before), and which of ours are.
    pub(super) calls_made: u64,
    pub(super) call_reserved: Vec<bool>,
    /// Calls past pre-dispatch that the budget or the call cap could not take while calls
    /// at the gate held reservations they may give back: they wait for the gate's verdicts
    /// (in call order) rather than being refused for a slot a deferred call returns.
    pub(super) held: std::collections::BTreeMap<usize, Option<Map<String, Value>>>,
    /// What calls at the gate hold of the limits (calls, cost): they may give it back.
    pub(super) gate_room: (u64, f64),
    /// A call settled since the held calls last tried.
    pub(super) held_dirty: bool,
    /// The calls not yet decided about the limits (only under a cap or a budget).
    pub(super) allot: Option<super::allotment::Allotment>,
    /// The earliest phase with a call deferred for approval: later phases wait with it.
    pub(super) paused_phase: Option<usize>,
}

impl Coordinator {
    pub(super) fn new(
        manifest: Arc<Manifest>,
        plan: Arc<Plan>,
        config: &RunConfig,
        emitter: Emitter,
        start: Instant,
        done_tx: mpsc::UnboundedSender<Completion>,
    ) -> Coordinator {
        let n = plan.calls.len();
        let (pending, dependants) = in_phase_edges(&plan);
        let (stop_tx, stop_rx) = watch::channel(StopLevel::Running);
        let fingerprints = config.journal.is_some()
            || config.resume.is_some()
            || config.record
            || config.replay.is_some();
        let budget = plan.settings.max_cost.is_some();
        let marked = marked_backends(&manifest, config.cache.is_some());
        let claims = shared_claims(&manifest, &plan, config);
        Coordinator {
            claims,
            window: tenant_window(&manifest, &plan),
            charger: None,
            tools: match &config.tools {
                Some(t) => t.to_vec(),
                None => super::tool_impls(&manifest, &plan, config.mcp.clone()),
            },
            run: Arc::new(RunInfo {
                run_id: config.run_id.clone(),
                tenant: plan.settings.tenant.clone(),
                manifest: manifest.path.display().to_string(),
                trace: config.trace.clone(),
                relay: config.relay.clone(),
            }),
            manifest,
            lanes: config.lanes.clone(),
            figures: config.lanes.clone(),
            backends: config.lanes.clone(),
            spend: config.lanes.clone(),
            emitter,
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
            lane_cap: plan.lanes.iter().map(queue_cap).collect(),
            parked: vec![BTreeSet::new(); plan.lanes.len()],
            parked_args: std::collections::HashMap::new(),
            parked_n: 0,
            recheck: false,
            done_tx,
            stop_tx: Arc::new(stop_tx),
            stop_rx,
            ending: None,
            budget_hit: false,
            spent: match (&config.resume, &config.replay) {
                (Some(r), None) => config.spent.max(journal_cost(&plan, r)),
                _ => config.spent,
            },
            reserved: vec![false; if budget { n } else { 0 }],
            http_429: 0,
            journal: config.journal.clone(),
            resume: config.resume.clone(),
            retry_indeterminate: config.retry_indeterminate,
            no_resend: config.no_resend,
            settle_first: Default::default(),
            // Kept only when used: at 100,000 calls each is megabytes.
            fps: vec![None; if fingerprints { n } else { 0 }],
            write_fps: std::collections::HashMap::new(),
            reused: vec![false; n],
            fingerprints,
            record: config.record,
            replay: config.replay.clone(),
            recorded_args: vec![None; if config.record { n } else { 0 }],
            gating: 0,
            gate_tx: None,
            after_next: 0,
            after_tx: None,
            cache: config.cache.clone(),
            leads: HashMap::new(),
            cache_waiting: 0,
            cache_tx: None,
            cache_args: HashMap::new(),
            marked,
            // A resumed run counts what its journal dispatched, whatever their call order.
            calls_made: match (&config.resume, &config.replay) {
                (Some(r), None) => config.calls_made.max(r.dispatches),
                _ => config.calls_made,
            },
            held: std::collections::BTreeMap::new(),
            held_dirty: false,
            gate_room: (0, 0.0),
            allot: super::allotment::Allotment::for_plan(&plan),
            call_reserved: vec![
                false;
                if plan.settings.max_calls.is_some() {
                    n
                } else {
                    0
                }
            ],
            paused_phase: None,
            plan,
        }
    }

    pub(super) fn start_phase(&mut self) {
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
    pub(super) fn end_run(&mut self, outcome: Outcome, why: String) {
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

    /// A result the journal already holds: report it, do not record it again (its dispatch
    /// was counted against `max_calls` when the run began).
    pub(super) fn finish_reused(&mut self, p: usize, r: CallResult) {
        self.reused[p] = true;
        self.finish(p, r);
    }

    /// Record a call's final result and release whatever waited for it.
    pub(super) fn finish(&mut self, p: usize, r: CallResult) {
        if r.started_ms.is_none() {
            // Never dispatched (refused at the gate, no lane, the run ended): not spent.
            if self.reserved.get(p).copied().unwrap_or(false) {
                self.reserved[p] = false;
                self.spent -= self.plan.calls[p].cost;
            }
            self.give_back_call(p);
        }
        if !self.leads.is_empty() {
            // A lead whose call never went out lets its key go.
            self.leads.remove(&p);
        }
        if let Some(j) = &self.journal {
            if !self.reused[p] {
                j.record(Journal::result(self.fps[p].as_deref().unwrap_or(""), &r));
            }
        }
        if let Some(a) = &mut self.allot {
            a.close(p, self.plan.calls[p].cost);
        }
        self.held_dirty = true;
        let failed = !r.is_ok();
        if !self.reused[p]
            && r.error.as_ref().is_some_and(|e| {
                matches!(e.kind, ErrorKind::BudgetExhausted | ErrorKind::CallLimit)
            })
        {
            self.budget_hit = true;
        }
        let fail_run = failed && self.plan.settings.on_tool_error == OnToolError::FailRun;
        let id = fail_run.then(|| r.id.clone());
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
        if let Some(id) = id {
            self.end_run(
                Outcome::Failed,
                format!("call `{id}` failed (on_tool_error = fail_run)"),
            );
        }
    }

    pub(super) fn completed(&mut self, c: Completion) {
        self.in_flight -= 1;
        for &lane in self.plan.calls[c.pos].lanes.iter() {
            self.outstanding[lane] -= 1;
        }
        self.recheck |= self.parked_n > 0;
        self.http_429 += u64::from(c.rejections);
        let id = c.ceiling_hit.then(|| c.result.id.clone());
        self.finish(c.pos, c.result);
        if let Some(id) = id {
            self.end_run(
                Outcome::DeadlineExceeded,
                format!("call `{id}` reached deadline.tool_call_seconds"),
            );
        }
    }
}

/// What the calls a journal dispatched cost (a resumed run's budget counts them).
fn journal_cost(plan: &Plan, resume: &Resume) -> f64 {
    plan.calls
        .iter()
        .filter(|c| resume.dispatched.contains(&c.id))
        .map(|c| c.cost)
        .sum()
}

/// `[budget] per_tenant`, with the run's tenant.
fn tenant_window(manifest: &Manifest, plan: &Plan) -> Option<(Arc<TenantWindow>, Arc<str>)> {
    let w = manifest.budget.per_tenant.clone()?;
    Some((Arc::new(w), plan.settings.tenant.as_str().into()))
}

/// Per tool, what its calls hold of their backends in a lane store other processes share
/// (nothing when the store is this process's alone).
fn shared_claims(manifest: &Manifest, plan: &Plan, config: &RunConfig) -> Vec<Option<Claims>> {
    if !config.lanes.orders_backends() {
        return Vec::new();
    }
    let hazards = plan.settings.hazards;
    let of = |t| Some(crate::plan::backend_claims(t, hazards)).filter(|c| !c.is_empty());
    manifest
        .tools
        .iter()
        .map(|t| of(t).map(Arc::from))
        .collect()
}

/// Per tool: a cached read's backends, and a write's backends that some cached read reads
/// (`None` for the rest: their calls never touch the cache's marks). Nothing without a cache.
fn marked_backends(manifest: &Manifest, caching: bool) -> Vec<Option<Arc<[String]>>> {
    if !caching {
        return Vec::new();
    }
    let cached: std::collections::HashSet<&str> = manifest
        .tools
        .iter()
        .filter(|t| t.cache.is_some())
        .flat_map(|t| t.backends.iter().map(String::as_str))
        .collect();
    manifest
        .tools
        .iter()
        .map(|t| {
            let mine: Vec<String> = if t.cache.is_some() {
                t.backends.clone()
            } else if t.is_write() {
                let hit = |b: &&String| cached.contains(b.as_str());
                t.backends.iter().filter(hit).cloned().collect()
            } else {
                Vec::new()
            };
            (!mine.is_empty()).then(|| Arc::from(mine))
        })
        .collect()
}

/// Per call: how many in-phase edges it waits on, and who waits on it.
fn in_phase_edges(plan: &Plan) -> (Vec<u32>, Vec<Vec<usize>>) {
    let n = plan.calls.len();
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
    (pending, dependants)
}

/// How many calls may use a lane (in flight or queued as tasks) before more are parked.
fn queue_cap(l: &LaneSpec) -> usize {
    match (l.limit, l.rate) {
        (Some(n), _) => n as usize + QUEUE_AHEAD,
        (None, Some(_)) => 4 * QUEUE_AHEAD,
        (None, None) => usize::MAX,
    }
}
