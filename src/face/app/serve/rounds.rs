//! A 2026-07-28 client's call whose upstream asks the client something (elicitation, sampling).
//! That version has no request from server to client: the client answers in its follow-up
//! request (`input_required`, SEP-2322). So the call goes on in the background; each question
//! it asks comes back to the client as `input_required` with a state of this round, and the
//! follow-up that echoes the state brings the answers to the questions waiting for them.
//!
//! A round is its caller's (a follow-up of another owner, or of another tool, is refused as a
//! state it does not know), is spent when the call ends, and ends unanswered after
//! `[serve.limits] answer_wait` — the upstream is told its client did not answer. At most
//! `asking_per_tenant` calls of one tenant wait for answers at once. The round lives in this
//! gateway process: a follow-up that reaches another replica is told the state is unknown.
#![allow(deprecated)] // sampling and logging (SEP-2577): a 2026-07-28 client may still be asked

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, InputRequest, InputRequiredResult, InputResponses,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::answer::Outcome;
use super::caller::Caller;
use super::fault::Fault;
use crate::tools::mcp::{Answerer, Asker};

/// How a round's state begins (the rest: this gateway's id and 128 random bits).
pub(super) const STATE: &str = "flux-tools:round:";

/// An upstream's question, waiting for its answer.
enum Question {
    Elicit(ElicitRequestParams, Reply<ElicitResult>),
    Sample(CreateMessageRequestParams, Reply<CreateMessageResult>),
}

type Reply<R> = oneshot::Sender<Result<R, String>>;

impl Question {
    /// As the client is asked it.
    fn request(&self) -> InputRequest {
        match self {
            Question::Elicit(p, _) => InputRequest::Elicitation(ElicitRequest::new(p.clone())),
            Question::Sample(p, _) => {
                InputRequest::CreateMessage(CreateMessageRequest::new(p.clone()))
            }
        }
    }

    /// Give the upstream the client's answer (`Err`: it is not an answer of this kind).
    fn answer(self, said: serde_json::Value) {
        fn give<R: serde::de::DeserializeOwned>(to: Reply<R>, said: serde_json::Value) {
            let read = serde_json::from_value(said)
                .map_err(|e| format!("the client's answer is not of the kind asked: {e}"));
            let _ = to.send(read);
        }
        match self {
            Question::Elicit(_, to) => give(to, said),
            Question::Sample(_, to) => give(to, said),
        }
    }
}

/// A call under way whose client answers its upstream's questions in follow-ups.
pub(super) struct Round {
    state: String,
    owner: String,
    tenant: String,
    tool: String,
    questions: mpsc::UnboundedReceiver<Question>,
    /// Asked of the client, not yet answered, by key.
    waiting: BTreeMap<String, Question>,
    keys: u32,
    done: tokio::task::JoinHandle<Result<Outcome, super::fault::Fault>>,
    /// Ends the call when the round is dropped (spent, expired, refused).
    _stop: DropGuard,
}

/// Where a round stands after its client's request.
pub(super) enum Turn {
    Done(Result<Outcome, super::fault::Fault>),
    Ask(InputRequiredResult),
    /// Its tenant has its limit of calls waiting for answers: the call is ended.
    Refused(Fault),
}

/// The rounds waiting for a follow-up in this gateway.
pub(super) struct Rounds {
    gateway: String,
    wait: Duration,
    per_tenant: usize,
    open: Mutex<HashMap<String, (Round, u64)>>,
    parks: std::sync::atomic::AtomicU64,
}

/// Where an upstream's questions of one call come to its round.
pub(super) struct Questions(mpsc::UnboundedReceiver<Question>);

/// An asker for a call of client `client` that brings the upstream's questions (those the
/// client declared it answers) to the call's round; log messages go as `log` says.
pub(super) fn asker(
    client: u64,
    (elicits, samples): (bool, bool),
    log: Option<Arc<dyn Fn(rmcp::model::LoggingMessageNotificationParam) + Send + Sync>>,
) -> (Asker, Questions) {
    let (tx, rx) = mpsc::unbounded_channel();
    let elicit = elicits.then(|| relay(tx.clone(), Question::Elicit));
    let sample = samples.then(|| relay(tx, Question::Sample));
    let asker = Asker {
        client,
        elicit,
        sample,
        log,
    };
    (asker, Questions(rx))
}

/// An answerer that sends its question (made by `make`) to the round and waits for the answer.
fn relay<P: Send + 'static, R: Send + 'static>(
    to: mpsc::UnboundedSender<Question>,
    make: fn(P, Reply<R>) -> Question,
) -> Answerer<P, R> {
    Arc::new(move |params| {
        let to = to.clone();
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let gone = || "the call's client is gone".to_string();
            to.send(make(params, reply)).map_err(|_| gone())?;
            let unanswered = "the client did not answer (no follow-up request came in time)";
            answer.await.map_err(|_| unanswered.to_string())?
        }) as BoxFuture<'static, _>
    })
}

impl Rounds {
    pub(super) fn new(gateway: String, limits: &crate::manifest::ServeLimits) -> Rounds {
        Rounds {
            gateway,
            wait: limits.answer_wait,
            per_tenant: limits.asking_per_tenant as usize,
            open: Mutex::default(),
            parks: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Round, u64)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The round of `caller`'s call of `tool`: `call` runs in the background until it ends or
    /// `stop` (cancelled when the round is dropped) ends it.
    pub(super) fn begin(
        &self,
        caller: &Caller,
        tool: &str,
        questions: Questions,
        stop: CancellationToken,
        call: impl Future<Output = Result<Outcome, super::fault::Fault>> + Send + 'static,
    ) -> Round {
        let state = format!(
            "{STATE}{}:{:016x}{:016x}",
            self.gateway,
            fastrand::u64(..),
            fastrand::u64(..)
        );
        Round {
            state,
            owner: caller.owner(),
            tenant: caller.tenant.clone(),
            tool: tool.to_string(),
            questions: questions.0,
            waiting: BTreeMap::new(),
            keys: 0,
            done: tokio::spawn(call),
            _stop: stop.drop_guard(),
        }
    }

    /// The round a follow-up of `caller`'s call of `tool` echoed `state` for, its answers
    /// given to the questions they answer.
    pub(super) fn resume(
        &self,
        state: &str,
        caller: &Caller,
        tool: &str,
        answers: Option<InputResponses>,
    ) -> Result<Round, Fault> {
        let mut open = self.lock();
        let theirs = open
            .get(state)
            .is_some_and(|(r, _)| r.owner == caller.owner());
        if !theirs {
            let why = "the request state is unknown or expired (a call waits for its answers for [serve.limits] answer_wait, on the gateway that asked)";
            return Err(Fault::Params(why.into()));
        }
        if open.get(state).is_some_and(|(r, _)| r.tool != tool) {
            let why = format!(
                "the request state is of a call of another tool, not `{}`",
                super::fault::cut(tool)
            );
            return Err(Fault::Params(why));
        }
        let Some((mut round, _)) = open.remove(state) else {
            return Err(Fault::Internal("the round went away".into()));
        };
        drop(open);
        for (key, said) in answers.unwrap_or_default() {
            if let Some(q) = round.waiting.remove(&key) {
                q.answer(said);
            }
        }
        Ok(round)
    }

    /// Run `round` until its call ends or asks its client something.
    pub(super) async fn turn(self: &Arc<Self>, mut round: Round) -> Turn {
        if round.waiting.is_empty() {
            tokio::select! {
                biased;
                Some(q) = round.questions.recv() => round.ask(q),
                r = &mut round.done => {
                    let r = r.unwrap_or_else(|e| Err(Fault::Internal(format!("the call failed: {e}"))));
                    return Turn::Done(r);
                }
            }
        }
        while let Ok(q) = round.questions.try_recv() {
            round.ask(q);
        }
        self.park(round)
    }

    /// Keep `round` for its follow-up (until `answer_wait` has passed), and what the client
    /// is asked.
    fn park(self: &Arc<Self>, round: Round) -> Turn {
        let asks = round.waiting.iter().map(|(k, q)| (k.clone(), q.request()));
        let asked = InputRequiredResult::new(Some(asks.collect()), Some(round.state.clone()));
        let mut open = self.lock();
        let tenant = &round.tenant;
        if open.values().filter(|(r, _)| r.tenant == *tenant).count() >= self.per_tenant {
            let n = self.per_tenant;
            return Turn::Refused(Fault::Busy(format!("this tenant has {n} calls waiting for their client's answers ([serve.limits] asking_per_tenant); answer one or try again later")));
        }
        let park = self
            .parks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = round.state.clone();
        open.insert(state.clone(), (round, park));
        drop(open);
        let (rounds, wait) = (Arc::clone(self), self.wait);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let mut open = rounds.lock();
            if open.get(&state).is_some_and(|(_, p)| *p == park) {
                open.remove(&state);
            }
        });
        Turn::Ask(asked)
    }
}

impl Round {
    /// Ask the client `q` under a key of its own.
    fn ask(&mut self, q: Question) {
        self.keys += 1;
        self.waiting.insert(format!("ask-{}", self.keys), q);
    }
}
