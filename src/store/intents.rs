//! Intents by idempotency key: what `mcp serve` remembers of a client's
//! `_meta.idempotencyKey` — dispatched (by whom, while its lease lasts), then answered — so a
//! retry through any replica that shares the store makes no second call. [`LocalIntents`]
//! is one process's memory; the Redis store keeps them for every replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{BoxFuture, LaneError};

/// What the store knows of a key when a call claims it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Unknown: this claim owns it now (dispatch it).
    New,
    /// Another claim owns it, and its lease lasts: wait.
    InFlight,
    /// Answered: the recorded answer.
    Done(String),
    /// Its owner stopped renewing its lease mid-call (it died): this claim owns it now, and
    /// the call may have reached its tool.
    Orphaned,
    /// The key was claimed for other arguments.
    Mismatch,
}

/// One claim: key `scope` (tenant and key), for a call whose arguments hash to `hash`, by
/// `token`, leased for `lease`; the record is kept `keep`.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scope: String,
    pub hash: String,
    pub token: String,
    pub lease: Duration,
    pub keep: Duration,
}

/// Where intents live.
pub trait Intents: Send + Sync {
    fn claim(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<Intent, LaneError>>;
    /// Renew the claim's lease; `false`: it is not the owner any more.
    fn renew(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<bool, LaneError>>;
    /// Record the answer (only the owner's is kept).
    fn answer(
        self: Arc<Self>,
        c: Claim,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>>;
    /// Let the key go (its call never reached its tool), if the claim still owns it.
    fn forget(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<(), LaneError>>;
}

enum State {
    Dispatched { token: String, until: Instant },
    Done(String),
}

struct Entry {
    hash: String,
    state: State,
    expires: Instant,
}

/// One process's intents, at most `cap` at once (past it, the oldest expiring answered
/// entry is forgotten first).
pub(crate) struct LocalIntents {
    cap: usize,
    map: Mutex<HashMap<String, Entry>>,
}

impl LocalIntents {
    pub(crate) fn new(cap: usize) -> LocalIntents {
        LocalIntents {
            cap: cap.max(1),
            map: Mutex::default(),
        }
    }

    fn claim_now(&self, c: &Claim, now: Instant) -> Intent {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, e| e.expires > now);
        if let Some(e) = map.get_mut(&c.scope) {
            if e.hash != c.hash {
                return Intent::Mismatch;
            }
            return match &e.state {
                State::Done(answer) => Intent::Done(answer.clone()),
                State::Dispatched { until, .. } if *until > now => Intent::InFlight,
                State::Dispatched { .. } => {
                    e.state = dispatched(c, now);
                    Intent::Orphaned
                }
            };
        }
        if map.len() >= self.cap {
            let oldest = map
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Done(_)))
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        let entry = Entry {
            hash: c.hash.clone(),
            state: dispatched(c, now),
            expires: now + c.keep,
        };
        map.insert(c.scope.clone(), entry);
        Intent::New
    }

    fn owned<T>(&self, c: &Claim, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.get_mut(&c.scope)?;
        match &e.state {
            State::Dispatched { token, .. } if *token == c.token => Some(f(e)),
            _ => None,
        }
    }
}

fn dispatched(c: &Claim, now: Instant) -> State {
    State::Dispatched {
        token: c.token.clone(),
        until: now + c.lease,
    }
}

impl Intents for LocalIntents {
    fn claim(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<Intent, LaneError>> {
        let found = self.claim_now(&c, Instant::now());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn renew(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<bool, LaneError>> {
        let now = Instant::now();
        let kept = self.owned(&c, |e| e.state = dispatched(&c, now)).is_some();
        Box::pin(std::future::ready(Ok(kept)))
    }

    fn answer(
        self: Arc<Self>,
        c: Claim,
        answer: String,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let now = Instant::now();
        self.owned(&c, |e| {
            e.state = State::Done(answer);
            e.expires = now + c.keep;
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn forget(self: Arc<Self>, c: Claim) -> BoxFuture<'static, Result<(), LaneError>> {
        if self.owned(&c, |_| ()).is_some() {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.remove(&c.scope);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(token: &str, hash: &str) -> Claim {
        Claim {
            scope: "t:k1".into(),
            hash: hash.into(),
            token: token.into(),
            lease: Duration::from_secs(10),
            keep: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_key_is_dispatched_once_then_answered_and_refused_for_other_arguments() {
        let store = LocalIntents::new(10);
        let now = Instant::now();
        assert_eq!(store.claim_now(&claim("a", "h"), now), Intent::New);
        assert_eq!(store.claim_now(&claim("b", "h"), now), Intent::InFlight);
        assert_eq!(store.claim_now(&claim("b", "other"), now), Intent::Mismatch);
        // Its owner's lease ran out mid-call: the next claim owns it, orphaned.
        let later = now + Duration::from_secs(11);
        assert_eq!(store.claim_now(&claim("b", "h"), later), Intent::Orphaned);
        // The first owner's answer comes too late: only the owner's is kept.
        let s = Arc::new(store);
        s.clone()
            .answer(claim("a", "h"), "late".into())
            .await
            .unwrap();
        assert_eq!(s.claim_now(&claim("c", "h"), later), Intent::InFlight);
        s.clone()
            .answer(claim("b", "h"), "{\"isError\":false}".into())
            .await
            .unwrap();
        assert_eq!(
            s.claim_now(&claim("c", "h"), later),
            Intent::Done("{\"isError\":false}".into())
        );
        // Kept `keep`, then forgotten.
        let gone = later + Duration::from_secs(61);
        assert_eq!(s.claim_now(&claim("c", "h"), gone), Intent::New);
    }

    #[tokio::test]
    async fn past_its_cap_the_store_forgets_the_oldest_answer_first() {
        let store = Arc::new(LocalIntents::new(2));
        let now = Instant::now();
        let key = |k: &str| Claim {
            scope: k.into(),
            ..claim("a", "h")
        };
        store.claim_now(&key("k1"), now);
        store.clone().answer(key("k1"), "one".into()).await.unwrap();
        store.claim_now(&key("k2"), now);
        assert_eq!(store.claim_now(&key("k3"), now), Intent::New);
        // k1 (answered) was forgotten; k2 (in flight) was not.
        assert_eq!(store.claim_now(&key("k1"), now), Intent::New);
        assert_eq!(
            store.claim_now(
                &Claim {
                    token: "z".into(),
                    ..key("k2")
                },
                now
            ),
            Intent::InFlight
        );
    }
}
