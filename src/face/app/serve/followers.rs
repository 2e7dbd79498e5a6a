//! Who hears what the whole servers say changed: the sessions that listed resources or prompts,
//! the resources each subscribed to (`resources/subscribe`), and the `subscriptions/listen`
//! streams of `2026-07-28` clients — each a [`Listener`] — and what each server listed, kept
//! for the door's checks until the server says its list changed ([`Offer`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use super::gateway::Gateway;
use super::uri::Template;
use crate::tools::mcp::{Change, McpHub};

/// How long a server's lists are trusted without its word that they changed.
const OFFER_TTL: Duration = Duration::from_secs(30);

/// Where a change is told: a session's peer (a notification on its wire), or one
/// `subscriptions/listen` request's stream (which adds the subscription's id and keeps to what
/// it accepted).
#[derive(Clone)]
pub(super) enum Listener {
    Peer(Peer<RoleServer>),
    Stream(SubscriptionSink),
}

impl Listener {
    /// Tell it `n`; `false`: it is gone (or no longer listens).
    async fn say(&self, n: ServerNotification) -> bool {
        match self {
            Listener::Peer(p) => p.send_notification(n).await.is_ok(),
            Listener::Stream(s) => s.send(n).await.is_ok(),
        }
    }
}

/// Listeners, by session (or stream) id.
type Listeners = HashMap<u64, Listener>;

/// What a whole server listed: its resources (normalized, each to its own spelling, which is
/// what the server is asked for), templates and prompts.
#[derive(Default)]
pub(super) struct Offer {
    pub uris: HashMap<String, String>,
    pub templates: Vec<Template>,
    pub prompts: HashSet<String>,
}

/// Who is told what changed.
#[derive(Default)]
pub(super) struct Followers {
    resources: Mutex<Listeners>,
    prompts: Mutex<Listeners>,
    /// By server and its own URI: the sessions subscribed.
    pub subscribed: Mutex<HashMap<(String, String), Listeners>>,
    /// What each server listed, as last asked.
    offers: Mutex<HashMap<String, (Instant, Arc<Offer>)>>,
    /// The ids of `subscriptions/listen` streams (above any session's).
    streams: AtomicU64,
}

/// What is listed.
#[derive(Clone, Copy)]
pub(super) enum Listing {
    Resources,
    Prompts,
}

impl Followers {
    /// Tell `id` when the servers' `what` change (from its first list on).
    pub(super) fn listed(&self, what: Listing, id: u64, to: Listener) {
        let map = match what {
            Listing::Resources => &self.resources,
            Listing::Prompts => &self.prompts,
        };
        if let Ok(mut m) = map.lock() {
            m.entry(id).or_insert(to);
        }
    }

    /// Tell `id` nothing more of `what`.
    pub(super) fn unlisted(&self, what: Listing, id: u64) {
        let map = match what {
            Listing::Resources => &self.resources,
            Listing::Prompts => &self.prompts,
        };
        if let Ok(mut m) = map.lock() {
            m.remove(&id);
        }
    }

    /// An id for a `subscriptions/listen` stream, unlike any session's.
    pub(super) fn stream_id(&self) -> u64 {
        (1 << 62) | self.streams.fetch_add(1, Ordering::Relaxed)
    }

    /// What `server` listed, while it is fresh.
    pub(super) fn offer(&self, server: &str) -> Option<Arc<Offer>> {
        let m = self.offers.lock().ok()?;
        let (at, o) = m.get(server)?;
        (at.elapsed() < OFFER_TTL).then(|| o.clone())
    }

    /// Keep what `server` listed.
    pub(super) fn remember(&self, server: &str, offer: Arc<Offer>) {
        if let Ok(mut m) = self.offers.lock() {
            m.insert(server.to_string(), (Instant::now(), offer));
        }
    }

    fn forget(&self, server: &str) {
        if let Ok(mut m) = self.offers.lock() {
            m.remove(server);
        }
    }
}

/// What a `subscriptions/listen` stream is told: what it asked for that the gateway serves —
/// list changes, and updates of the resources it names (each taken at the door when the
/// stream starts; one refused there is not followed).
pub(super) fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    requested.clone()
}

/// Pass on what the servers of `hub` say changed, until the hub is gone: a server's tools are
/// learnt again (and every session that listed them is told), the sessions that listed its
/// resources or prompts are told, and those subscribed to a resource hear of its update.
pub(super) async fn follow(g: Arc<Gateway>, hub: Arc<McpHub>) {
    let mut changes = hub.changes();
    drop(hub);
    loop {
        let change = match changes.recv().await {
            Ok(c) => c,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let f = &g.followers;
        match change {
            Change::Tools(server) => g.catalog.relearn(&server).await,
            Change::Resources(server) => {
                f.forget(&server);
                let n = ServerNotification::ResourceListChangedNotification(Default::default());
                tell(&f.resources, n).await;
            }
            Change::Prompts(server) => {
                f.forget(&server);
                let n = ServerNotification::PromptListChangedNotification(Default::default());
                tell(&f.prompts, n).await;
            }
            Change::ResourceUpdated(server, own) => {
                let manifest = g.catalog.manifest();
                let wholes = super::catalog::wholes(&manifest);
                let Some((_, w)) = wholes.into_iter().find(|(s, _)| *s == server) else {
                    continue;
                };
                let key = (server, own.clone());
                let param = rmcp::model::ResourceUpdatedNotificationParam::new(w.uri_of(&own));
                let n = ServerNotification::ResourceUpdatedNotification(
                    rmcp::model::ResourceUpdatedNotification::new(param),
                );
                let listeners: Vec<(u64, Listener)> = (f.subscribed.lock().ok())
                    .and_then(|s| {
                        s.get(&key)
                            .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
                    })
                    .unwrap_or_default();
                for (id, l) in listeners {
                    if !l.say(n.clone()).await {
                        // A session that is gone hears of nothing more.
                        if let Ok(mut s) = f.subscribed.lock() {
                            s.get_mut(&key).map(|m| m.remove(&id));
                        }
                    }
                }
            }
        }
    }
}

/// Tell every listener of `map` `n`; those that cannot be told are forgotten.
async fn tell(map: &Mutex<Listeners>, n: ServerNotification) {
    let listeners: Vec<(u64, Listener)> = map
        .lock()
        .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
        .unwrap_or_default();
    for (id, l) in listeners {
        if !l.say(n.clone()).await {
            if let Ok(mut m) = map.lock() {
                m.remove(&id);
            }
        }
    }
}
