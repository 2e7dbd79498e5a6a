//! A call's policy steps, as an ordered list ([`STEPS`]): each step is a file here, and
//! adding a policy is a file and a line. Every call and resource read that reaches an
//! upstream through [`Gateway::call`] — whichever door it came by — goes through every step,
//! in this order, once it is planned (its wire order kept and its roles judged): a step may
//! answer the call itself (a refusal, a recorded answer, a question), or hand it on with
//! [`Next::run`] and see how it ended (its answer, and whether it reached its tool). The last
//! step's next runs the call (`Gateway::run`).
//!
//! 1. `asked` — a 2026-07-28 client approves in its follow-up request (`input_required`).
//! 2. `key` — a client's idempotency key: its call made once.
//! 3. `spend` — what the session may spend (`[serve.session]`), given back if not spent.
//! 4. `audit` — the call allowed, in the trail.
//! 5. `place` — its approver, its place in the backends' order (a call waiting for approval
//!    holds only its own session's), and its approval.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::answer::Outcome;
use super::gateway::{CallCx, Gateway, Planned, Session};
use super::order::Through;
use super::progress::Reporter;

mod asked;
mod audit;
mod key;
mod place;
mod spend;

/// The policy steps, in the order every call goes through them.
pub(super) const STEPS: &[&dyn Step] = &[
    &asked::Asked,
    &key::Key,
    &spend::Spend,
    &audit::Audited,
    &place::Place,
];

/// A call on its way through the steps.
pub(super) struct Call<'a> {
    pub gateway: &'a Arc<Gateway>,
    pub session: &'a Session,
    pub planned: Planned,
    pub cx: CallCx,
    /// Its place on its session's wire, let go once it has its place in the order.
    pub turn: Through,
    /// A tool call (not a resource read).
    pub tool_call: bool,
    /// Where its progress goes (when its client asked for progress).
    pub reporter: Option<Arc<Reporter>>,
}

/// How a call ended: its answer, and whether it reached its tool.
pub(super) type Done = (Outcome, bool);

/// One policy step.
pub(super) trait Step: Send + Sync {
    /// Take `call`: answer it, or hand it on to `next` (and see how it ended).
    fn run<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done>;
}

/// The steps after this one, then the call itself.
pub(super) struct Next<'a> {
    rest: &'a [&'static dyn Step],
}

impl<'a> Next<'a> {
    /// Every step, from the first.
    pub(super) fn all() -> Next<'static> {
        Next { rest: STEPS }
    }

    /// Hand `call` on.
    pub(super) fn run(self, call: Call<'a>) -> BoxFuture<'a, Done> {
        match self.rest.split_first() {
            Some((step, rest)) => step.run(call, Next { rest }),
            None => Box::pin(call.gateway.run_call(call)),
        }
    }
}
