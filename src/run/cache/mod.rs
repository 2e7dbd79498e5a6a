//! The read cache: `cache = "5m"` on a read, idempotent tool keeps each `ok` result for that
//! long, so a repeated read (in this turn or a later one, in this process or another on the
//! same lane store) is answered without invoking anything.
//!
//! An entry is keyed by a SHA-256 of the tenant, the tool, how it is invoked (its target,
//! secrets as `***`) and the resolved arguments (keys sorted), so one tenant never sees
//! another's result and a key names no argument. Entries live in the lane store
//! ([`CacheStore`]): in memory (`memory.rs`, this process only), as private files beside the
//! local store's lanes (`files.rs`), or as Redis keys with a TTL (`redis.rs`).
//!
//! Identical reads in flight are coalesced: one call per key looks and, on a miss, *leads* —
//! it claims the key (in this process, and in the store for other processes) and invokes the
//! tool; every other identical call waits for the claim to go and then finds the leader's
//! entry. A leader that fails leaves no entry, and the next waiter leads in its place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::lanes::{Answer, BoxFuture};

mod files;
mod memory;
mod redis;
pub use files::FileCache;
pub use memory::MemoryCache;
pub use redis::RedisCache;

/// A cached result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// The run that stored it (`--refresh` ignores other runs' entries).
    pub run: String,
    pub output: Value,
}

/// What a store failed at (the call then goes ahead uncached).
#[derive(Debug, Clone, thiserror::Error)]
#[error("result cache: {0}")]
pub struct CacheError(pub String);

/// What a process holds while it leads a key (a file lock, a Redis key).
pub type Claim = Box<dyn Claimed>;

/// A held claim: released when its lead is done (dropping it lets the key go too, at once
/// or in the background).
pub trait Claimed: Send + Sync {
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// A claim with nothing to release but itself (the memory store's, a file lock).
impl Claimed for () {
    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Where entries live: one implementation per lane store.
pub trait CacheStore: Send + Sync {
    /// A fresh entry for `key`, if there is one.
    fn get(self: Arc<Self>, key: String) -> Answer<Result<Option<Entry>, CacheError>>;
    /// Keep `entry` under `key` for `ttl`.
    fn put(self: Arc<Self>, key: String, entry: Entry, ttl: Duration) -> BoxFuture<'static, ()>;
    /// Claim `key` for this process for at most `hold` (other processes wait while it is
    /// held): `Some` when claimed, `None` when another process holds it.
    fn claim(
        self: Arc<Self>,
        key: String,
        hold: Duration,
    ) -> Answer<Result<Option<Claim>, CacheError>>;
}

/// What a lookup found.
pub enum Lookup {
    /// A fresh entry's output.
    Hit(Value),
    /// No entry: this call invokes the tool and stores what it gets.
    Lead(Lead),
    /// The store failed: invoke the tool, cache nothing.
    Bypass(CacheError),
}

/// The run's cache: the store, who leads which key in this process, and `--refresh`.
pub struct Cache {
    store: Arc<dyn CacheStore>,
    leading: Mutex<HashMap<String, watch::Receiver<()>>>,
    run_id: String,
    refresh: bool,
}

/// How long another process's claim may keep a key before it is taken over (beyond the
/// call's own timeout).
const CLAIM_SLACK: Duration = Duration::from_secs(5);
/// When the tool has no timeout: how long a claim holds.
const CLAIM_DEFAULT: Duration = Duration::from_secs(60);

impl Cache {
    pub fn new(store: Arc<dyn CacheStore>, run_id: &str, refresh: bool) -> Arc<Cache> {
        Arc::new(Cache {
            store,
            leading: Mutex::new(HashMap::new()),
            run_id: run_id.to_string(),
            refresh,
        })
    }

    /// Look `key` up; wait while another identical call leads it. `timeout` is the tool's
    /// (it bounds how long another process may hold the key).
    pub fn lookup(
        self: &Arc<Self>,
        key: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<'static, Lookup> {
        let hold = timeout.unwrap_or(CLAIM_DEFAULT) + CLAIM_SLACK;
        Box::pin(self.clone().find(key, hold))
    }

    async fn find(self: Arc<Self>, key: String, hold: Duration) -> Lookup {
        loop {
            let local = match self.lead_here(&key) {
                Ok(l) => l,
                Err(mut leader) => {
                    // Another call of this process leads the key: wait until it lets go.
                    let _ = leader.changed().await;
                    continue;
                }
            };
            return self.find_led(key, hold, local).await;
        }
    }

    /// As the one call of this process looking at `key`: an entry, a claim, or (another
    /// process leads it) a look again shortly.
    async fn find_led(self: Arc<Self>, key: String, hold: Duration, local: LocalLead) -> Lookup {
        let mut delay = Duration::from_millis(10);
        loop {
            match self.store.clone().get(key.clone()).get().await {
                Ok(Some(e)) if !self.refresh || e.run == self.run_id => {
                    return Lookup::Hit(e.output)
                }
                Ok(_) => {}
                Err(e) => return Lookup::Bypass(e),
            }
            match self.store.clone().claim(key.clone(), hold).get().await {
                Ok(Some(claim)) => {
                    return Lookup::Lead(Lead {
                        cache: self.clone(),
                        key,
                        claim: Some(claim),
                        _local: local,
                    })
                }
                Ok(None) => {}
                Err(e) => return Lookup::Bypass(e),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// Lead `key` in this process, or the receiver of the call that does.
    fn lead_here(self: &Arc<Self>, key: &str) -> Result<LocalLead, watch::Receiver<()>> {
        let mut map = self.leading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = map.get(key) {
            return Err(rx.clone());
        }
        let (tx, rx) = watch::channel(());
        map.insert(key.to_string(), rx);
        Ok(LocalLead {
            cache: self.clone(),
            key: key.to_string(),
            _tx: tx,
        })
    }
}

/// This process's lead on a key: dropping it wakes the calls waiting for it.
struct LocalLead {
    cache: Arc<Cache>,
    key: String,
    _tx: watch::Sender<()>,
}

impl Drop for LocalLead {
    fn drop(&mut self) {
        let mut map = self.cache.leading.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&self.key);
    }
}

/// A call that found no entry and invokes the tool: it stores an `ok` output, and lets the
/// key go either way.
pub struct Lead {
    cache: Arc<Cache>,
    key: String,
    claim: Option<Claim>,
    _local: LocalLead,
}

impl Lead {
    /// Keep `output` for `ttl`, then let the key go (waiters find the entry).
    pub async fn publish(self, output: &Value, ttl: Duration) {
        let entry = Entry {
            run: self.cache.run_id.clone(),
            output: output.clone(),
        };
        let store = self.cache.store.clone();
        store.put(self.key.clone(), entry, ttl).await;
        self.abandon().await;
    }

    /// Let the key go without an entry (the call failed): the next waiter leads it.
    pub async fn abandon(mut self) {
        if let Some(claim) = self.claim.take() {
            claim.release().await;
        }
    }
}

/// The cache key of a call: tenant, tool, invocation target and resolved arguments.
pub fn key(
    tenant: &str,
    tool: &str,
    target: &str,
    args: &serde_json::Map<String, Value>,
) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [tenant, tool, target] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.update(canonical(&Value::Object(args.clone())).as_bytes());
    hex(&h.finalize())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// JSON with every object's keys sorted: the same value always gives the same text.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests;
