//! A client's `_meta.idempotencyKey` (`keys.rs`): a tool call made once for it — an answer
//! recorded for the key is given again, a retry while the first attempt runs waits for it,
//! and a non-idempotent write whose first attempt died in flight is settled by its probe
//! (`verify`: applied, or sent again once) or, without one, answered indeterminate.
//! A resource read is a read: nothing to make once.

use futures_util::future::BoxFuture;

use super::{Call, Done, Next, Step};
use crate::face::app::serve::answer::Outcome;
use crate::face::app::serve::keys::{self, Claimed, ClientKey};

pub(in crate::face::app::serve) struct Key;

impl Step for Key {
    fn run<'a>(&'a self, mut call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done> {
        Box::pin(async move {
            call.planned.plan.cut_off_before |= call.cx.cut_off_before;
            let key = call.cx.key.clone().filter(|_| call.tool_call);
            let Some(key) = key else {
                // A task's call goes upstream with a key of its task's, the same from the
                // replica that takes it over: its probe looks for what the first attempt did.
                if let Some(task) = call.cx.task.clone() {
                    call.planned.plan.given_key = Some(keys::upstream(&call.cx.caller, task));
                }
                return next.run(call).await;
            };
            let c = &call.planned.plan.calls[0];
            let tenant = call.cx.caller.tenant.as_str();
            // A server that answers each caller as itself: the key is the caller's own.
            let (m, tool) = (&call.planned.manifest, call.planned.tool);
            let behalf = call.cx.caller.behalf.as_deref();
            let owner = crate::tools::mcp::owner(m, &m.tools[tool], tenant, behalf);
            let owner = owner.unwrap_or(tenant.into());
            let claimed = Box::pin(call.gateway.keys.claim(
                ClientKey {
                    tenant: &owner,
                    key: &key,
                },
                (&c.tool_name, &c.args.value),
                &call.cx.cancel,
            ))
            .await;
            let tool = &call.planned.manifest.tools[call.planned.tool];
            let rerun = !c.write || tool.idempotent;
            let probed = tool.verify.is_some();
            let held = match claimed {
                Claimed::Answered(v) => return (Outcome::Recorded(v), false),
                Claimed::Refused(why) => return (Outcome::Refused(why), false),
                // Cut off in flight, unless it was parked for approval by a gateway that died:
                // then it never reached its tool, and its retry takes it over.
                Claimed::Run(held, true)
                    if !rerun && !call.gateway.left_parked(&call.cx.caller, &key).await =>
                {
                    if !probed {
                        let answer = keys::indeterminate(&key);
                        held.answer(&answer).await;
                        return (Outcome::Recorded(answer), false);
                    }
                    // Its probe (`verify`) settles it before anything is sent again.
                    call.planned.plan.cut_off_before = true;
                    held
                }
                Claimed::Run(held, _) => held,
            };
            // The client's key goes upstream, the same from every replica and every retry.
            call.planned.plan.given_key = Some(keys::upstream(&call.cx.caller, key));
            let (answer, reached) = next.run(call).await;
            if !reached {
                held.forget().await;
                return (answer, false);
            }
            let answer = answer.answer();
            held.answer(&answer).await;
            (Outcome::Recorded(answer), true)
        })
    }
}
