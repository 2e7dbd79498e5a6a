//! Cached results shared through Redis (`--lane-store redis://…`): an entry is a string key
//! (`flux-tools:NS:cache:KEY`, JSON) set with a TTL, so Redis expires it; a process leads a key
//! by setting `…:lead` with `NX` and a TTL of the call's timeout and a margin, and deletes it
//! (if still its own) when done — a leader that dies lets the key go when the TTL lapses. A
//! backend's mark is a counter `flux-tools:NS:cache-mark:BACKEND`, incremented by every write
//! that resolves on it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::{CacheError, CacheStore, Claim, Entry};
use crate::run::store::{Answer, BoxFuture};

/// Deletes the lead key only if it still holds our token (it may have lapsed and been taken).
const LET_GO: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Entries in Redis.
pub(crate) struct RedisCache {
    conn: ConnectionManager,
    /// `flux-tools:NS:cache:`.
    prefix: String,
    /// `flux-tools:NS:cache-mark:`.
    marks: String,
    /// The store's URL, redacted, for messages.
    url: String,
}

impl RedisCache {
    pub(crate) fn new(conn: ConnectionManager, namespace: &str, url: &str) -> RedisCache {
        RedisCache {
            conn,
            prefix: format!("flux-tools:{namespace}:cache:"),
            marks: format!("flux-tools:{namespace}:cache-mark:"),
            url: url.to_string(),
        }
    }

    fn mark_key(&self, backend: &str) -> String {
        format!("{}{backend}", self.marks)
    }

    fn error(&self, e: impl std::fmt::Display) -> CacheError {
        CacheError(format!("{}: {e}", self.url))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl CacheStore for RedisCache {
    fn get(self: Arc<Self>, key: String) -> Answer<Result<Option<Entry>, CacheError>> {
        Answer::Later(Box::pin(async move {
            let mut conn = self.conn.clone();
            let text: Option<String> = redis::cmd("GET")
                .arg(format!("{}{key}", self.prefix))
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error(e))?;
            Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
        }))
    }

    fn put(self: Arc<Self>, key: String, entry: Entry, ttl: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let Ok(body) = serde_json::to_string(&entry) else {
                return;
            };
            let mut conn = self.conn.clone();
            // A result that cannot be kept is only a later miss.
            let _: Result<(), _> = redis::cmd("SET")
                .arg(format!("{}{key}", self.prefix))
                .arg(body)
                .arg("PX")
                .arg(millis(ttl))
                .query_async(&mut conn)
                .await;
        })
    }

    fn marks(self: Arc<Self>, backends: Arc<[String]>) -> Answer<Result<Vec<u64>, CacheError>> {
        if backends.is_empty() {
            return Answer::Now(Ok(Vec::new()));
        }
        Answer::Later(Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut cmd = redis::cmd("MGET");
            for b in backends.iter() {
                cmd.arg(self.mark_key(b));
            }
            let marks: Vec<Option<u64>> = cmd
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error(e))?;
            Ok(marks.into_iter().map(|m| m.unwrap_or(0)).collect())
        }))
    }

    fn wrote(
        self: Arc<Self>,
        backends: Arc<[String]>,
    ) -> BoxFuture<'static, Result<(), CacheError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut pipe = redis::pipe();
            for b in backends.iter() {
                pipe.cmd("INCR").arg(self.mark_key(b)).ignore();
            }
            pipe.query_async::<()>(&mut conn)
                .await
                .map_err(|e| self.error(e))
        })
    }

    fn claim(
        self: Arc<Self>,
        key: String,
        hold: Duration,
    ) -> Answer<Result<Option<Claim>, CacheError>> {
        Answer::Later(Box::pin(async move {
            let lead = format!("{}{key}:lead", self.prefix);
            let token = format!("{:016x}", fastrand::u64(..));
            let mut conn = self.conn.clone();
            let set: Option<String> = redis::cmd("SET")
                .arg(&lead)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(millis(hold))
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error(e))?;
            Ok(set.map(|_| {
                Box::new(LeadKey {
                    conn: self.conn.clone(),
                    key: lead,
                    token,
                }) as Claim
            }))
        }))
    }
}

/// A lead key held in Redis: deleted (if still ours) when dropped.
struct LeadKey {
    conn: ConnectionManager,
    key: String,
    token: String,
}

impl super::Claimed for LeadKey {
    /// Delete the lead key now (waiters in other processes look again at once).
    fn release(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        let mut conn = self.conn.clone();
        let key = std::mem::take(&mut self.key);
        let token = std::mem::take(&mut self.token);
        Box::pin(async move {
            let _: Result<i64, _> = redis::Script::new(LET_GO)
                .key(&key)
                .arg(&token)
                .invoke_async(&mut conn)
                .await;
        })
    }
}

impl Drop for LeadKey {
    fn drop(&mut self) {
        if self.key.is_empty() {
            return;
        }
        let mut conn = self.conn.clone();
        let key = std::mem::take(&mut self.key);
        let token = std::mem::take(&mut self.token);
        // Best effort: if this never runs (the process exits), the key lapses on its own.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _: Result<i64, _> = redis::Script::new(LET_GO)
                    .key(&key)
                    .arg(&token)
                    .invoke_async(&mut conn)
                    .await;
            });
        }
    }
}
