//! The read cache at pre-dispatch: a call to a `cache = "…"` tool looks its key up before it
//! is dispatched. A hit is its result (no lanes, no invocation, no budget); a miss makes it the
//! key's leader (its job stores what it gets); a lookup that must wait — an identical call
//! in flight, a store across the network — goes on in its own task, and the call continues
//! from here when the answer comes back.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::state::Coordinator;
use super::Ready;
use crate::duration::millis;
use crate::events::{CallResult, ErrorKind, Status};
use crate::run::cache::{self, Lookup};
use crate::run::call::{base_result, never_dispatched};

/// A lookup that had to wait, answered.
pub(super) struct CacheAnswer {
    pos: usize,
    lookup: Lookup,
    started: Instant,
}

impl Coordinator {
    /// For a call to a cached tool: `Some(Cached)` on a hit, `Some(Waiting)` while the lookup
    /// waits (the caller keeps the call's resolved arguments in `cache_args`), `None` to go on
    /// (it leads its key, or nothing is cached).
    pub(super) fn consult_cache(
        &mut self,
        p: usize,
        t: usize,
        args: &Map<String, Value>,
    ) -> Option<Ready> {
        let cache = self.cache.as_ref().filter(|c| c.lookups())?;
        let tool = &self.manifest.tools[t];
        tool.cache?;
        let backends = self
            .marked
            .get(t)
            .cloned()
            .flatten()
            .unwrap_or_else(|| Arc::from([]));
        let caller = self.run.relay.as_ref().and_then(|r| r.behalf.as_deref());
        let owner =
            crate::tools::mcp::owner(&self.manifest, tool, &self.plan.settings.tenant, caller)?;
        let key = cache::key(
            &owner,
            &self.plan.calls[p].tool_name,
            &tool.kind.target(),
            args,
        );
        let started = Instant::now();
        let mut lookup = cache.lookup_on(key, tool.timeout, backends);
        // Memory and file stores answer at once: no task, no round trip.
        if let Poll::Ready(found) = lookup
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            return self.looked_up(p, found, started);
        }
        let tx = self.cache_tx.clone()?;
        tokio::spawn(async move {
            let lookup = lookup.await;
            let _ = tx.send(CacheAnswer {
                pos: p,
                lookup,
                started,
            });
        });
        self.cache_waiting += 1;
        Some(Ready::Waiting)
    }

    /// What a lookup found: a hit is the call's result; a lead goes with the call.
    fn looked_up(&mut self, p: usize, found: Lookup, started: Instant) -> Option<Ready> {
        match found {
            Lookup::Hit(output) => Some(Ready::Cached(Box::new(self.hit(p, output, started)))),
            Lookup::Lead(lead) => {
                self.leads.insert(p, lead);
                None
            }
            // The store failed: the call goes ahead uncached.
            Lookup::Bypass(_) => None,
        }
    }

    /// A waiting lookup was answered: the call is finished, or goes on to its budget and
    /// dispatch.
    pub(super) fn cache_answered(&mut self, a: CacheAnswer) {
        self.cache_waiting -= 1;
        let resolved = self.cache_args.remove(&a.pos).flatten();
        let p = a.pos;
        if self.ending.is_some() {
            let why = "the run ended while its cache lookup waited";
            let r = never_dispatched(&self.plan, p, ErrorKind::RunEnded, why);
            return self.finish(p, r);
        }
        match self.looked_up(p, a.lookup, a.started) {
            Some(Ready::Cached(r)) => self.finish(p, *r),
            _ => self.reserve_then_go(p, resolved),
        }
    }

    /// A call answered from the cache: `ok`, nothing invoked, timed by its lookup.
    fn hit(&self, p: usize, output: Value, started: Instant) -> CallResult {
        let mut r = base_result(&self.plan, p);
        r.status = Status::Ok;
        r.event = Status::Ok.event();
        r.output = output;
        r.cached = true;
        let ready = self.ready_at[p].unwrap_or(started);
        r.queued_ms = Some(millis(started.saturating_duration_since(ready)));
        r.started_ms = Some(millis(started.saturating_duration_since(self.start)));
        r.duration_ms = Some(millis(started.elapsed()));
        r
    }
}
