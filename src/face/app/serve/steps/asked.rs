//! A 2026-07-28 client that approves in its follow-up request (`approve::Mrtr`): a call that
//! needs its approval is answered with the question at once (nothing waits meanwhile), and the
//! follow-up's answer — bound to the arguments' hash — is the call's approval.

use futures_util::future::BoxFuture;

use super::{Call, Done, Next, Step};
use crate::face::app::serve::answer::Outcome;

pub(in crate::face::app::serve) struct Asked;

impl Step for Asked {
    fn run<'a>(&'a self, mut call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done> {
        Box::pin(async move {
            let in_band = call.gateway.in_band(&call.planned);
            if let (Some(m), true) = (&call.cx.mrtr, in_band) {
                let c = &call.planned.plan.calls[0];
                match m.answer_for(&c.tool_name, &c.args.value) {
                    Ok(answered) => call.cx.elicit = Some(answered),
                    Err((question, state)) => return (Outcome::Ask(question, state), false),
                }
            }
            next.run(call).await
        })
    }
}
