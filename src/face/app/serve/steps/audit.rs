//! The audit trail (`audit.rs`): a call allowed, named as its client named it — a tool as
//! served, a resource read by its served URI. (A refusal is said by the step that refuses.)

use futures_util::future::BoxFuture;

use super::{Call, Done, Next, Step};
use crate::face::app::serve::audit::Event;
use crate::tools::mcp::{McpSpec, Op};

pub(in crate::face::app::serve) struct Audited;

impl Step for Audited {
    fn run<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Done> {
        Box::pin(async move {
            let audit = &call.gateway.audit;
            if audit.on() {
                let p = &call.planned;
                let tool = &p.manifest.tools[p.tool];
                let session = call.session.id;
                let fields = match tool.settings_of::<McpSpec>() {
                    Some(s) if s.op == Op::ReadResource => {
                        let own = p.plan.calls[0].args.value.get("uri");
                        let own = own.and_then(|u| u.as_str());
                        let whole = crate::face::app::serve::catalog::whole_of(&p.manifest, p.tool);
                        let uri = own.map(|u| whole.map_or_else(|| u.to_string(), |w| w.uri_of(u)));
                        serde_json::json!({"resource": uri, "session": session})
                    }
                    _ => {
                        let served = crate::manifest::export_name(&tool.name);
                        serde_json::json!({"tool": served, "session": session})
                    }
                };
                audit.record(Event::CallAllowed, Some(&call.cx.caller), fields);
            }
            next.run(call).await
        })
    }
}
