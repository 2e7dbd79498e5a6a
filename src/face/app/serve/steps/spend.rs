//! What a session may spend (`[serve.session]`, `spend.rs`): the call's cost reserved before
//! it takes its place, given back if it never reached its tool.

use futures_util::future::BoxFuture;

use super::{Call, Done, Next, Step};
use crate::face::app::serve::answer::Outcome;

pub(in crate::face::app::serve) struct Spend;

impl Step for Spend {
    fn run<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done> {
        Box::pin(async move {
            let m = call.planned.manifest.clone();
            let tool = &m.tools[call.planned.tool];
            let (session, limits) = (call.session, &m.serve.session);
            let share = match Box::pin(session.spend.reserve(limits, &tool.name, tool.cost)).await {
                Ok(s) => s,
                Err(why) => {
                    let served = crate::manifest::export_name(&tool.name);
                    let g = call.gateway;
                    g.refused(session, &call.cx.caller, &served, &why.text());
                    return (Outcome::Refused(why), false);
                }
            };
            let (answer, reached) = next.run(call).await;
            if !reached {
                Box::pin(session.spend.give_back(share)).await;
            }
            (answer, reached)
        })
    }
}
