//! The call's place (`order.rs`, `approve.rs`): its approver when it needs approval, its
//! place in the order of its backends across sessions — a call that waits for approval holds
//! only its own session's order, and takes its place across sessions once approved (nobody
//! waits on another's approval) — and its place among its lanes' users. A call cancelled
//! while it waits never runs.

use futures_util::future::BoxFuture;

use super::{Call, Done, Next, Step};
use crate::face::app::serve::answer::{Outcome, Refusal};
use crate::face::app::serve::order::{behind_text, Users};

pub(in crate::face::app::serve) struct Place;

impl Step for Place {
    fn run<'a>(&'a self, mut call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done> {
        Box::pin(async move {
            let g = call.gateway;
            let reporter = call.reporter.clone();
            let approver =
                g.approver_for((&call.planned, call.session), &call.cx, reporter.clone());
            call.planned.approver = approver;
            let p = &call.planned;
            let (claims, parked) = (p.claims.clone(), p.approver.is_some());
            let ticket = match parked {
                true => g.order.park(p.seq, claims, call.session.id),
                false => g.order.enter(p.seq, claims, call.session.id),
            };
            // In its place: the next request on its wire may go on.
            drop(std::mem::replace(
                &mut call.turn,
                crate::face::app::serve::order::Through(None),
            ));
            let _users = Users::enter(&g.users, p.seq, p.lane_names.clone());
            let tell = |b: &_| {
                if let Some(r) = &reporter {
                    r.waiting(behind_text(b));
                }
            };
            let mut waited = ticket.wait_unless(&call.cx.cancel, tell).await;
            let mut place = None;
            if let (true, Some(approver)) = (waited, call.planned.approver.take()) {
                let asked =
                    crate::face::app::serve::approve::ask_first(&call.planned.plan, approver);
                let (answered, yes) = asked.await;
                if !yes && g.is_closing() {
                    let why = "the gateway is shutting down: the call waited for approval and was not made (retry it)";
                    let ended = Refusal::new(crate::events::ErrorKind::RunEnded, why);
                    return (Outcome::Refused(ended), false);
                }
                call.planned.approver = Some(answered);
                if yes {
                    let seq = g.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let approved = place.insert(g.order.approved(seq, &ticket));
                    waited = approved.wait_unless(&call.cx.cancel, tell).await;
                }
            }
            let done = if waited {
                next.run(call).await
            } else {
                (Outcome::Refused(Refusal::Cancelled), false)
            };
            drop((place, ticket));
            done
        })
    }
}
