//! The gateway: every client's `tools/call` becomes a run of one call on the engine's kit —
//! the same scheduler, lanes, cache, retries, idempotency keys and classification as a batch
//! — in its session's lane store (the session's own turn lane; the tenant, tool and shared
//! lanes every session, gateway and `flux-tools run` of the store shares), after the calls it
//! must follow by arrival ([`super::order`]). A client's cancellation stops the call where
//! it is: waiting for its turn, in a lane, or in flight at its tool.

use crate::store::records::RecordKind;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::answer::{Outcome, Refusal};
use super::audit::{Audit, Event};
use super::caller::Caller;
use super::catalog::Catalog;
use super::order::{self, Order, Through};
use super::progress::Reporter;
use crate::app::controls::Controls;
use crate::app::engine::{CallKit, Scope};
use crate::app::finish::Finish;
use crate::batch::Batch;
use crate::events::{CallResult, ErrorKind, Outcome as RunOutcome, Stats};
use crate::plan::{self, LaneSpec, PlanOptions};
use crate::run::{self, Control, Ended, LaneStore, RunEnd};
use crate::tools::{McpSpec, Relay};
use crate::trace_context::TraceContext;

/// The gateway's shared state.
pub(super) struct Gateway {
    pub catalog: Arc<Catalog>,
    /// The kit of the manifest in force, with its generation and shape (a reload replaces
    /// both; a whole server's tools learnt again, the kit).
    pub(super) kit: RwLock<(Version, Arc<CallKit>)>,
    /// One reload at a time.
    pub(super) reloading: tokio::sync::Mutex<()>,
    /// One remaking of the kit for a new shape at a time.
    pub(super) reshaping: Mutex<()>,
    /// The lanes every session's store is renewed from (a reload renews it with the new
    /// manifest's lane table, so sessions share the new lanes).
    pub(super) store: RwLock<Arc<dyn LaneStore>>,
    /// What every session plans with (the tenant and the lane table are each session's).
    pub(super) opts: PlanOptions,
    pub(super) order: Arc<Order>,
    /// Arrival order, across every session (lanes serve waiters in this order too).
    pub(super) seq: AtomicU64,
    sessions: AtomicU64,
    id: String,
    /// Calls in flight, to cancel on shutdown (the engine's registry).
    controls: Arc<Controls>,
    /// Each lane's calls in this gateway (arrival numbers), for "how many ahead".
    pub(super) users: Mutex<HashMap<String, BTreeSet<u64>>>,
    /// Set once the gateway is shutting down: new calls are refused.
    closing: std::sync::atomic::AtomicBool,
    /// The calls taken and not answered yet (parked ones too): a stopping gateway waits for them.
    open: Arc<super::open::Open>,
    /// Where each call's spans and each session's history lines go (the engine's).
    finish: Arc<Finish>,
    /// Where calls wait for approval out of band (`None`: the folder could not be made).
    desk: Option<Arc<super::approve::Desk>>,
    /// What `/metrics` reports.
    metrics: super::metrics::Metrics,
    /// What the status page shows of the last calls and spend.
    status: super::status::Log,
    /// The HTTP face's sessions.
    pub http_sessions: Arc<super::sessions::Sessions>,
    /// The sessions told when a whole server's resources or prompts change.
    pub followers: super::followers::Followers,
    /// Where every decision about a caller is recorded.
    pub audit: Arc<Audit>,
    /// Clients' idempotency keys and their answers (in the lane store when it is shared).
    pub(super) keys: super::keys::Keys,
    /// Calls answered as tasks (their records in the lane store when it is shared).
    pub(super) tasks: Arc<super::tasks::Tasks>,
    /// 2026-07-28 clients' calls waiting for the follow-up that answers their upstream.
    pub(super) rounds: Arc<super::rounds::Rounds>,
    /// The board of definitions `tools.lock` holds back (set once its reviewer runs).
    pub(super) review: std::sync::OnceLock<crate::app::review::Review>,
}

pub(super) use super::session::{TenantLanes, Version};

pub(super) use super::session::Session;

/// A call planned as a batch of one, ready to take its place.
pub(super) struct Planned {
    pub(super) plan: crate::plan::Plan,
    /// The call's trace (the client's, when it sent one) and its caller, for its span.
    pub(super) trace: Option<TraceContext>,
    pub(super) caller: Caller,
    /// The tool's index in the manifest.
    pub(super) tool: usize,
    pub(super) manifest: Arc<crate::manifest::Manifest>,
    pub(super) lanes: Arc<dyn LaneStore>,
    /// Its arrival number.
    pub(super) seq: u64,
    pub(super) claims: Vec<(String, order::Claim)>,
    pub(super) lane_names: Vec<String>,
    /// Who approves the call, when it needs approval.
    pub(super) approver: Option<Arc<dyn crate::run::Approver>>,
    /// The kit of the manifest it was planned with.
    pub(super) kit: Arc<CallKit>,
    /// Who answers its upstream's questions.
    pub(super) ask: Option<crate::tools::mcp::Asker>,
}

/// What a client's request runs: a served tool, by the name it was listed under, or a read
/// of a whole server's resource (by the server's own URI).
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    Tool(&'a str),
    Read { server: &'a str, uri: &'a str },
}

impl Target<'_> {
    /// The position in `manifest` of the tool that runs it; `Err`: none does.
    fn resolve(
        self,
        catalog: &Catalog,
        manifest: &crate::manifest::Manifest,
        caller: &Caller,
    ) -> Result<usize, String> {
        match self {
            Target::Tool(name) => catalog.served(manifest, name, caller),
            Target::Read { server, uri } => crate::tools::mcp::reader_for(manifest, server, uri)
                .ok_or_else(|| format!("MCP server `{server}` is not served whole")),
        }
    }
}

pub(super) use super::cx::CallCx;

impl Gateway {
    pub(super) fn new(
        catalog: Catalog,
        kit: Arc<CallKit>,
        store: Arc<dyn LaneStore>,
        opts: PlanOptions,
        finish: Arc<Finish>,
        controls: Arc<Controls>,
        audit: Arc<Audit>,
    ) -> Gateway {
        let catalog_path = catalog.manifest().path.clone();
        let limits = catalog.manifest().serve.limits.clone();
        let board = store.board(crate::run::store::BoardOf::Calls);
        let store_intents = store.intents();
        let http_sessions =
            super::sessions::Sessions::new(&limits, store.records(RecordKind::Session));
        let id = run::new_run_id().replacen("run-", "mcp-", 1);
        let id_for_rounds = id.clone();
        let tasks = super::tasks::Tasks::new(
            store.records(RecordKind::Task),
            store.intents(),
            &limits,
            id.clone(),
        );
        let desk = crate::app::parked::Parked::of(&catalog_path, board)
            .ok()
            .map(|p| super::approve::Desk::new(Arc::new(p), beat_name(&id), &limits));
        Gateway {
            catalog: Arc::new(catalog),
            kit: RwLock::new(((0, 0), kit)),
            reloading: tokio::sync::Mutex::new(()),
            reshaping: Mutex::new(()),
            store: RwLock::new(store),
            opts,
            order: Arc::default(),
            seq: AtomicU64::new(1),
            sessions: AtomicU64::new(1),
            id,
            controls,
            users: Mutex::default(),
            closing: std::sync::atomic::AtomicBool::new(false),
            open: Arc::default(),
            finish,
            desk,
            metrics: super::metrics::Metrics::default(),
            status: super::status::Log::default(),
            http_sessions: Arc::new(http_sessions),
            followers: super::followers::Followers::default(),
            audit,
            keys: super::keys::Keys::new(store_intents, &limits),
            tasks: Arc::new(tasks),
            rounds: Arc::new(super::rounds::Rounds::new(id_for_rounds, &limits)),
            review: std::sync::OnceLock::new(),
        }
    }

    /// Where spans go (the engine's).
    pub(super) fn finish(&self) -> &Arc<Finish> {
        &self.finish
    }

    /// A new client session.
    pub(super) fn session(&self) -> Arc<Session> {
        let id = self.sessions.fetch_add(1, Ordering::Relaxed);
        let history = self.finish.keeps_history().then(|| self.finish.clone());
        Arc::new(Session::new(id, format!("{}-s{id}", self.id), history))
    }

    /// Whether a call of `name` by `session` may ask its client something — its approval,
    /// or its upstream's question (the client answers questions) — so the fast path, which
    /// cannot ask, leaves it to rmcp.
    pub(super) fn may_ask_client(&self, session: &Session, name: &str) -> bool {
        let m = self.catalog.manifest();
        let Some(t) = m.tool_position(name).map(|i| &m.tools[i]) else {
            return false;
        };
        let mcp = t.settings_of::<McpSpec>().is_some();
        let hears = session.log_level.load(Ordering::Relaxed) > 0;
        if mcp && (session.answers.load(Ordering::Relaxed) || hears) {
            return true;
        }
        if !m.serve.approval_in_band {
            return false;
        }
        match t.approval {
            crate::manifest::Approval::Required => true,
            crate::manifest::Approval::Unset => t.requires_approval || mcp,
            crate::manifest::Approval::None | crate::manifest::Approval::OutOfBand => false,
        }
    }

    /// The session's lane store and plan options for `tenant`.
    fn lanes_for(
        &self,
        session: &Session,
        tenant: &str,
        (generation, manifest): (Version, &crate::manifest::Manifest),
    ) -> Result<TenantLanes, String> {
        let mut map = session.lanes.lock().map_err(|_| "session state lost")?;
        if let Some((g, (s, o))) = map.get(tenant) {
            if *g == generation {
                return Ok((s.clone(), o.clone()));
            }
        }
        let mut opts = self.opts.clone();
        opts.tenant = Some(tenant.to_string());
        let table: Vec<LaneSpec> = plan::lane_table(manifest, &opts);
        // Each session (of each tenant) is a flow of its own: lanes serve sessions in turn,
        // and tenants by weight.
        let flow = run::Flow {
            id: self.sessions.fetch_add(1, Ordering::Relaxed),
            name: format!("{}-{tenant}", session.flow_name()).into(),
            tenant: tenant.into(),
            weight: manifest.tenant_weight(tenant),
        };
        let store = self
            .base()
            .for_lanes(&table, &flow)
            .map_err(|e| e.to_string())?;
        opts.lanes = Some(plan::LaneSeed::new(table));
        let opts = Arc::new(opts);
        map.insert(
            tenant.to_string(),
            (generation, (store.clone(), opts.clone())),
        );
        Ok((store, opts))
    }

    /// One `tools/call`. `Err` is a protocol fault (an unknown tool); every failure of the
    /// call itself is an answer with `isError: true`.
    pub(super) async fn call(
        self: &Arc<Self>,
        session: &Session,
        name: Target<'_>,
        args: Map<String, Value>,
        cx: CallCx,
    ) -> Result<Outcome, super::fault::Fault> {
        let _taken = self.open.take();
        let turn = Through(cx.arrival.clone());
        if let Some(pass) = &turn.0 {
            tokio::select! {
                () = pass.wait() => {}
                () = cx.cancel.cancelled() => return Ok(Outcome::Refused(Refusal::Cancelled)),
            }
        }
        // The big futures (planning with a server's start, the run) are boxed: a call that waits
        // (its turn, its place, its approval) holds only what it waits with.
        let prepared = Box::pin(self.prepare(session, name, args, &cx.caller)).await;
        let judged = self.judged(prepared, (session, &cx.caller, name));
        let planned = match judged.map_err(super::fault::Fault::Call)? {
            Ok(p) => p,
            Err(why) => return Ok(Outcome::Refused(why)),
        };
        let reporter = cx
            .progress
            .clone()
            .map(|sink| Arc::new(Reporter::new(sink, cx.started.clone())));
        let call = super::steps::Call {
            gateway: self,
            session,
            planned,
            cx,
            turn,
            tool_call: matches!(name, Target::Tool(_)),
            reporter,
        };
        Ok(super::steps::Next::all().run(call).await.0)
    }

    /// The last step's next: the planned call run, with its trace and who answers its
    /// upstream's questions; its answer and whether it reached its tool.
    pub(super) async fn run_call(
        self: &Arc<Self>,
        call: super::steps::Call<'_>,
    ) -> (Outcome, bool) {
        let super::steps::Call {
            session,
            mut planned,
            cx,
            reporter,
            ..
        } = call;
        planned.trace = TraceContext::new(cx.traceparent.as_deref(), self.finish.exports());
        planned.ask = cx.asks.clone();
        Box::pin(self.run(session, planned, &cx.cancel, reporter)).await
    }

    /// The call planned as a batch of one, with its arrival number; `Ok(Err(why))`: it
    /// cannot be made (the answer says why); `Err`: no such tool.
    async fn prepare(
        &self,
        session: &Session,
        name: Target<'_>,
        args: Map<String, Value>,
        caller: &Caller,
    ) -> Result<Result<Planned, Refusal>, String> {
        let tenant = caller.tenant.as_str();
        let mut first = self.catalog.manifest();
        let t = match name.resolve(&self.catalog, &first, caller) {
            Ok(t) => t,
            // A whole server not asked yet (since a reload, or it was down) may have it.
            Err(e) => {
                if !self.catalog.ensure_wholes().await {
                    return Err(e);
                }
                first = self.catalog.manifest();
                name.resolve(&self.catalog, &first, caller)?
            }
        };
        if self.closing.load(Ordering::SeqCst) {
            let why = "the gateway is shutting down; the call was not made";
            return Ok(Err(Refusal::new(ErrorKind::RunEnded, why)));
        }
        if let Some(spec) = first.tools[t].settings_of::<McpSpec>() {
            // Its server's annotations settle the call's effect; a server that will not start
            // fails the call below with its reason.
            let _ = self.catalog.ensure(&spec.server).await;
        }
        let (now, kit) = self.in_force().await;
        let manifest = now.manifest;
        // A reload between the two looks may have moved or removed the tool.
        let t = name.resolve(&self.catalog, &manifest, caller)?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let version = (now.generation, now.shape);
        let (lanes, opts) = match self.lanes_for(session, tenant, (version, &manifest)) {
            Ok(l) => l,
            Err(e) => return Ok(Err(Refusal::new(ErrorKind::LaneStore, e))),
        };
        let tool = &manifest.tools[t];
        let plan = match plan::build(&manifest, &Batch::one_call(seq, &tool.name, args), &opts) {
            Ok(p) => p,
            Err(d) => {
                let msg: Vec<String> = d.iter().map(|d| d.message.clone()).collect();
                let why = Refusal::new(ErrorKind::InvalidCall, msg.join("; "));
                return Ok(Err(why));
            }
        };
        let claims = crate::plan::claims::claims(
            tool,
            manifest.concurrency.hazards,
            &session.id.to_string(),
        );
        Ok(Ok(Planned {
            trace: None,
            caller: caller.clone(),
            tool: t,
            // The call's own lanes, not the whole table (a whole server's tools make it long).
            lane_names: (plan.calls.iter().flat_map(|c| c.lanes.iter()))
                .filter_map(|&l| plan.lanes.get(l).map(|l| l.name.clone()))
                .collect(),
            plan,
            manifest,
            lanes,
            seq,
            claims,
            approver: None,
            kit,
            ask: None,
        }))
    }

    /// The place of a request that reads whole server `server` without running as a call (a
    /// prompt get, a completion, a subscribe): after the requests read before it on its wire
    /// (`arrival`), then after a write on the server's backends that came before it — as a
    /// resource read's. Held while the request is forwarded; `None`: cancelled while it waited.
    pub(super) async fn read_place(
        &self,
        session: &Session,
        server: &str,
        (arrival, cancel): (Option<Arc<order::Pass>>, &CancellationToken),
    ) -> Option<order::Ticket> {
        let turn = Through(arrival);
        if let Some(pass) = &turn.0 {
            tokio::select! {
                () = pass.wait() => {}
                () = cancel.cancelled() => return None,
            }
        }
        let m = self.catalog.manifest();
        let chain = session.id.to_string();
        let claims = crate::tools::mcp::reader_for(&m, server, "")
            .map(|t| crate::plan::claims::claims(&m.tools[t], m.concurrency.hazards, &chain))
            .unwrap_or_default();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let ticket = self.order.enter(seq, claims, session.id);
        drop(turn);
        ticket.wait_unless(cancel, |_| {}).await.then_some(ticket)
    }

    /// The approver of a call that needs approval: the client (when in-band approval is
    /// allowed for it and the client can be asked), else out of band; it tells the client's
    /// progress what it waits for.
    pub(super) fn approver_for(
        &self,
        (p, session): (&Planned, &Session),
        cx: &CallCx,
        progress: Option<Arc<Reporter>>,
    ) -> Option<Arc<dyn crate::run::Approver>> {
        let m = &p.manifest;
        if !m.tools[p.tool].requires_approval {
            return None;
        }
        let in_band = self.in_band(p);
        let timeout = m
            .serve
            .approval_timeout
            .unwrap_or(super::approve::DEFAULT_TIMEOUT);
        Some(Arc::new(super::approve::CallApprover {
            in_band: in_band.then(|| cx.elicit.clone()).flatten(),
            desk: self.desk.clone(),
            // Unique across replicas (in containers every gateway may be pid 1).
            id: format!("{}-{}", beat_name(&self.id), p.seq),
            session: session.id,
            caller: cx.caller.clone(),
            // What names the call's intent: its task, else the client's idempotency key.
            key: (cx.task.as_deref().or(cx.key.as_deref()))
                .map(|k| crate::hash::fnv_hex(k.as_bytes())),
            audit: self.audit.clone(),
            timeout,
            cancel: cx.cancel.clone(),
            progress,
        }))
    }

    /// Whether the planned call needs approval and its client may give it.
    pub(super) fn in_band(&self, p: &Planned) -> bool {
        let (m, tool) = (&p.manifest, &p.manifest.tools[p.tool]);
        tool.requires_approval
            && m.serve.approval_in_band
            && tool.approval != crate::manifest::Approval::OutOfBand
    }

    /// Run the planned call; its answer (or the cancellation's), and whether it reached its
    /// tool (a cache hit or a call refused before dispatch did not).
    async fn run(
        self: &Arc<Self>,
        session: &Session,
        p: Planned,
        cancel: &CancellationToken,
        reporter: Option<Arc<Reporter>>,
    ) -> (Outcome, bool) {
        let (progress_tx, progress_rx) = mpsc::unbounded_channel();
        let relay = Arc::new(Relay {
            raw: Mutex::default(),
            progress: reporter.as_ref().map(|_| progress_tx),
            ask: p.ask.clone(),
            behalf: p.caller.behalf.clone(),
        });
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let scope = Scope {
            run_id: session.run_id.clone(),
            lanes: p.lanes,
            segment: Some(p.seq as usize),
            start: None,
            spent: 0.0,
            calls_made: 0,
            trace: p.trace.clone(),
        };
        let mut config = p.kit.config(scope, reporter.as_ref().map(|_| events_tx));
        config.relay = Some(relay.clone());
        if let Some(a) = p.approver {
            config.approver = a;
        }
        let (running, ctl_rx) = self.controls.enter();
        let names = self.lane_progress(p.seq, p.lane_names);
        let watch = async move {
            match reporter {
                Some(r) => r.watch(events_rx, progress_rx, names).await,
                None => std::future::pending().await,
            }
        };
        // The run and its watcher are polled on this task (no spawn: fewer wake-ups per
        // call); a cancellation interrupts the run and waits for it to wind down.
        let started = (std::time::SystemTime::now(), std::time::Instant::now());
        let cost = p.manifest.tools[p.tool].cost;
        let whole = super::catalog::whole_of(&p.manifest, p.tool);
        session.record.started(&p.caller);
        let job = run::execute(p.manifest, Arc::new(p.plan), config, ctl_rx);
        tokio::pin!(job, watch);
        let mut watching = true;
        let (report, interrupted) = loop {
            tokio::select! {
                r = &mut job => break (r, false),
                () = &mut watch, if watching => watching = false,
                () = cancel.cancelled() => {
                    running.tell(Control::Interrupt);
                    break ((&mut job).await, true);
                }
            }
        };
        drop(running);
        session.record.ended(&report.stats);
        let Some(r) = report.results.into_iter().next() else {
            let why = Refusal::new(ErrorKind::RunEnded, "the call got no result");
            return (Outcome::Refused(why), false);
        };
        let reached = r.attempts > 0 && !r.cached;
        self.metrics.record(&p.caller.tenant, &r, cost);
        if let Some(s) = r.settled.filter(|_| self.audit.on()) {
            let fields = serde_json::json!({"tool": r.tool, "outcome": s.as_str()});
            self.audit
                .record(Event::CallSettled, Some(&p.caller), fields);
        }
        self.status.record((&p.caller, session.id), &r, cost);
        if let Some(trace) = p.trace.filter(|_| self.finish.exports()) {
            let wall = started.1.elapsed();
            let call = (session.run_id.clone(), p.caller, r.clone(), report.stats);
            self.export(trace, (started.0, wall), call);
        }
        if interrupted {
            return (Outcome::Refused(Refusal::Cancelled), reached);
        }
        let raw = relay
            .take()
            .map(|raw| super::catalog::served_links(raw, whole));
        (Outcome::Ran(Box::new(r), raw), reached)
    }

    /// End a call's run on a task of its own (the answer does not wait for the collector):
    /// its span goes out through the engine's [`Finish`].
    fn export(
        &self,
        trace: TraceContext,
        (started, wall): (std::time::SystemTime, Duration),
        (run_id, caller, result, stats): (String, Caller, CallResult, Stats),
    ) {
        let finish = self.finish.clone();
        tokio::spawn(async move {
            let end = RunEnd {
                ended: Ended::ServedCall,
                run_id: &run_id,
                tenant: &caller.tenant,
                subject: caller.subject.as_deref(),
                input_format: "mcp",
                outcome: RunOutcome::Completed,
                started,
                wall,
                stats: &stats,
                results: Some(std::slice::from_ref(&result)),
                width: 1,
                peak_in_flight: 1,
                usage: None,
                trace: Some(&trace),
            };
            finish.spans(&end).await;
        });
    }

    /// For progress: a function that says, for lane index `i` of the call, how many earlier
    /// calls of this gateway hold or wait for it (counted when the message is made).
    fn lane_progress(
        self: &Arc<Self>,
        seq: u64,
        names: Vec<String>,
    ) -> impl Fn(usize) -> String + Send + 'static {
        let g = self.clone();
        move |i| {
            let name = names.get(i).cloned().unwrap_or_default();
            let ahead = g
                .users
                .lock()
                .ok()
                .and_then(|u| u.get(&name).map(|s| s.range(..seq).count()))
                .unwrap_or(0);
            format!("waiting for lane `{name}` ({ahead} earlier calls of this gateway hold it or wait for it)")
        }
    }

    /// `/readyz`: ready unless draining or the lane store does not answer.
    pub(super) async fn ready(&self) -> Result<(), String> {
        if self.closing.load(Ordering::SeqCst) {
            return Err("the gateway is shutting down".into());
        }
        self.base().ping().await.map_err(|e| e.0)
    }

    /// `/metrics`: the figures, with the lanes and waiting approvals as they are now.
    pub(super) async fn metrics_text(&self) -> String {
        let approvals = match &self.desk {
            Some(d) => d.parked().count().await,
            None => 0,
        };
        let sessions = self.http_sessions.counts();
        self.metrics.render(
            &self.base().occupancy(),
            (approvals, self.tasks.running(), self.catalog.held()),
            sessions,
        )
    }

    /// The status page's snapshot: lanes, last calls, spend, waiting approvals (the first
    /// [`SHOWN`] of them) — all, or (`only`) one tenant's.
    pub(super) async fn snapshot(&self, only: Option<&str>) -> serde_json::Value {
        let (approvals, total) = match &self.desk {
            Some(d) => d.parked().some(SHOWN).await,
            None => (Vec::new(), 0),
        };
        let mut snap = self
            .status
            .snapshot(&self.base().occupancy(), &approvals, only);
        if only.is_none() {
            snap["approvals_waiting"] = total.into();
            let held = self.catalog.pinned().held();
            snap["held_tools"] = super::status::held(&held);
            let down = self.catalog.failing().into_iter();
            let down = down.map(|(server, why)| serde_json::json!({"server": server, "why": why}));
            snap["servers_down"] = down.collect::<Vec<_>>().into();
        }
        snap
    }

    /// Answer a parked call (the status page), wherever it waits.
    pub(super) async fn answer_parked(
        &self,
        id: &str,
        hash: &str,
        d: crate::app::parked::Decision,
        by: &str,
    ) -> Result<crate::app::parked::Waiting, String> {
        let Some(desk) = &self.desk else {
            return Err("no call waits for approval here".into());
        };
        desk.parked().answer(id, Some(hash), d, by).await
    }

    /// A prepared call, or its refusal — each refusal said in the audit trail.
    fn judged(
        &self,
        prepared: Result<Result<Planned, Refusal>, String>,
        (session, caller, name): (&Session, &Caller, Target<'_>),
    ) -> Result<Result<Planned, Refusal>, String> {
        let what = match name {
            Target::Tool(n) => super::fault::cut(n),
            Target::Read { server, uri } => format!("{server}:resources/read {uri}"),
        };
        match &prepared {
            Err(why) => {
                // The caller is told the tool does not exist; the trail says why.
                let m = self.catalog.manifest();
                let anyone = Caller::local(caller.tenant.clone());
                let hidden =
                    matches!(name, Target::Tool(n) if self.catalog.served(&m, n, &anyone).is_ok());
                let held = matches!(name, Target::Tool(n) if self.catalog.pinned().holds(n));
                let why = if held {
                    format!("`{what}` is held back: its definition is not the one tools.lock pins (the caller was told: {why})")
                } else if hidden {
                    format!("its roles do not allow `{what}` (the caller was told: {why})")
                } else {
                    why.clone()
                };
                self.refused(session, caller, &what, &why);
            }
            Ok(Err(why)) => self.refused(session, caller, &what, &why.text()),
            Ok(Ok(_)) => {}
        }
        prepared
    }

    /// Say in the audit trail that `caller`'s call of `tool` was refused, and why.
    pub(super) fn refused(&self, session: &Session, caller: &Caller, tool: &str, why: &str) {
        if self.audit.on() {
            let fields = serde_json::json!({"tool": tool, "session": session.id, "reason": why});
            self.audit.record(Event::CallRefused, Some(caller), fields);
        }
    }

    /// On SIGTERM: the calls parked for approval are answered `run_ended` at once (they have
    /// not started); the calls in flight get `grace` to finish, then the rest are cancelled.
    /// It returns once every call taken is answered (or cannot be) and the parked calls'
    /// entries have left the board.
    pub(super) async fn drain(&self, grace: Duration) {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(desk) = &self.desk {
            desk.close();
        }
        if !self.open.answered_within(grace).await {
            self.controls.tell(Control::Interrupt);
            self.controls.idle_within(Duration::from_secs(5)).await;
            self.open.answered_within(Duration::from_secs(1)).await;
        }
        if let Some(desk) = &self.desk {
            desk.parked().settled(Duration::from_secs(2)).await;
        }
    }

    /// Whether a dead gateway left the call of `caller`'s idempotency key `key` parked for
    /// approval: its intent died before the call reached its tool.
    pub(super) async fn left_parked(&self, caller: &Caller, key: &str) -> bool {
        let digest = crate::hash::fnv_hex(key.as_bytes());
        let who = (caller.tenant.as_str(), caller.subject.as_deref());
        match &self.desk {
            Some(d) => d.left_parked(who, &digest).await,
            None => false,
        }
    }

    /// Whether the gateway is shutting down.
    pub(super) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}

/// How many waiting approvals the status page lists (it reads them every second).
const SHOWN: usize = 200;

/// The name a gateway beats under, and the prefix of its parked calls' ids: its id's last six
/// characters.
fn beat_name(id: &str) -> String {
    id[id.len().saturating_sub(6)..].to_string()
}
