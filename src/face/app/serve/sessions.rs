//! The HTTP face's sessions by `Mcp-Session-Id`: each bound to the caller who opened it — its
//! tenant, and its subject when a JWT named one (another tenant's token, or another person's,
//! finds no such session) — bounded in number (`[serve.limits] sessions`,
//! `sessions_per_tenant`, and a role's `sessions` per caller), and let go after `session_idle` without a request —
//! but remembered: a client that comes back with the id later gets its session opened again
//! under the same id (rmcp replays its `initialize` from what this table kept, as its
//! session store), so an SDK that never re-initializes carries on. What is remembered of a
//! session that is gone is its owner and its `initialize` parameters, for at most
//! [`REMEMBERED`] sessions a live one may have, the least recently used forgotten first.
//!
//! With a shared lane store (Redis) a session is also kept there — its owner and its
//! `initialize` — for `[serve.limits] session_kept` after its last request, and every request
//! of a session asks the store first: any replica serves any request of it (it opens the
//! session from the store as it would a remembered one), and a session ended (DELETE) on one
//! replica is ended on all. So are the resources it subscribed to (through whole servers): a
//! replica that opens the session from the store subscribes to them again, for its client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use tokio_util::sync::CancellationToken;

use super::caller::Caller;
use super::session::Session;
use crate::store::records::{Add, Records, Typed};

/// The session id header of Streamable HTTP.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// How many sessions that are gone are remembered for each live one the limit allows.
pub(super) const REMEMBERED: usize = 8;

/// A session rmcp serves, as the short way knows it.
pub(super) struct Live {
    pub session: Weak<Session>,
    /// Calls in flight on the short way, by JSON-RPC id, to cancel on `notifications/cancelled`.
    pub inflight: Mutex<HashMap<String, CancellationToken>>,
}

/// One session id's entry: live, or remembered.
struct Entry {
    live: Option<Arc<Live>>,
    /// Whose it is: its owner (tenant, and subject) and tenant (set when it is registered;
    /// kept after it is gone).
    owner: Option<(String, String)>,
    /// What rmcp stored at its `initialize`, to open it again.
    state: Option<SessionState>,
    /// When it was last used (a tick of [`Sessions::clock`]).
    used: u64,
    /// It is in the shared store (so its absence there means it ended elsewhere).
    shared: bool,
    /// What it has spent (with a store that does not share sessions): kept for its opening
    /// again.
    spent: Option<super::spend::Spent>,
}

/// What the shared store keeps of a session.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    owner: String,
    tenant: String,
    state: Option<SessionState>,
}

/// What the shared store says of a session a request names.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// It is (or may be) served here: known, unknown to all (rmcp answers), or the store is
    /// away and this process answers from what it knows.
    Here,
    /// It was shared and is no more: ended (DELETE) on some replica, or kept no longer.
    Ended,
}

/// Where the shared store keeps the resources session `id` is subscribed to.
fn subscribed_of(id: &str) -> String {
    format!("{id}\u{0}subscribed")
}

/// Session `id`'s entry in `map`, made (last used `used`) when it has none.
fn entry<'m>(map: &'m mut HashMap<String, Entry>, id: &str, used: u64) -> &'m mut Entry {
    map.entry(id.to_string())
        .or_insert_with(|| Entry::new(used))
}

impl Entry {
    fn new(used: u64) -> Entry {
        Entry {
            live: None,
            owner: None,
            state: None,
            used,
            shared: false,
            spent: None,
        }
    }

    fn alive(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.session.strong_count() > 0)
    }
}

/// Why a session cannot be opened now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Full {
    /// The gateway's limit (`sessions`).
    All(u32),
    /// The tenant's (`sessions_per_tenant`).
    Tenant(u32),
    /// The caller's, by its roles (`[roles.NAME] sessions`).
    Caller(u32),
}

/// The session table.
pub(super) struct Sessions {
    map: RwLock<HashMap<String, Entry>>,
    clock: AtomicU64,
    /// Sessions opened again after they were let go.
    reopened: AtomicU64,
    limit: u32,
    per_tenant: u32,
    /// The shared store's sessions, and how long it keeps one after its last request.
    shared: Option<Typed<Kept>>,
    kept: Duration,
}

impl Sessions {
    pub(super) fn new(
        limits: &crate::manifest::ServeLimits,
        shared: Option<Arc<dyn Records>>,
    ) -> Sessions {
        let shared = shared.map(Typed::new);
        Sessions {
            map: RwLock::default(),
            clock: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
            limit: limits.sessions,
            per_tenant: limits.sessions_per_tenant,
            shared,
            kept: limits.session_kept,
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Entry>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Entry>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Register a session rmcp opened (or opened again) under `id`, as `caller`'s.
    pub(super) fn register(&self, id: &str, session: &Arc<Session>, caller: &Caller) {
        let used = self.now();
        let mut map = self.write();
        let e = entry(&mut map, id, used);
        e.used = used;
        if e.live.is_some() && !e.alive() {
            self.reopened.fetch_add(1, Ordering::Relaxed);
            if let Some(spent) = &e.spent {
                session.spend.go_on_from(spent);
            }
        }
        e.spent = Some(session.spend.spent());
        e.owner = Some((caller.owner(), caller.tenant.clone()));
        if let Some(records) = &self.shared {
            session.spend.share(records.raw().clone(), id, self.kept);
        }
        e.live = Some(Arc::new(Live {
            session: Arc::downgrade(session),
            inflight: Mutex::default(),
        }));
        self.forget_oldest(&mut map);
    }

    /// Keep session `id` (registered) in the shared store, for any replica to serve it. A
    /// store that is away leaves it this process's alone (said on stderr).
    pub(super) async fn share(&self, id: &str) {
        let Some(records) = self.shared.clone() else {
            return;
        };
        let text = {
            let map = self.read();
            let Some(Entry {
                owner: Some((owner, tenant)),
                state,
                ..
            }) = map.get(id)
            else {
                return;
            };
            Kept {
                owner: owner.clone(),
                tenant: tenant.clone(),
                state: state.clone(),
            }
        };
        match records.put(id.to_string(), &text, self.kept).await {
            Ok(()) => {
                if let Some(e) = self.write().get_mut(id) {
                    e.shared = true;
                    // One flow in the shared lanes, whichever replica serves it.
                    let live = e.live.as_ref().and_then(|l| l.session.upgrade());
                    if let Some(session) = live {
                        session.share_as(id);
                    }
                }
            }
            Err(e) => eprintln!("flux-tools: session kept on this replica only: {e}"),
        }
    }

    /// Ask the shared store for session `id` as its request comes (keeping it longer): one
    /// this process does not know is taken in as remembered, to be opened here.
    pub(super) async fn fetch(&self, id: &str) -> Found {
        let Some(records) = self.shared.clone() else {
            return Found::Here;
        };
        let kept = match records.get(id.to_string(), self.kept).await {
            Err(_) => return Found::Here,
            Ok(None) => {
                let shared = self.read().get(id).is_some_and(|e| e.shared);
                return if shared { Found::Ended } else { Found::Here };
            }
            Ok(Some(kept)) => kept,
        };
        let used = self.now();
        let mut map = self.write();
        let e = entry(&mut map, id, used);
        e.shared = true;
        if e.owner.is_none() {
            e.owner = Some((kept.owner, kept.tenant));
        }
        if e.state.is_none() {
            e.state = kept.state;
        }
        self.forget_oldest(&mut map);
        Found::Here
    }

    /// The served URIs session `id` is subscribed to, as the shared store keeps them (none
    /// without one).
    pub(super) async fn subscriptions(&self, id: &str) -> Vec<String> {
        let Some(records) = self.shared.clone() else {
            return Vec::new();
        };
        let all = (records.raw().clone())
            .counters(subscribed_of(id))
            .await
            .unwrap_or_default();
        all.into_iter()
            .filter(|(_, n)| *n > 0.0)
            .map(|(uri, _)| uri)
            .collect()
    }

    /// Keep session `id`'s subscription to `uri` (`on`), or its end, in the shared store.
    pub(super) async fn note_subscription(&self, id: &str, uri: &str, on: bool) {
        let Some(records) = self.shared.clone() else {
            return;
        };
        let key = subscribed_of(id);
        let done = if on {
            let add = Add {
                counter: uri.to_string(),
                by: 1.0,
                most: Some(1.0),
            };
            let raw = records.raw().clone();
            raw.tally(key, vec![add], self.kept).await.map(|_| ())
        } else {
            records
                .raw()
                .clone()
                .forget(key, vec![uri.to_string()])
                .await
        };
        if let Err(e) = done {
            eprintln!("flux-tools: a subscription kept on this replica only: {e}");
        }
    }

    /// Beyond what is remembered, the least recently used sessions that are gone.
    fn forget_oldest(&self, map: &mut HashMap<String, Entry>) {
        let keep = (self.limit as usize).saturating_mul(REMEMBERED);
        if map.len() <= keep + self.limit as usize {
            return;
        }
        let mut gone: Vec<(u64, String)> = map
            .iter()
            .filter(|(_, e)| !e.alive())
            .map(|(id, e)| (e.used, id.clone()))
            .collect();
        gone.sort_unstable();
        let excess = map.len().saturating_sub(keep + self.limit as usize);
        for (_, id) in gone.into_iter().take(excess) {
            map.remove(&id);
        }
    }

    /// The live session `id`, as the short way serves it.
    pub(super) fn get(&self, id: &str) -> Option<(Arc<Live>, Arc<Session>)> {
        let live = self.read().get(id)?.live.clone()?;
        let session = live.session.upgrade()?;
        Some((live, session))
    }

    /// Whether session `id` may be used by `owner` (a [`Caller::owner`]): it is (or was)
    /// theirs, or it is unknown here (rmcp then answers for it).
    pub(super) fn owned_by(&self, id: &str, owner: &str) -> bool {
        self.read()
            .get(id)
            .is_none_or(|e| e.owner.as_ref().is_none_or(|(o, _)| o == owner))
    }

    /// Whether `id` names a session that is gone but remembered (its next request opens it
    /// again).
    pub(super) fn remembered(&self, id: &str) -> bool {
        self.read()
            .get(id)
            .is_some_and(|e| !e.alive() && e.state.is_some())
    }

    /// Whether one more session of `caller` may be opened (`own`: the most its roles let
    /// it keep).
    pub(super) fn admit(&self, caller: &Caller, own: Option<u32>) -> Result<(), Full> {
        let map = self.read();
        let live = map.values().filter(|e| e.alive());
        let (mut all, mut tenants, mut owners) = (0u32, 0u32, 0u32);
        let owner = caller.owner();
        for e in live {
            all += 1;
            if let Some((o, t)) = &e.owner {
                tenants += u32::from(*t == caller.tenant);
                owners += u32::from(*o == owner);
            }
        }
        if all >= self.limit {
            return Err(Full::All(self.limit));
        }
        if tenants >= self.per_tenant {
            return Err(Full::Tenant(self.per_tenant));
        }
        match own {
            Some(n) if owners >= n => Err(Full::Caller(n)),
            _ => Ok(()),
        }
    }

    /// How many sessions live, and how many were opened again after they were let go.
    pub(super) fn counts(&self) -> (usize, u64) {
        let live = self.read().values().filter(|e| e.alive()).count();
        (live, self.reopened.load(Ordering::Relaxed))
    }

    /// The next pass of session `id`'s wire (taken as its request comes).
    pub(super) fn pass(&self, id: &str) -> Option<Arc<super::order::Pass>> {
        let (_, session) = self.get(id)?;
        Some(Arc::new(session.turnstile.pass()))
    }
}

/// rmcp keeps each session's `initialize` here, and asks for it to open a session again.
pub(super) struct Store(pub Arc<Sessions>);

#[async_trait::async_trait]
impl SessionStore for Store {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let used = self.0.now();
        let mut map = self.0.write();
        Ok(map.get_mut(session_id).and_then(|e| {
            e.used = used;
            e.state.clone()
        }))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let used = self.0.now();
        let mut map = self.0.write();
        let e = entry(&mut map, session_id, used);
        e.state = Some(state.clone());
        e.used = used;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        // Ended by its client: its calls end with it now, parked ones too (rmcp would wait
        // seconds for their answers first).
        if let Some((_, session)) = self.0.get(session_id) {
            session.gone.cancel();
        }
        self.0.write().remove(session_id);
        if let Some(records) = self.0.shared.clone() {
            records.raw().clone().remove(session_id.to_string()).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(sessions: u32, per_tenant: u32) -> crate::manifest::ServeLimits {
        crate::manifest::ServeLimits {
            sessions,
            sessions_per_tenant: per_tenant,
            ..Default::default()
        }
    }

    fn token(tenant: &str) -> Caller {
        Caller {
            via: super::super::caller::Via::Token,
            behalf: None,
            ..Caller::local(tenant.into())
        }
    }

    fn person(tenant: &str, sub: &str) -> Caller {
        Caller {
            subject: Some(sub.into()),
            roles: Some(Vec::new().into()),
            via: super::super::caller::Via::Jwt,
            behalf: None,
            ..Caller::local(tenant.into())
        }
    }

    #[test]
    fn a_tenants_session_is_its_own_and_past_the_limits_none_is_admitted() {
        let s = Sessions::new(&limits(3, 2), None);
        let one = Arc::new(Session::for_tests());
        let two = Arc::new(Session::for_tests());
        s.register("a1", &one, &token("acme"));
        s.register("a2", &two, &token("acme"));
        assert!(s.owned_by("a1", "acme") && !s.owned_by("a1", "beta"));
        assert!(s.owned_by("unknown", "beta"));
        assert_eq!(s.admit(&token("acme"), None), Err(Full::Tenant(2)));
        assert_eq!(s.admit(&token("beta"), None), Ok(()));
        let three = Arc::new(Session::for_tests());
        s.register("b1", &three, &token("beta"));
        assert_eq!(s.admit(&token("beta"), None), Err(Full::All(3)));
        drop(one);
        assert_eq!(
            s.admit(&token("acme"), None),
            Ok(()),
            "a session that is gone frees its place"
        );
        assert!(!s.owned_by("a1", "beta"), "and stays its tenant's");
    }

    #[test]
    fn a_persons_session_is_not_another_persons_of_the_same_tenant_and_roles_bound_how_many() {
        let s = Sessions::new(&limits(10, 10), None);
        let (alice, bob) = (person("acme", "alice"), person("acme", "bob"));
        let one = Arc::new(Session::for_tests());
        s.register("x", &one, &alice);
        assert!(s.owned_by("x", &alice.owner()));
        assert!(!s.owned_by("x", &bob.owner()));
        assert!(!s.owned_by("x", "acme"), "nor the tenant's static token");
        assert_eq!(s.admit(&alice, Some(1)), Err(Full::Caller(1)));
        assert_eq!(s.admit(&bob, Some(1)), Ok(()));
        assert_eq!(s.admit(&alice, Some(2)), Ok(()));
    }
}
