//! Tasks (MCP `2025-11-25`): a `tools/call` with `params.task` is answered at once with a
//! task, and its call runs on without the request — queued in its lanes, parked for
//! approval, running — while the client asks `tasks/get`, `tasks/result`, `tasks/list` and
//! `tasks/cancel`, through any replica. A task's record (status, what it waits for, its
//! result, whose it is, the call itself) is in the lane store's records (Redis: every replica
//! reads them; `local`: this process's); its run is leased ([`Intents`]) by the replica
//! running it and renewed while it runs. A replica that dies leaves the lease to lapse: the
//! first replica asked about the task then takes it over — running the call again when it
//! never reached its tool (it was queued, or parked: a parked call keeps its `ID@HASH` and any
//! answer given meanwhile), else answering it `indeterminate` unless the tool is safe to run
//! again (a read, or `idempotent = true`) or its probe settles it (`verify`). A cancel marks the record; the replica running the
//! call sees it within [`WATCH`] and cancels the call (it leaves its lane; a queued call never
//! reaches its tool). A task is its creator's (its tenant, and its subject when a JWT named
//! one): to anyone else it does not exist. A finished task is kept `[serve.limits] tasks_kept`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

mod shape;

use self::shape::{
    caller_of, detailed, first_text, index_of, mark_of, now, task_id, wire, Record, Status,
};
use super::answer::Outcome;
use super::caller::{Caller, Via};
use super::gateway::{CallCx, Gateway, Target};
use super::order::Pass;
use super::session::Session;
use crate::store::intents::{Claim, Intent, Intents, LocalIntents};
use crate::store::records::{Add, LocalRecords, Records, Typed};

/// How often a running task's replica looks at its record (for a cancel from elsewhere).
const WATCH: Duration = Duration::from_millis(250);
/// How long a replica's lease on a task's run lasts without renewal, and how often it is
/// renewed: it lapses 13 to 15 s after its replica died — after the approval board has
/// seen the replica's parked calls orphaned (10 s), so a call parked for approval is taken
/// over with its `ID@HASH` and any answer given meanwhile.
const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(2);
/// How long a call of a client that takes tasks waits before it is answered as one, unless
/// `[serve] task_after` says otherwise.
const TASK_AFTER: Duration = Duration::from_secs(1);
/// The poll interval suggested to clients.
pub(super) const POLL_MS: u64 = 500;
/// What a client asks of its tasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    Get(String),
    Result(String),
    List,
    Cancel(String),
}

/// The most tasks `tasks/list` answers (the newest), and the most index entries one list or
/// prune reads.
const LISTED: usize = 100;
const PRUNE: usize = 500;
/// How long a lapsed lease is looked at again at most once (per task, per replica).
const ADOPT_EVERY: Duration = Duration::from_secs(1);

/// A task's run, as its replica drives it.
struct Run {
    r: Record,
    claim: Claim,
    cancel: CancellationToken,
    /// Set when its call reaches its tool.
    started: Arc<AtomicBool>,
    /// What its call says while it waits.
    said: tokio::sync::mpsc::UnboundedReceiver<String>,
    front: Option<Arc<Front>>,
}

/// A caller that waits for a call that may become a task: the outcome goes to `waiting`
/// while it is there (taken: the call is a task now); `parked` is told when the call parks
/// for approval; `said` is the last thing the call said.
struct Front {
    waiting: Mutex<Option<oneshot::Sender<Result<Outcome, crate::face::app::serve::fault::Fault>>>>,
    parked: tokio::sync::Notify,
    said: Mutex<Option<String>>,
}

/// What a call of a client that takes tasks came to.
pub(super) enum TaskOr {
    /// It ended before it became a task.
    Done(Result<Outcome, crate::face::app::serve::fault::Fault>),
    /// It goes on as this task.
    Task(Box<rmcp::model::Task>),
}

/// A refusal of a task request: JSON-RPC code and message.
pub(super) type Refused = super::fault::Fault;

/// The gateway's tasks.
pub(super) struct Tasks {
    records: Typed<Record>,
    intents: Arc<dyn Intents>,
    kept: Duration,
    per_tenant: u32,
    /// This replica, as a lease holder.
    me: String,
    /// The tasks this replica runs: their tenant and their call's cancel.
    running: Mutex<HashMap<String, (String, CancellationToken)>>,
    /// When this replica last looked at a task's lapsed lease.
    looked: Mutex<HashMap<String, tokio::time::Instant>>,
}

impl Tasks {
    /// Tasks in `store`'s records and intents when it shares them (Redis), else this
    /// process's.
    pub(super) fn new(
        records: Option<Arc<dyn Records>>,
        intents: Option<Arc<dyn Intents>>,
        limits: &crate::manifest::ServeLimits,
        me: String,
    ) -> Tasks {
        let cap = limits.keys as usize;
        Tasks {
            records: Typed::new(records.unwrap_or_else(|| Arc::new(LocalRecords::new(cap)))),
            intents: intents.unwrap_or_else(|| Arc::new(LocalIntents::new(cap))),
            kept: limits.tasks_kept,
            per_tenant: limits.tasks_per_tenant,
            me,
            running: Mutex::default(),
            looked: Mutex::default(),
        }
    }

    fn claim(&self, id: &str) -> Claim {
        Claim {
            scope: format!("task\u{0}{id}"),
            hash: "task".into(),
            token: self.me.clone(),
            lease: LEASE,
            keep: self.kept,
        }
    }

    /// Task `id`'s record; cancelled when its cancel mark is there (a mark of its own, which
    /// the replica running it, writing the record as the call goes, never overwrites).
    async fn load(&self, id: &str) -> Option<Record> {
        // Read as it is: a task is kept its `ttl` after it last changed, however often read.
        let read = self.records.get(id.to_string(), Duration::ZERO).await;
        let mut r = read.ok()??;
        if r.status == Status::Working {
            let mark = (self.records.raw().clone())
                .get(mark_of(id), Duration::ZERO)
                .await;
            if let Ok(Some(why)) = mark {
                r.status = Status::Cancelled;
                r.message = Some(why);
            }
        }
        Some(r)
    }

    async fn save(&self, r: &Record) {
        let keep = Duration::from_millis(r.ttl);
        if let Err(e) = self.records.put(r.id.clone(), r, keep).await {
            super::say::line(format!("warning: mcp serve: task {} not saved: {e}", r.id));
        }
    }

    /// The caller's task `id`, or "not found" (another's is not found either).
    async fn own(&self, caller: &Caller, id: &str) -> Result<Record, Refused> {
        match self.load(id).await {
            Some(r) if r.owner == caller.owner() => Ok(r),
            _ => {
                let shown: String = id.chars().take(64).collect();
                Err(super::fault::Fault::Params(format!(
                    "task not found: `{}`",
                    shown.escape_default()
                )))
            }
        }
    }

    /// Room for one more unfinished task of `caller`'s tenant in this process.
    fn room(&self, caller: &Caller) -> Result<(), Refused> {
        let busy = {
            let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            running
                .values()
                .filter(|(t, _)| *t == caller.tenant)
                .count()
        };
        if busy < self.per_tenant as usize {
            return Ok(());
        }
        let why = format!(
            "{busy} tasks of tenant `{}` are unfinished in this gateway ([serve.limits] tasks_per_tenant = {}): this call was not started",
            caller.tenant, self.per_tenant
        );
        Err(super::fault::Fault::Internal(why))
    }

    /// A new task's record: a call of `tool` with `args` by `caller`, kept `ttl` ms (at
    /// most `tasks_kept`).
    fn record(
        &self,
        caller: &Caller,
        (tool, args): (String, Map<String, Value>),
        ttl: Option<u64>,
    ) -> Record {
        let most = self.kept.as_millis() as u64;
        let at = now();
        Record {
            id: task_id(),
            owner: caller.owner(),
            tenant: caller.tenant.clone(),
            subject: caller.subject.clone(),
            roles: caller.roles.as_deref().map(<[String]>::to_vec),
            jwt: caller.via == Via::Jwt,
            tool,
            args,
            status: Status::Working,
            message: None,
            created: at.clone(),
            updated: at,
            ttl: ttl.map_or(most, |t| t.clamp(1, most.max(1))),
            started: false,
            result: None,
        }
    }

    /// Record `r` (and lease its run to this replica) before anyone hears of it.
    async fn keep(&self, r: &Record) -> Result<Claim, Refused> {
        let claim = self.claim(&r.id);
        if let Err(e) = self.intents.clone().claim(claim.clone()).await {
            return Err(super::fault::Fault::Internal(format!(
                "the task could not be recorded: {e}"
            )));
        }
        self.save(r).await;
        // Indexed under its owner by when it was made (ms), for `tasks/list`.
        let index = Add {
            counter: r.id.clone(),
            by: shape::unix_ms(),
            most: None,
        };
        let indexed = self
            .records
            .raw()
            .clone()
            .tally(index_of(&r.owner), vec![index], self.kept);
        let _ = indexed.await;
        if fastrand::u8(..) < 8 {
            self.prune(&r.owner).await;
        }
        Ok(claim)
    }

    /// Drop from `owner`'s index (the oldest [`PRUNE`] first) the tasks no longer kept: now
    /// and then as tasks are made, so an owner that never lists keeps a small index.
    async fn prune(&self, owner: &str) {
        let mut all = self
            .records
            .raw()
            .clone()
            .counters(index_of(owner))
            .await
            .unwrap_or_default();
        all.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut gone = Vec::new();
        for (id, _) in all.into_iter().take(PRUNE) {
            if self.load(&id).await.is_none() {
                gone.push(id);
            }
        }
        let _ = self
            .records
            .raw()
            .clone()
            .forget(index_of(owner), gone)
            .await;
    }

    /// Start a call of `tool` with `args` as a task of `caller` (on request: `params.task`
    /// of a `2025-11-25` client; kept `ttl`, made once for `key`, in its place `arrival` of
    /// its session's wire): its `CreateTaskResult`.
    pub(super) async fn start(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        session: Arc<Session>,
        caller: &Caller,
        what: (String, Map<String, Value>),
        (ttl, key, arrival): (Option<u64>, Option<String>, Option<Arc<Pass>>),
    ) -> Result<Value, Refused> {
        self.room(caller)?;
        let r = self.record(caller, what, ttl);
        let claim = self.keep(&r).await?;
        let task = wire(&r);
        // Its place in its session's wire order, as if it were answered whole.
        let mut cx = bare_cx(&r);
        (cx.key, cx.arrival) = (key, arrival);
        self.run(gateway.clone(), session, (r, claim), cx, None);
        Ok(json!({ "task": task }))
    }

    /// A call of a client that takes tasks (the tasks extension): its outcome when it ends
    /// within `[serve] task_after` and is not parked for approval, else a task it goes on as.
    pub(super) async fn call_or_task(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        session: Arc<Session>,
        what: (String, Map<String, Value>),
        cx: CallCx,
    ) -> Result<TaskOr, Refused> {
        self.room(&cx.caller)?;
        let r = self.record(&cx.caller, what, None);
        let asked = cx.cancel.clone();
        let (tx, mut rx) = oneshot::channel();
        let front = Arc::new(Front {
            waiting: Mutex::new(Some(tx)),
            parked: tokio::sync::Notify::new(),
            said: Mutex::new(None),
        });
        let claim = self.claim(&r.id);
        let cancel = self.run(
            gateway.clone(),
            session,
            (r.clone(), claim),
            cx,
            Some(front.clone()),
        );
        let after = gateway
            .catalog
            .manifest()
            .serve
            .task_after
            .unwrap_or(TASK_AFTER);
        let ended = |out: Result<_, _>| {
            out.unwrap_or_else(|_| {
                Err(super::fault::Fault::Internal(
                    "the call ended without an answer".to_string(),
                ))
            })
        };
        tokio::select! {
            out = &mut rx => return Ok(TaskOr::Done(ended(out))),
            () = tokio::time::sleep(after) => {}
            () = front.parked.notified() => {}
            () = asked.cancelled() => {
                cancel.cancel();
                return Ok(TaskOr::Done(ended(rx.await)));
            }
        }
        // A task from now on: recorded before the client hears of it, unless the call ended
        // meanwhile (then its answer is the client's, and the record goes).
        let mut r = r;
        r.message = front.said.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let kept = self.keep(&r).await;
        let promoted = front
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some();
        if promoted && kept.is_ok() {
            return Ok(TaskOr::Task(Box::new(detailed(&r).task)));
        }
        let _ = self.records.raw().clone().remove(r.id.clone()).await;
        if let Ok(claim) = kept {
            let _ = self.intents.clone().answer(claim, "done".into()).await;
        }
        Ok(TaskOr::Done(ended(rx.await)))
    }

    /// Run a task's call on a task of its own, its record kept up to date once it is a task
    /// (`front`: a caller waits for it until then); its cancel.
    fn run(
        self: &Arc<Self>,
        gateway: Arc<Gateway>,
        session: Arc<Session>,
        (r, claim): (Record, Claim),
        mut cx: CallCx,
        front: Option<Arc<Front>>,
    ) -> CancellationToken {
        let cancel = CancellationToken::new();
        {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            running.insert(r.id.clone(), (r.tenant.clone(), cancel.clone()));
        }
        let (tx, said) = tokio::sync::mpsc::unbounded_channel::<String>();
        let started = Arc::new(AtomicBool::new(false));
        let client = cx.progress.take();
        cx.progress = Some(Arc::new(move |p: crate::tools::Progress| {
            if let Some(m) = &p.message {
                let _ = tx.send(m.clone());
            }
            if let Some(c) = &client {
                c(p);
            }
        }));
        cx.started = Some(started.clone());
        cx.cancel = cancel.clone();
        cx.task = Some(format!("task:{}", r.id));
        let run = Run {
            r,
            claim,
            cancel: cancel.clone(),
            started,
            said,
            front,
        };
        tokio::spawn(self.clone().drive(gateway, session, cx, run));
        cancel
    }

    async fn drive(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        session: Arc<Session>,
        cx: CallCx,
        run: Run,
    ) {
        let Run {
            mut r,
            claim,
            cancel,
            started,
            mut said,
            front,
        } = run;
        let promoted = |f: &Option<Arc<Front>>| {
            f.as_ref()
                .is_none_or(|f| f.waiting.lock().map_or(true, |w| w.is_none()))
        };
        let (tool, args) = (r.tool.clone(), r.args.clone());
        let mut call = Box::pin(gateway.call(&session, Target::Tool(&tool), args, cx));
        let mut watch = tokio::time::interval(WATCH);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut renewed = tokio::time::Instant::now();
        let out = loop {
            tokio::select! {
                out = &mut call => break out,
                Some(m) = said.recv() => {
                    if let Some(f) = &front {
                        if m.starts_with(super::approve::WAITING) {
                            f.parked.notify_one();
                        }
                        *f.said.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
                    }
                    // Said again every second while it waits: recorded when it changes.
                    if r.message.as_ref() != Some(&m) {
                        r.message = Some(m);
                        r.started = started.load(Ordering::Relaxed);
                        r.updated = now();
                        if promoted(&front) {
                            self.save(&r).await;
                        }
                    }
                }
                _ = watch.tick(), if promoted(&front) => {
                    if self.load(&r.id).await.is_some_and(|k| k.status == Status::Cancelled) {
                        cancel.cancel();
                    }
                    if renewed.elapsed() >= RENEW {
                        let _ = self.intents.clone().renew(claim.clone()).await;
                        renewed = tokio::time::Instant::now();
                    }
                    if !r.started && started.load(Ordering::Relaxed) {
                        r.started = true;
                        r.message = None;
                        r.updated = now();
                        self.save(&r).await;
                    }
                }
            }
        };
        drop(call);
        let waiting = front.and_then(|f| f.waiting.lock().ok()?.take());
        if let Some(tx) = waiting {
            self.running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&r.id);
            let _ = tx.send(out);
            return;
        }
        let answer = match out {
            Ok(o) => o.answer(),
            Err(e) => super::answer::error(&e.error().message),
        };
        self.finish(r, claim, answer).await;
    }

    /// Record the task's answer (a cancel recorded meanwhile stands), and let its lease go.
    async fn finish(&self, mut r: Record, claim: Claim, answer: Value) {
        let now_kept = self.load(&r.id).await;
        if let Some(k) = now_kept.filter(|k| k.status == Status::Cancelled) {
            r.status = k.status;
            r.message = k.message;
            r.updated = now();
            self.save(&r).await;
        } else {
            let failed = answer["isError"].as_bool() == Some(true);
            r.status = if failed {
                Status::Failed
            } else {
                Status::Completed
            };
            r.message = failed.then(|| first_text(&answer));
            r.result = Some(answer);
            r.updated = now();
            self.save(&r).await;
        }
        let _ = self.intents.clone().answer(claim, "done".into()).await;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.remove(&r.id);
    }

    /// Answer a task request of `caller`; `Ok`: the JSON-RPC result.
    pub(super) async fn answer(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        asked: Asked,
    ) -> Result<Value, Refused> {
        match asked {
            Asked::Get(id) => {
                let r = self.look(gateway, caller, &id).await?;
                Ok(wire(&r))
            }
            Asked::Result(id) => self.result(gateway, caller, &id).await,
            Asked::List => Ok(json!({ "tasks": self.list(caller).await })),
            Asked::Cancel(id) => self.cancel(caller, &id).await,
        }
    }

    /// `tasks/get` of the tasks extension: the caller's task `id` with its result.
    pub(super) async fn detail(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        id: &str,
    ) -> Result<rmcp::model::DetailedTask, Refused> {
        Ok(detailed(&self.look(gateway, caller, id).await?))
    }

    /// The caller's task `id`, taken over first when the replica running it died.
    async fn look(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        id: &str,
    ) -> Result<Record, Refused> {
        let r = self.own(caller, id).await?;
        if r.status != Status::Working || self.runs_here(id) || !self.may_look(id) {
            return Ok(r);
        }
        match self.intents.clone().claim(self.claim(id)).await {
            Ok(Intent::Orphaned) | Ok(Intent::New) => Ok(self.adopt(gateway, r).await),
            _ => Ok(r),
        }
    }

    fn runs_here(&self, id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.contains_key(id)
    }

    /// Whether a lapsed lease of `id` may be looked at now (at most once a [`ADOPT_EVERY`]).
    fn may_look(&self, id: &str) -> bool {
        let mut looked = self.looked.lock().unwrap_or_else(|e| e.into_inner());
        let now = tokio::time::Instant::now();
        looked.retain(|_, at| now.duration_since(*at) < ADOPT_EVERY * 10);
        match looked.get(id) {
            Some(at) if now.duration_since(*at) < ADOPT_EVERY => false,
            _ => {
                looked.insert(id.to_string(), now);
                true
            }
        }
    }

    /// Take over a task whose replica died: run its call again when that is safe, settle it
    /// by its probe when it has one (`verify`), else answer it `indeterminate`.
    async fn adopt(self: &Arc<Self>, gateway: &Arc<Gateway>, mut r: Record) -> Record {
        let claim = self.claim(&r.id);
        // A write with a probe is asked about first, started or not: the record may not say yet
        // that the call reached its tool (it is saved at the next tick), and a probe of one
        // that never did says so.
        let probed = !safe_to_repeat(gateway, &r.tool) && has_probe(gateway, &r.tool);
        let again = !r.started || safe_to_repeat(gateway, &r.tool) || probed;
        super::say::line(format!(
            "flux-tools mcp serve: task {} of `{}`, left by a replica that stopped, is taken over here{}",
            r.id,
            r.tool,
            if again { "" } else { " (answered indeterminate)" }
        ));
        if again {
            r.message = Some("taken over by another replica".into());
            r.updated = now();
            self.save(&r).await;
            let session = gateway.session();
            let mut cx = bare_cx(&r);
            cx.cut_off_before = probed;
            self.run(gateway.clone(), session, (r.clone(), claim), cx, None);
            return r;
        }
        let answer = super::answer::error(
            "indeterminate: the replica running this task stopped after its call reached its tool; it may have taken effect, and it is not sent again (the tool is not idempotent)",
        );
        self.finish(r.clone(), claim, answer).await;
        self.load(&r.id).await.unwrap_or(r)
    }

    /// `tasks/result`: the call's `CallToolResult` once the task ends (waiting till then).
    async fn result(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        id: &str,
    ) -> Result<Value, Refused> {
        loop {
            let r = self.look(gateway, caller, id).await?;
            match (r.status, r.result) {
                (Status::Working, _) => tokio::time::sleep(WATCH).await,
                (Status::Cancelled, _) | (_, None) => {
                    return Err(super::fault::Fault::Params(format!(
                        "task `{id}` was cancelled: it has no result"
                    )))
                }
                (_, Some(mut result)) => {
                    let related = json!({"io.modelcontextprotocol/related-task": {"taskId": id}});
                    if let Some(o) = result.as_object_mut() {
                        o.insert("_meta".into(), related);
                    }
                    return Ok(result);
                }
            }
        }
    }

    /// The caller's tasks that are still kept, newest first (at most [`LISTED`]).
    async fn list(&self, caller: &Caller) -> Vec<Value> {
        let owner = caller.owner();
        let mut ids = self
            .records
            .raw()
            .clone()
            .counters(index_of(&owner))
            .await
            .unwrap_or_default();
        ids.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (mut out, mut gone) = (Vec::new(), Vec::new());
        for (id, _) in ids.into_iter().take(PRUNE) {
            match self.load(&id).await {
                Some(r) if r.owner == owner => out.push(wire(&r)),
                Some(_) => {}
                None => gone.push(id),
            }
            if out.len() == LISTED {
                break;
            }
        }
        let _ = self
            .records
            .raw()
            .clone()
            .forget(index_of(&owner), gone)
            .await;
        out
    }

    /// `tasks/cancel`: marked in the record (the replica running it cancels the call).
    pub(super) async fn cancel(&self, caller: &Caller, id: &str) -> Result<Value, Refused> {
        let mut r = self.own(caller, id).await?;
        if r.status != Status::Working {
            let status = serde_json::to_value(r.status).unwrap_or_default();
            return Err(super::fault::Fault::Params(format!(
                "task `{id}` cannot be cancelled: it is {status}"
            )));
        }
        r.status = Status::Cancelled;
        r.message = Some("cancelled by the client".into());
        r.updated = now();
        let why = r.message.clone().unwrap_or_default();
        let keep = Duration::from_millis(r.ttl);
        if let Err(e) = self.records.raw().clone().put(mark_of(id), why, keep).await {
            return Err(super::fault::Fault::Internal(format!(
                "task `{id}` could not be cancelled: {e}"
            )));
        }
        self.save(&r).await;
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, cancel)) = running.get(id) {
            cancel.cancel();
        }
        Ok(wire(&r))
    }

    /// How many tasks this replica runs now.
    pub(super) fn running(&self) -> usize {
        self.running.lock().map_or(0, |r| r.len())
    }
}

/// Whether a call of `tool` may be made again when it may have been made: a read, or an
/// idempotent tool.
fn safe_to_repeat(gateway: &Gateway, tool: &str) -> bool {
    let m = gateway.catalog.manifest();
    m.tool_position(tool)
        .map(|i| &m.tools[i])
        .is_some_and(|t| t.effect == crate::manifest::Effect::Read || t.idempotent)
}

/// Whether `tool` is a write with a probe that settles it when cut off (`verify`).
fn has_probe(gateway: &Gateway, tool: &str) -> bool {
    let m = gateway.catalog.manifest();
    m.tool_position(tool)
        .is_some_and(|i| m.tools[i].verify.is_some())
}

/// What a task's call is made with when no client waits for it (nobody to ask, nothing
/// before it on a wire).
fn bare_cx(r: &Record) -> CallCx {
    CallCx::new(caller_of(r), CancellationToken::new())
}

/// The JSON-RPC answer to task request `id`.
pub(super) fn reply(id: &Value, answer: Result<Value, Refused>) -> Vec<u8> {
    match answer {
        Ok(result) => {
            let message = json!({"jsonrpc": "2.0", "id": id, "result": result});
            serde_json::to_vec(&message).unwrap_or_default()
        }
        Err(fault) => fault.line(id),
    }
}
