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
//! again (a read, or `idempotent = true`). A cancel marks the record; the replica running the
//! call sees it within [`WATCH`] and cancels the call (it leaves its lane; a queued call never
//! reaches its tool). A task is its creator's (its tenant, and its subject when a JWT named
//! one): to anyone else it does not exist. A finished task is kept `[serve.limits] tasks_kept`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::caller::{Caller, Via};
use super::entry::Asked;
use super::gateway::{CallCx, Gateway, Session, Target};
use crate::run::store::intents::{Claim, Intent, Intents, LocalIntents};
use crate::run::store::records::{Add, LocalRecords, Records};

/// How often a running task's replica looks at its record (for a cancel from elsewhere).
const WATCH: Duration = Duration::from_millis(250);
/// How long a replica's lease on a task's run lasts without renewal, and how often it is
/// renewed: it lapses 13 to 15 s after its replica died — after the approval board has
/// seen the replica's parked calls orphaned (10 s), so a call parked for approval is taken
/// over with its `ID@HASH` and any answer given meanwhile.
const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(2);
/// The poll interval suggested to clients.
const POLL_MS: u64 = 500;
/// How long a lapsed lease is looked at again at most once (per task, per replica).
const ADOPT_EVERY: Duration = Duration::from_secs(1);

/// A task's status, as the protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Working,
    Completed,
    Failed,
    Cancelled,
}

/// What the store keeps of a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    id: String,
    owner: String,
    tenant: String,
    subject: Option<String>,
    roles: Option<Vec<String>>,
    jwt: bool,
    tool: String,
    args: Map<String, Value>,
    status: Status,
    message: Option<String>,
    created: String,
    updated: String,
    /// How long it is kept (ms).
    ttl: u64,
    /// Its call reached its tool (a replica that dies after this may have made it).
    started: bool,
    /// The call's `CallToolResult`, once it ended.
    result: Option<Value>,
}

/// A refusal of a task request: JSON-RPC code and message.
pub(super) type Refused = (i64, String);

/// The gateway's tasks.
pub(super) struct Tasks {
    records: Arc<dyn Records>,
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

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
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
            records: records.unwrap_or_else(|| Arc::new(LocalRecords::new(cap))),
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

    async fn load(&self, id: &str) -> Option<Record> {
        let text = self.records.clone().get(id.to_string(), self.kept).await;
        serde_json::from_str(&text.ok()??).ok()
    }

    async fn save(&self, r: &Record) {
        let text = serde_json::to_string(r).unwrap_or_default();
        let keep = Duration::from_millis(r.ttl);
        if let Err(e) = self.records.clone().put(r.id.clone(), text, keep).await {
            super::say::line(format!("warning: mcp serve: task {} not saved: {e}", r.id));
        }
    }

    /// The caller's task `id`, or "not found" (another's is not found either).
    async fn own(&self, caller: &Caller, id: &str) -> Result<Record, Refused> {
        match self.load(id).await {
            Some(r) if r.owner == caller.owner() => Ok(r),
            _ => Err((-32602, format!("task not found: `{id}`"))),
        }
    }

    /// Start a call of `tool` with `args` as a task of `caller` (kept `ttl` ms, at most
    /// `tasks_kept`): its `CreateTaskResult`.
    pub(super) async fn start(
        self: &Arc<Self>,
        gateway: &Arc<Gateway>,
        session: Arc<Session>,
        caller: &Caller,
        (tool, args): (String, Map<String, Value>),
        ttl: Option<u64>,
    ) -> Result<Value, Refused> {
        let busy = {
            let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            running
                .values()
                .filter(|(t, _)| *t == caller.tenant)
                .count()
        };
        if busy >= self.per_tenant as usize {
            let why = format!(
                "{busy} tasks of tenant `{}` are unfinished in this gateway ([serve.limits] tasks_per_tenant = {}): this call was not started",
                caller.tenant, self.per_tenant
            );
            return Err((-32603, why));
        }
        let most = self.kept.as_millis() as u64;
        let at = now();
        let r = Record {
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
        };
        let claim = self.claim(&r.id);
        if let Err(e) = self.intents.clone().claim(claim.clone()).await {
            return Err((-32603, format!("the task could not be recorded: {e}")));
        }
        self.save(&r).await;
        let index = Add {
            counter: r.id.clone(),
            by: 1.0,
            most: None,
        };
        let indexed = self
            .records
            .clone()
            .tally(index_of(&r.owner), vec![index], self.kept);
        let _ = indexed.await;
        let task = wire(&r);
        self.run(gateway.clone(), session, r, claim);
        Ok(json!({ "task": task }))
    }

    /// Run the task's call on a task of its own, its record kept up to date.
    fn run(self: &Arc<Self>, gateway: Arc<Gateway>, session: Arc<Session>, r: Record, c: Claim) {
        let cancel = CancellationToken::new();
        {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            running.insert(r.id.clone(), (r.tenant.clone(), cancel.clone()));
        }
        tokio::spawn(self.clone().drive(gateway, session, r, (c, cancel)));
    }

    async fn drive(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        session: Arc<Session>,
        mut r: Record,
        (claim, cancel): (Claim, CancellationToken),
    ) {
        let (tx, mut said) = tokio::sync::mpsc::unbounded_channel::<String>();
        let started = Arc::new(AtomicBool::new(false));
        let cx = CallCx {
            caller: caller_of(&r),
            traceparent: None,
            cancel: cancel.clone(),
            progress: Some(Arc::new(move |p: crate::tools::Progress| {
                if let Some(m) = p.message {
                    let _ = tx.send(m);
                }
            })),
            elicit: None,
            arrival: None,
            asks: None,
            key: None,
            mrtr: None,
            started: Some(started.clone()),
        };
        let args = r.args.clone();
        let tool = r.tool.clone();
        let mut call = Box::pin(gateway.call(&session, Target::Tool(&tool), args, cx));
        let mut watch = tokio::time::interval(WATCH);
        let mut renewed = tokio::time::Instant::now();
        let out = loop {
            tokio::select! {
                out = &mut call => break out,
                Some(m) = said.recv() => {
                    r.message = Some(m);
                    r.started = started.load(Ordering::Relaxed);
                    r.updated = now();
                    self.save(&r).await;
                }
                _ = watch.tick() => {
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
        let answer = match out {
            Ok(o) => o.answer(),
            Err(e) => super::answer::error(&e),
        };
        self.finish(r, claim, answer).await;
    }

    /// Record the task's answer (a cancel recorded meanwhile stands), and let its lease go.
    async fn finish(&self, mut r: Record, claim: Claim, answer: Value) {
        let cancelled = self
            .load(&r.id)
            .await
            .is_some_and(|k| k.status == Status::Cancelled);
        if !cancelled {
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

    /// Take over a task whose replica died: run its call again when that is safe, else
    /// answer it `indeterminate`.
    async fn adopt(self: &Arc<Self>, gateway: &Arc<Gateway>, mut r: Record) -> Record {
        let claim = self.claim(&r.id);
        let again = !r.started || safe_to_repeat(gateway, &r.tool);
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
            self.run(gateway.clone(), session, r.clone(), claim);
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
                    return Err((
                        -32602,
                        format!("task `{id}` was cancelled: it has no result"),
                    ))
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

    /// The caller's tasks that are still kept, newest first.
    async fn list(&self, caller: &Caller) -> Vec<Value> {
        let ids = self
            .records
            .clone()
            .counters(index_of(&caller.owner()))
            .await;
        let mut out = Vec::new();
        for (id, _) in ids.unwrap_or_default() {
            if let Some(r) = self.load(&id).await.filter(|r| r.owner == caller.owner()) {
                out.push(r);
            }
        }
        out.sort_by(|a, b| b.created.cmp(&a.created));
        out.iter().map(wire).collect()
    }

    /// `tasks/cancel`: marked in the record (the replica running it cancels the call).
    async fn cancel(&self, caller: &Caller, id: &str) -> Result<Value, Refused> {
        let mut r = self.own(caller, id).await?;
        if r.status != Status::Working {
            let status = serde_json::to_value(r.status).unwrap_or_default();
            return Err((
                -32602,
                format!("task `{id}` cannot be cancelled: it is {status}"),
            ));
        }
        r.status = Status::Cancelled;
        r.message = Some("cancelled by the client".into());
        r.updated = now();
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

/// The JSON-RPC answer to task request `id`.
pub(super) fn reply(id: &Value, answer: Result<Value, Refused>) -> Vec<u8> {
    let message = match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    };
    serde_json::to_vec(&message).unwrap_or_default()
}

/// The record of an owner's tasks (an index: one counter per task id).
fn index_of(owner: &str) -> String {
    format!("tasks-of\u{0}{owner}")
}

/// A task as the protocol shows it.
fn wire(r: &Record) -> Value {
    let mut t = json!({
        "taskId": r.id,
        "status": r.status,
        "createdAt": r.created,
        "lastUpdatedAt": r.updated,
        "ttl": r.ttl,
        "pollInterval": POLL_MS,
    });
    if let Some(m) = &r.message {
        t["statusMessage"] = m.clone().into();
    }
    t
}

/// The caller a task was started by (to run it again on another replica).
fn caller_of(r: &Record) -> Caller {
    Caller {
        tenant: r.tenant.clone(),
        subject: r.subject.clone(),
        roles: r.roles.clone().map(Arc::from),
        via: if r.jwt {
            Via::Jwt
        } else if r.roles.is_some() {
            Via::Token
        } else {
            Via::Local
        },
    }
}

/// The first text of a `CallToolResult`.
fn first_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(500)
        .collect()
}

/// A task id: 128 random bits (what keeps a task from others is its owner, not its id).
fn task_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}
