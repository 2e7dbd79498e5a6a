//! The short way for a `tools/call`. Over HTTP: a call of a known session (its `_meta` at
//! most a progress token and a `traceparent`) is answered here straight from the gateway — as `application/json`
//! when nothing is said before the answer, else as an event stream of its progress and then
//! the answer — not through rmcp's session worker and an SSE stream, which cost a call more
//! than the engine does. Anything else (initialize, lists, notifications but a cancel of our
//! own, other `_meta`, `2026-07-28` requests, a `Host` or `Origin` rmcp must judge) goes on
//! to rmcp untouched, so this path is never more permissive than rmcp's: the sessions it
//! knows are the ones rmcp's handlers registered, and a request it is unsure of is rmcp's.
//!
//! A call whose client goes away is cancelled and still driven to its end (its upstream is
//! told), like one of rmcp's.
//!
//! (On the stdio wire the wire itself answers a plain call: `stdio.rs`.)

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::answer::{self, Outcome};
use super::entry::Short;
use super::gateway::{CallCx, Gateway, Session};
use super::progress::ProgressSink;
use super::sessions::{Live, Sessions};
use crate::tools::Progress;

/// A stream of server-sent events, each a whole `data:` event.
pub(super) type Events = Pin<Box<dyn futures_util::Stream<Item = Bytes> + Send>>;

/// What this path answers: a JSON body (200), an event stream (200) or an accepted
/// notification (202).
pub(super) enum Answer {
    Json(Vec<u8>),
    Events(Events),
    Accepted,
}

/// Answer `body` here if it is a plain `tools/call` or a cancel of one of ours; `None`: rmcp's.
pub(super) async fn answer(
    gateway: &Arc<Gateway>,
    sessions: &Sessions,
    (session_id, caller): (&str, &super::caller::Caller),
    message: Short,
    arrival: Option<Arc<super::order::Pass>>,
) -> Option<Answer> {
    let (live, session) = sessions.get(session_id)?;
    let (id, name, args, token, traceparent) = match message {
        Short::Cancel { key } => {
            let token = live.inflight.lock().ok()?.get(&key)?.clone();
            token.cancel();
            return Some(Answer::Accepted);
        }
        Short::Call(c) => {
            let c = *c;
            (c.id, c.name, c.args, c.progress, c.traceparent)
        }
    };
    if gateway.may_ask_client(&session, &name) {
        // Its client may be asked something: rmcp's, which can ask it.
        return None;
    }
    let (tx, mut said) = mpsc::unbounded_channel::<Progress>();
    let progress: Option<ProgressSink> = token.as_ref().map(|_| {
        Arc::new(move |p| {
            let _ = tx.send(p);
        }) as ProgressSink
    });
    let cx = CallCx {
        traceparent: traceparent.map(Box::from),
        progress,
        arrival,
        // Ended with its session (a DELETE), as rmcp's calls are.
        ..CallCx::new(caller.clone(), session.gone.child_token())
    };
    let key = id.to_string();
    // Cancelled by the client (`notifications/cancelled`): no response, as the specification
    // says — the request's stream ends empty.
    let cancelled = cx.cancel.clone();
    let mut run = Box::pin(call(
        gateway.clone(),
        (live, session),
        key,
        (name, args),
        cx,
    ));
    let first = tokio::select! {
        biased;
        r = &mut run => {
            if cancelled.is_cancelled() {
                return Some(Answer::Events(Box::pin(futures_util::stream::empty())));
            }
            return Some(Answer::Json(answer::reply(&id, r)));
        }
        Some(p) = said.recv() => p,
    };
    // Something is said before the answer: the answer comes as an event stream.
    let token = token.unwrap_or_default();
    let head = futures_util::stream::iter(notice(&token, first));
    let rest = futures_util::stream::unfold(Some((run, said)), move |state| {
        let token = token.clone();
        let id = id.clone();
        let cancelled = cancelled.clone();
        async move {
            let (mut run, mut said) = state?;
            tokio::select! {
                biased;
                r = &mut run => {
                    if cancelled.is_cancelled() {
                        return None;
                    }
                    Some((event(&answer::reply(&id, r)), None))
                }
                Some(p) = said.recv() => {
                    let said_now = notice(&token, p).unwrap_or_default();
                    Some((said_now, Some((run, said))))
                }
            }
        }
    });
    use futures_util::StreamExt;
    Some(Answer::Events(Box::pin(head.chain(rest))))
}

/// A progress notification on the client's token, as one event.
fn notice(token: &Value, p: Progress) -> Option<Bytes> {
    answer::progress_message(token, p).map(|json| event(&json))
}

/// One server-sent event carrying `json`.
fn event(json: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(json.len() + 8);
    b.extend_from_slice(b"data: ");
    b.extend_from_slice(json);
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

/// Run the call, cancellable by its id (`key`) while it lasts and finished even if nobody
/// waits.
fn call(
    gateway: Arc<Gateway>,
    (live, session): (Arc<Live>, Arc<Session>),
    key: String,
    (name, args): (String, Map<String, Value>),
    cx: CallCx,
) -> Finish<impl Future<Output = Result<Outcome, super::fault::Fault>> + Send + 'static> {
    let cancel = cx.cancel.clone();
    if let Ok(mut m) = live.inflight.lock() {
        m.insert(key.clone(), cancel.clone());
    }
    let run = async move {
        let r = gateway
            .call(&session, super::gateway::Target::Tool(&name), args, cx)
            .await;
        if let Ok(mut m) = live.inflight.lock() {
            m.remove(&key);
        }
        r
    };
    Finish {
        fut: Some(Box::pin(run)),
        cancel,
    }
}

/// A future that, dropped before it is done, cancels its call and drives it to its end on a
/// task of its own (so an upstream is told and nothing is left half-done).
struct Finish<F: Future<Output: Send> + Send + 'static> {
    fut: Option<Pin<Box<F>>>,
    cancel: CancellationToken,
}

impl<F: Future<Output: Send> + Send + 'static> Future for Finish<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<F: Future<Output: Send> + Send + 'static> Drop for Finish<F> {
    fn drop(&mut self) {
        if let Some(fut) = self.fut.take() {
            self.cancel.cancel();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(fut);
            }
        }
    }
}
