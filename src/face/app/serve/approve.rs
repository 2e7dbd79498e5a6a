//! Approval of a served call that needs it: asked through the client (MCP elicitation) when
//! the manifest allows in-band approval (`[serve] approval_in_band = true`), the tool is not
//! `approval = "out_of_band"` and the client can be asked; else — and when the client cannot
//! answer — parked out of band for `flux-tools approve ID@HASH` from another terminal. A call
//! that nobody approves by its deadline (`[serve] approval_timeout`, 10 minutes) is refused
//! `approval_denied`, as is one declined either way. The client's cancellation ends the wait.
//!
//! A parked call is a future and an entry on the board, nothing more: no thread, no timer of
//! its own. One [`Desk`] per gateway looks at the board's answers for all its parked calls
//! ([`POLL`]), says once a second that the gateway lives (one beat for all of them), and
//! bounds how many calls wait at once per session and per tenant (`[serve.limits]`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::audit::{Audit, Event};
use super::caller::Caller;
use super::progress::Reporter;
use crate::app::parked::{self, Decision, Parked, Place, Waiting};
use crate::run::store::BoxFuture;
use crate::run::{ApprovalRequest, Approver, Ruling};

/// How long a parked call waits unless the manifest says otherwise.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the desk looks for answers, and how often it says the gateway lives.
const POLL: Duration = Duration::from_millis(100);
const BEAT: Duration = Duration::from_secs(1);
/// How long a look for orphaned entries (to take over) is reused.
const ORPHANS_FOR: Duration = Duration::from_secs(1);

/// What a client answered an elicitation with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InBand {
    Accept,
    Decline,
    Cancel,
}

/// Ask the client (its message); `Err`: it could not be asked.
pub(super) type Elicit = Arc<dyn Fn(String) -> Asking + Send + Sync>;

/// A question to the client, under way.
pub(super) type Asking =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InBand, String>> + Send>>;

/// What the client is asked, in band.
fn question(tool: &str, args: &serde_json::Value, hash: &str) -> String {
    format!("flux-tools: approve the call of `{tool}` with arguments {args} (hash {hash})?")
}

/// What a parked call says while it waits (a task's caller takes it for "parked").
pub(super) const WAITING: &str = "waiting for approval";

/// Where a 2026-07-28 client's answer goes in its follow-up request (`inputResponses`).
pub(super) const INPUT_KEY: &str = "flux-tools/approval";

/// A 2026-07-28 client that answers a question in its follow-up request (MRTR, SEP-2322): a
/// call that needs its approval is answered `input_required` at once — its question, and the
/// state `flux-tools:approval:HASH` the client echoes — and the follow-up's answer approves
/// or declines the call only if that hash is still its arguments' (a changed call is asked
/// again). Nothing waits between the two requests, so any replica takes the follow-up.
#[derive(Debug, Clone, Default)]
pub(super) struct Mrtr {
    /// The state the follow-up echoed, and the client's answer.
    pub answer: Option<(String, InBand)>,
}

impl Mrtr {
    /// The client's answer for a call of `tool` with `args`, as an elicitation already
    /// answered; else the question to ask and the state to echo.
    pub(super) fn answer_for(
        &self,
        tool: &str,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Elicit, (String, String)> {
        let hash = crate::run::gate::approval_hash(tool, args);
        let state = format!("flux-tools:approval:{hash}");
        match &self.answer {
            Some((echoed, a)) if *echoed == state => {
                let a = *a;
                Ok(Arc::new(move |_| {
                    Box::pin(std::future::ready(Ok(a))) as Asking
                }))
            }
            _ => {
                let args = serde_json::Value::Object(args.clone());
                Err((question(tool, &args, &hash), state))
            }
        }
    }
}

/// The calls one gateway holds for approval out of band.
pub(super) struct Desk {
    parked: Arc<Parked>,
    /// The name this gateway beats under (the prefix of its calls' ids).
    gateway: String,
    /// `[serve.limits]`: calls parked at once per session and per tenant.
    per_session: u32,
    per_tenant: u32,
    state: Mutex<Held>,
    /// Cancelled when the gateway stops: every parked call is answered at once.
    closing: CancellationToken,
}

#[derive(Default)]
struct Held {
    /// Each parked call's id: its arguments' hash and who to tell.
    waiters: HashMap<String, (String, oneshot::Sender<(Decision, String)>)>,
    sessions: HashMap<u64, u32>,
    tenants: HashMap<String, u32>,
    /// Whether the look at the board runs (only while calls wait).
    polling: bool,
    /// The last look for orphaned entries, and when.
    orphans: Option<(tokio::time::Instant, Orphans)>,
    /// Whether a look is under way (the calls parking meanwhile use the last one).
    looking: bool,
}

/// Orphaned entries as read, each with the text it is stored as.
type Orphans = Arc<Vec<(Waiting, String)>>;

/// A place among the calls a session and a tenant may park; given back when dropped.
pub(super) struct Seat {
    desk: Arc<Desk>,
    session: u64,
    tenant: String,
}

/// A parked call: its entry, and where its answer comes.
pub(super) struct Parking {
    desk: Arc<Desk>,
    place: Place,
    /// The decision, and who gave it.
    answer: oneshot::Receiver<(Decision, String)>,
}

impl Desk {
    pub(super) fn new(
        parked: Arc<Parked>,
        gateway: String,
        limits: &crate::manifest::ServeLimits,
    ) -> Arc<Desk> {
        Arc::new(Desk {
            parked,
            gateway,
            per_session: limits.parked_per_session,
            per_tenant: limits.parked_per_tenant,
            state: Mutex::default(),
            closing: CancellationToken::new(),
        })
    }

    /// The gateway stops: every call parked here stops waiting (and no new one parks).
    pub(super) fn close(&self) {
        self.closing.cancel();
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The board.
    pub(super) fn parked(&self) -> &Arc<Parked> {
        &self.parked
    }

    /// Room for one more parked call of `session` and `tenant`; `Err` says which bound is
    /// reached.
    pub(super) fn admit(self: &Arc<Self>, session: u64, tenant: &str) -> Result<Seat, String> {
        let mut h = self.lock();
        let s = h.sessions.get(&session).copied().unwrap_or(0);
        if s >= self.per_session {
            return Err(format!(
                "approval denied: {s} calls of this session already wait for approval ([serve.limits] parked_per_session = {}); this one was not parked",
                self.per_session
            ));
        }
        let t = h.tenants.get(tenant).copied().unwrap_or(0);
        if t >= self.per_tenant {
            return Err(format!(
                "approval denied: {t} calls of tenant `{tenant}` already wait for approval in this gateway ([serve.limits] parked_per_tenant = {}); this one was not parked",
                self.per_tenant
            ));
        }
        *h.sessions.entry(session).or_default() += 1;
        *h.tenants.entry(tenant.to_string()).or_default() += 1;
        Ok(Seat {
            desk: self.clone(),
            session,
            tenant: tenant.to_string(),
        })
    }

    /// Park `w` (or take over an orphaned entry for the same call); its answer comes through
    /// the returned [`Parking`].
    pub(super) async fn park(self: &Arc<Self>, mut w: Waiting) -> Result<Parking, String> {
        w.gateway = self.gateway.clone();
        let orphans = self.orphans().await;
        let place = match self.parked.adopt(&w, &orphans).await {
            Some(p) => {
                super::say::line(format!(
                    "flux-tools mcp serve: call `{}` of `{}`, parked by a gateway that stopped, is taken over here by the client's retry",
                    p.waiting().id, w.tool
                ));
                self.lock().orphans = None;
                p
            }
            None => {
                self.parked.park(w).await.map_err(|e| {
                    format!("approval required, and the call could not be parked: {e}")
                })?
            }
        };
        let (tell, answer) = oneshot::channel();
        let hash = place.waiting().hash.clone();
        let start = {
            let mut h = self.lock();
            h.waiters.insert(place.waiting().id.clone(), (hash, tell));
            !std::mem::replace(&mut h.polling, true)
        };
        if start {
            // Said at once, not a poll later: this gateway's entries are never taken for orphans.
            self.parked.beat(&self.gateway).await;
            tokio::spawn(self.clone().poll());
        }
        Ok(Parking {
            desk: self.clone(),
            place,
            answer,
        })
    }

    /// Whether a dead gateway left a call of `who` (tenant and subject) with idempotency key
    /// digest `key` parked (so an intent of that key that died in flight never reached its
    /// tool) — one its retry takes over, as [`Parked::adopt`](super::super::parked) matches.
    pub(super) async fn left_parked(&self, who: (&str, Option<&str>), key: &str) -> bool {
        let orphans = self.orphans().await;
        orphans.iter().any(|(w, _)| {
            (w.tenant.as_str(), w.subject.as_deref()) == who && w.key.as_deref() == Some(key)
        })
    }

    /// The orphaned entries, looked for at most once a [`ORPHANS_FOR`] by one call at a time
    /// (a flood of calls parking at once reads the board once, not once each).
    async fn orphans(&self) -> Orphans {
        {
            let mut h = self.lock();
            let last = h.orphans.clone();
            match last {
                Some((at, list)) if at.elapsed() < ORPHANS_FOR || h.looking => return list,
                None if h.looking => return Orphans::default(),
                _ => h.looking = true,
            }
        }
        let list = Arc::new(self.parked.orphans(&self.gateway).await);
        let mut h = self.lock();
        h.orphans = Some((tokio::time::Instant::now(), list.clone()));
        h.looking = false;
        list
    }

    /// While calls wait: beat, and hand each answer the board has to the call it is for.
    async fn poll(self: Arc<Self>) {
        let mut beaten: Option<tokio::time::Instant> = None;
        loop {
            if beaten.is_none_or(|b| b.elapsed() >= BEAT) {
                self.parked.beat(&self.gateway).await;
                beaten = Some(tokio::time::Instant::now());
            }
            let answers = self.parked.answers().await;
            {
                let mut h = self.lock();
                for (id, text) in answers {
                    let decided = h
                        .waiters
                        .get(&id)
                        .and_then(|(hash, _)| parked::decision(&text, hash));
                    if let (Some(d), Some((_, tell))) = (decided, h.waiters.remove(&id)) {
                        let by = parked::answered_by(&text).unwrap_or("flux-tools approve");
                        let _ = tell.send((d, by.to_string()));
                    }
                }
            }
            tokio::time::sleep(POLL).await;
            let mut h = self.lock();
            if h.waiters.is_empty() {
                h.polling = false;
                return;
            }
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut h = self.desk.lock();
        if let Some(n) = h.sessions.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                h.sessions.remove(&self.session);
            }
        }
        if let Some(n) = h.tenants.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                h.tenants.remove(&self.tenant);
            }
        }
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        self.desk.lock().waiters.remove(&self.place.waiting().id);
    }
}

/// The approver of one served call.
pub(super) struct CallApprover {
    /// The client, when it may be asked.
    pub in_band: Option<Elicit>,
    pub desk: Option<Arc<Desk>>,
    /// The parked call's id (`GATEWAY-SEQ`), its session and caller.
    pub id: String,
    pub session: u64,
    pub caller: Caller,
    /// A digest of the client's idempotency key for the call, when it sent one.
    pub key: Option<String>,
    /// Where the asking and the answer are recorded.
    pub audit: Arc<Audit>,
    /// How long it may wait.
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// Its client's progress, told while it waits.
    pub progress: Option<Arc<Reporter>>,
}

impl CallApprover {
    /// Ask, and record the asking and the answer (with who gave it) in the audit trail.
    async fn decide(&self, req: &ApprovalRequest) -> Ruling {
        let call = serde_json::json!({"call": self.id, "tool": req.tool, "session": self.session});
        self.audit
            .record(Event::ApprovalAsked, Some(&self.caller), call.clone());
        let (ruling, by) = self.ruling(req).await;
        let mut answered = call;
        answered["decision"] = match &ruling {
            Ruling::Approved => "approved".into(),
            Ruling::Unanswered => "unanswered".into(),
            Ruling::Denied(why) => {
                answered["reason"] = why.as_str().into();
                "denied".into()
            }
        };
        answered["by"] = by.into();
        self.audit
            .record(Event::ApprovalAnswered, Some(&self.caller), answered);
        ruling
    }

    /// The ruling, and who gave it.
    async fn ruling(&self, req: &ApprovalRequest) -> (Ruling, String) {
        let client = || format!("the client ({})", self.caller.who());
        let Some(args) = req.args.as_object() else {
            let why = "approval denied: the arguments are not an object";
            return (Ruling::Denied(why.into()), "the gateway".into());
        };
        let hash = crate::run::gate::approval_hash(&req.tool, args);
        if let Some(elicit) = &self.in_band {
            let message = question(&req.tool, &req.args, &hash);
            self.say("waiting for the client's approval".into());
            match elicit(message).await {
                Ok(InBand::Accept) => return (Ruling::Approved, client()),
                Ok(InBand::Decline) => {
                    let why = "approval denied: declined through the client";
                    return (Ruling::Denied(why.into()), client());
                }
                Ok(InBand::Cancel) => {
                    let why = "approval denied: dismissed through the client";
                    return (Ruling::Denied(why.into()), client());
                }
                // The client could not answer: ask out of band instead.
                Err(_) => {}
            }
        }
        self.out_of_band(req, hash).await
    }

    fn say(&self, message: String) {
        if let Some(r) = &self.progress {
            r.waiting(message);
        }
    }

    async fn out_of_band(&self, req: &ApprovalRequest, hash: String) -> (Ruling, String) {
        let gateway = || "the gateway".to_string();
        let Some(desk) = &self.desk else {
            let why = "approval required, and there is nowhere to park the call";
            return (Ruling::Denied(why.into()), gateway());
        };
        if desk.closing.is_cancelled() {
            let why = "approval denied: the gateway is shutting down";
            return (Ruling::Denied(why.into()), gateway());
        }
        let _seat = match desk.admit(self.session, &self.caller.tenant) {
            Ok(s) => s,
            Err(why) => return (Ruling::Denied(why), gateway()),
        };
        let now = parked::unix_now();
        let waiting = Waiting {
            id: self.id.clone(),
            tool: req.tool.clone(),
            args: req.args.clone(),
            hash: hash.clone(),
            pid: std::process::id(),
            gateway: String::new(),
            tenant: self.caller.tenant.clone(),
            key: self.key.clone(),
            subject: self.caller.subject.clone(),
            orphaned: false,
            since: now,
            until: now + self.timeout.as_secs_f64(),
            seen: now,
        };
        let mut parking = match desk.park(waiting).await {
            Ok(p) => p,
            Err(why) => return (Ruling::Denied(why), gateway()),
        };
        let id = parking.place.waiting().id.clone();
        super::say::line(format!(
            "flux-tools mcp serve: call `{id}` of `{}` waits for approval: flux-tools approve {id}@{hash}",
            req.tool
        ));
        self.say(format!("{WAITING}: flux-tools approve {id}@{hash}"));
        let left = (parking.place.waiting().until - now).max(0.0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(left);
        tokio::select! {
            d = &mut parking.answer => match d {
                Ok((Decision::Approve, by)) => (Ruling::Approved, by),
                Ok((Decision::Deny, by)) => (Ruling::Denied(format!("approval denied out of band by {by}")), by),
                Err(_) => (Ruling::Denied("approval denied: the gateway stopped looking for the answer".into()), gateway()),
            },
            () = tokio::time::sleep_until(deadline) => {
                let t = crate::duration::format(self.timeout);
                (Ruling::Denied(format!("approval denied: nobody approved it within {t}")), "nobody (timed out)".into())
            }
            () = self.cancel.cancelled() => {
                (Ruling::Denied("approval denied: the client cancelled the call, or its session ended".into()), "the client (cancelled)".into())
            }
            () = desk.closing.cancelled() => {
                (Ruling::Denied("approval denied: the gateway is shutting down".into()), gateway())
            }
        }
    }
}

impl Approver for CallApprover {
    fn ask(self: Arc<Self>, request: ApprovalRequest) -> BoxFuture<'static, Ruling> {
        Box::pin(async move { self.decide(&request).await })
    }
}

/// Ask for the call's approval before its run starts, so a call parked for approval holds its
/// plan and its question, not a scheduler; the run's gate then hears the ruling at once
/// (and runs the `before_call` hook after it, as in a batch). `true`: it was approved.
pub(super) async fn ask_first(
    p: &crate::plan::Plan,
    approver: Arc<dyn Approver>,
) -> (Arc<dyn Approver>, bool) {
    let call = &p.calls[0];
    let request = ApprovalRequest {
        id: call.id.clone(),
        tool: call.tool_name.clone(),
        args: serde_json::Value::Object(call.args.value.clone()),
    };
    let ruling = approver.ask(request).await;
    let yes = matches!(ruling, crate::run::gate::Ruling::Approved);
    (Arc::new(crate::run::gate::Answered(ruling)), yes)
}
