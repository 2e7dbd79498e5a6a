//! A lane's permits in Redis: the lease a call holds (this process's permits first, then the
//! shared ones, with its backend read along when it can), its place in the lane's queue,
//! renewal while it is held, and giving back when it drops.

use super::*;

impl RedisLanes {
    /// The lease of `weight` permits of `lane`: this process's first, then the shared ones —
    /// with the call's backend read along when `along` asks for it and the lane has no rate
    /// (a wait for a token must not hold the read).
    pub(super) fn lease(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
        along: Option<crate::run::store::Claims>,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            let lease = self.mem.clone().acquire(lane, weight, order).await?;
            let Some(l) = self.lane(lane).filter(|l| l.limit > 0) else {
                return Ok(lease);
            };
            let read = along
                .filter(|_| l.rate.is_none())
                .and_then(|a| a.first().map(|(backend, _)| self.backend_key(backend)));
            let (key, limit, flow) = (l.key.clone(), l.limit(), self.flow.clone());
            let learner = l.learner.clone();
            let (permits, paused_ms, read) = self
                .take_key(
                    &key,
                    Live(limit, learner),
                    weight,
                    (&flow.0, flow.1),
                    read.as_deref(),
                )
                .await?;
            self.note_pause(lane, paused_ms);
            Ok(match read {
                Some(read) => {
                    // Given back with the lane in one script, or alone if the call lets go of
                    // it first (`Lease::give_back_backend`).
                    let read = Arc::new(std::sync::Mutex::new(Some(read)));
                    let mut permits = permits;
                    permits.along = Some(read.clone());
                    lease
                        .with_shared(Box::new(permits))
                        .with_backend(Box::new(ReadAlong(read)))
                }
                None => lease.with_shared(Box::new(permits)),
            })
        })
    }

    /// Take `weight` of the `limit` permits of the Redis lane `key` (a learned lane's limit
    /// as it stands at each try), queued as `flow` (an empty name: by arrival alone); with how
    /// long the lane is paused, in ms, and the read of the backend at `along` when it came
    /// with them.
    pub(super) async fn take_key(
        self: &Arc<Self>,
        key: &str,
        limit: Live,
        weight: u32,
        flow: (&str, u32),
        along: Option<&str>,
    ) -> Result<(Permits, i64, Option<Permits>), LaneError> {
        let id = self.bells.ticket();
        let members: Vec<String> = (0..weight).map(|i| format!("{id}#{i}")).collect();
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(10_000);
        let queue_ms = u64::try_from(QUEUE_LEASE.as_millis()).unwrap_or(2_000);
        let bell = self.bells.bell(&format!("{}{id}", freed(key)));
        // Until granted, the ticket leaves the queue if this wait is abandoned (giving back
        // what a release may have granted it meanwhile).
        let mut place = Place {
            store: self.clone(),
            key: key.to_string(),
            limit: limit.clone(),
            ticket: id.clone(),
            members: members.clone(),
            along: along.map(str::to_string),
            waiting: true,
        };
        let (paused_ms, handed, came) = loop {
            let mut inv = lane_keys(&self.acquire, key);
            inv.key(format!("{key}:seq"));
            if let Some(backend) = along {
                inv.key(backend);
            }
            inv.arg(limit.now()).arg(lease_ms).arg(&id).arg(queue_ms);
            inv.arg(flow.0).arg(flow.1);
            inv.arg(u32::from(along.is_some())).arg(BACKEND_SLOTS);
            for m in &members {
                inv.arg(m);
            }
            let mut conn = self.conn.clone();
            let answer = inv.invoke_async::<(i64, i64, i64)>(&mut conn).await;
            let (paused_ms, earlier, came) = answer
                .as_ref()
                .map_or((0, false, false), |(g, ms, b)| (*ms, *g == 2, *b == 1));
            if self.note_answer(&answer.map(|(granted, _, _)| granted))? {
                break (paused_ms, earlier, came);
            }
            // A message sent between the try and this wait is kept by the bell
            // (`notify_one`), so it is never missed; one that says the release granted this
            // ticket ends the wait with no script.
            let _ = tokio::time::timeout(FALLBACK, bell.notify.notified()).await;
            if let Some((ms, came)) = bell.granted() {
                break (ms, true, came);
            }
        };
        place.waiting = false;
        let read = along.filter(|_| came).map(|backend| {
            let members = vec![format!("{id}#0")];
            self.permits(backend, Live(BACKEND_SLOTS, None), members, handed)
        });
        Ok((self.permits(key, limit, members, handed), paused_ms, read))
    }

    /// `members` of lane `key` just granted, renewed while the call runs.
    pub(super) fn permits(
        self: &Arc<Self>,
        key: &str,
        limit: Live,
        members: Vec<String>,
        handed: bool,
    ) -> Permits {
        let lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(10_000);
        Permits {
            store: self.clone(),
            key: key.to_string(),
            limit,
            renewer: self.renew_while_held(key, &members, lease_ms, handed),
            members,
            along: None,
        }
    }

    /// Renew `members` while the call runs, every third of a lease — the first time within
    /// half a queue lease when a release granted them (until the ticket's queue lease only,
    /// which its last try had just pushed a queue lease ahead): a call shorter than that
    /// renews nothing.
    pub(super) fn renew_while_held(
        self: &Arc<Self>,
        key: &str,
        members: &[String],
        lease_ms: u64,
        handed: bool,
    ) -> tokio::task::JoinHandle<()> {
        let (me, key, members) = (self.clone(), key.to_string(), members.to_vec());
        tokio::spawn(async move {
            let mut first = handed;
            loop {
                let every = me.lease / 3;
                if std::mem::take(&mut first) {
                    tokio::time::sleep(every.min(QUEUE_LEASE / 2)).await;
                } else {
                    tokio::time::sleep(every).await;
                }
                let mut inv = me.renew.key(&key);
                inv.arg(lease_ms);
                for m in &members {
                    inv.arg(m);
                }
                let mut conn = me.conn.clone();
                let _ = inv.invoke_async::<i64>(&mut conn).await;
            }
        })
    }
}

/// The prefix of the channels on which lane `key`'s waiters hear that a permit was freed and
/// they are next (`PREFIX` + their ticket).
fn freed(key: &str) -> String {
    format!("{key}:freed:")
}

/// The keys every lane script starts with, in the order `scripts.rs` names them.
fn lane_keys<'a>(script: &'a Script, key: &str) -> redis::ScriptInvocation<'a> {
    let mut inv = script.key(key);
    for k in ["queue", "qlease", "want", "flows", "rate"] {
        inv.key(format!("{key}:{k}"));
    }
    inv.key(freed(key));
    inv
}

/// A waiter's ticket in a lane's queue: taken out (so the next waiter is the head) when the
/// wait is abandoned before the grant.
struct Place {
    store: Arc<RedisLanes>,
    key: String,
    limit: Live,
    ticket: String,
    members: Vec<String>,
    /// The backend whose read the ticket asked for along with the lane.
    along: Option<String>,
    waiting: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.store
            .bells
            .forget(&format!("{}{}", freed(&self.key), self.ticket));
        if !self.waiting {
            return;
        }
        let store = self.store.clone();
        let mut conn = store.conn.clone();
        let (key, ticket, members, limit) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.ticket),
            std::mem::take(&mut self.members),
            self.limit.now(),
        );
        let along = self.along.take();
        // If this never runs, the ticket (and anything granted to it) lapses after
        // `QUEUE_LEASE`.
        store.pending.clone().spawn(async move {
            let mut inv = lane_keys(&store.leave, &key);
            inv.arg(limit).arg(&ticket).arg(&members);
            let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
            if let Some(backend) = along {
                // A read a release granted along with the lane meanwhile.
                let mut inv = lane_keys(&store.release, &backend);
                inv.arg(BACKEND_SLOTS).arg(format!("{ticket}#0"));
                let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
            }
        });
    }
}

/// A lane's limit: a number, or — for a learned lane — the one in force when it is read. A
/// release hands permits on up to the limit in force then, not the one they were taken under
/// (after a cut, permits taken under the old limit would hand on up to it).
#[derive(Clone)]
pub(super) struct Live(pub u32, pub Option<Arc<crate::run::store::learn::Learner>>);

impl Live {
    fn now(&self) -> u32 {
        self.1.as_ref().map_or(self.0, |l| l.limit())
    }
}

/// Permits held in Redis for one lease.
pub(super) struct Permits {
    store: Arc<RedisLanes>,
    key: String,
    /// What a release hands on up to: the limit in force when it runs.
    limit: Live,
    members: Vec<String>,
    renewer: tokio::task::JoinHandle<()>,
    /// The backend read that came with these permits, while the call holds it.
    along: Option<Arc<std::sync::Mutex<Option<Permits>>>>,
}

/// A backend read taken with its lane ([`LaneStore::acquire_along`]): the lane's [`Permits`]
/// give it back with their own release, in one script; dropped first, it goes back alone.
struct ReadAlong(Arc<std::sync::Mutex<Option<Permits>>>);

impl Drop for ReadAlong {
    fn drop(&mut self) {
        drop(self.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.members.is_empty() {
            return; // given back with the lane it came with
        }
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        let members = std::mem::take(&mut self.members);
        let limit = self.limit.now();
        let read = self.along.take().and_then(|a| {
            let mut read = a.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            read.renewer.abort();
            Some((
                std::mem::take(&mut read.key),
                std::mem::take(&mut read.members),
                read.limit.now(),
            ))
        });
        // If this never runs, the lease lapses on its own.
        store.pending.clone().spawn(async move {
            let mut inv = match &read {
                Some((backend, read, backend_limit)) => {
                    let mut inv = lane_keys(&store.release_along, &key);
                    inv.key(backend).arg(limit).arg(backend_limit).arg(read);
                    inv
                }
                None => {
                    let mut inv = lane_keys(&store.release, &key);
                    inv.arg(limit);
                    inv
                }
            };
            inv.arg(&members);
            let mut conn = store.conn.clone();
            let _: Result<i64, _> = inv.invoke_async(&mut conn).await;
        });
    }
}
