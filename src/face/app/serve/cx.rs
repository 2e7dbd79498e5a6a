//! What a call brings besides its tool and arguments, from whichever door it came by: one
//! constructor ([`CallCx::new`]: who makes it and how it is cancelled), and each door adds
//! what it has (a progress sink, its place on the wire, a client that can be asked, a key).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::caller::Caller;
use super::order;
use super::progress::ProgressSink;

/// What a call brings besides its tool and arguments.
pub(in crate::face::app::serve) struct CallCx {
    /// Who makes it (its tenant spends; its roles decide what it sees).
    pub caller: Caller,
    /// The client's `_meta.traceparent`: the call's span is its child (boxed: a call's
    /// future holds this, and every byte of it is copied per call).
    pub traceparent: Option<Box<str>>,
    pub cancel: CancellationToken,
    pub progress: Option<ProgressSink>,
    /// The client, when it can be asked to approve a call (MCP elicitation).
    pub elicit: Option<super::approve::Elicit>,
    /// Its place on its session's wire: it takes its place in the order after the requests
    /// read before it.
    pub arrival: Option<Arc<order::Pass>>,
    /// The client, when it can answer an upstream's questions (it declared elicitation).
    pub asks: Option<crate::tools::mcp::Asker>,
    /// The client's `_meta.idempotencyKey`: the call is made once for it (see `keys`).
    pub key: Option<String>,
    /// The task the call is made for (`task:ID`): with the client's key, what names its
    /// intent, so a call parked by a gateway that died is taken over by that intent only.
    pub task: Option<String>,
    /// A 2026-07-28 client that answers in its follow-up request (`input_required`).
    pub mrtr: Option<super::approve::Mrtr>,
    /// Set when the call reaches its tool (a task's replica records it).
    pub started: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The call was made before and cut off in flight (a task taken over after its call
    /// reached its tool): a write with a probe is settled by it first (`verify`).
    pub cut_off_before: bool,
}

impl CallCx {
    /// The context of a call by `caller`, cancelled by `cancel`; nothing else known yet.
    pub(super) fn new(caller: Caller, cancel: CancellationToken) -> CallCx {
        CallCx {
            caller,
            traceparent: None,
            cancel,
            progress: None,
            elicit: None,
            arrival: None,
            asks: None,
            key: None,
            task: None,
            mrtr: None,
            started: None,
            cut_off_before: false,
        }
    }
}
