//! The read cache: `cache = "5m"` on a read, idempotent tool keeps each `ok` result for that
//! long, so a repeated read (in this turn or a later one, in this process or another on the
//! same lane store) is answered without invoking anything.
//!
//! An entry is keyed by a SHA-256 of the tenant (the caller, for a server that answers each
//! caller as itself: [`crate::tools::mcp::owner`]), the tool, how it is invoked (its target,
//! secrets as `***`) and the resolved arguments (keys sorted), so one tenant never sees
//! another's result and a key names no argument. Entries live in the lane store
//! ([`CacheStore`]): in memory (`memory.rs`, this process only), as private files beside the
//! local store's lanes (`files.rs`), or as Redis keys with a TTL (`redis.rs`).
//!
//! Identical reads in flight are coalesced: one call per key looks and, on a miss, *leads* —
//! it claims the key (in this process, and in the store for other processes) and invokes the
//! tool; every other identical call waits for the claim to go and then finds the leader's
//! entry. A leader that fails leaves no entry, and the next waiter leads in its place.
//!
//! A cached read is a read like any other on its backends: each backend has a *mark* in the
//! store that changes whenever a write on it resolves (in this run or any run on the same
//! store). A leader notes the marks before it invokes, its entry carries them, and an entry
//! whose marks are not the backends' current ones is stale — a miss. The run orders a
//! cached read after the writes before it on its backends, so it looks only once they have
//! resolved. Another process's write is ordered by the lane store instead, and a read that
//! arrives while it is in flight (or queued) comes after it: so in a store processes share, a
//! write changes its backends' marks also as it arrives, before it queues for them, and a
//! leader notes the marks again once it holds its backends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::store::{Answer, BoxFuture};

mod files;
mod memory;
mod redis;
pub(crate) use files::FileCache;
pub(crate) use memory::MemoryCache;
pub(crate) use redis::RedisCache;

/// A cached result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// The run that stored it (`--refresh` ignores other runs' entries).
    pub run: String,
    pub output: Value,
    /// Its backends' marks when its leader looked (see the module's doc).
    #[serde(default)]
    pub marks: Vec<u64>,
}

/// What a store failed at (the call then goes ahead uncached).
#[derive(Debug, Clone, thiserror::Error)]
#[error("result cache: {0}")]
pub struct CacheError(pub String);

/// What a process holds while it leads a key (a file lock, a Redis key).
pub(crate) type Claim = Box<dyn Claimed>;

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
    /// Each backend's current mark (0 for one never written).
    fn marks(self: Arc<Self>, backends: Arc<[String]>) -> Answer<Result<Vec<u64>, CacheError>>;
    /// A write on `backends` resolved: give each a new mark (entries that carry the old one
    /// are stale from now on).
    fn wrote(
        self: Arc<Self>,
        backends: Arc<[String]>,
    ) -> BoxFuture<'static, Result<(), CacheError>>;
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

/// The run's cache: the store, who leads which key in this process, `--refresh`, and
/// whether reads look at all (`--no-cache` still marks the backends its writes touch, so
/// other runs' entries go stale).
pub struct Cache {
    store: Arc<dyn CacheStore>,
    leading: Mutex<HashMap<String, watch::Receiver<()>>>,
    run_id: String,
    refresh: bool,
    lookups: bool,
    /// A write's mark could not be stored: entries may be stale, so this cache answers no
    /// more hits (every read invokes its tool).
    marks_lost: std::sync::atomic::AtomicBool,
}

/// How long another process's claim may keep a key before it is taken over (beyond the
/// call's own timeout).
const CLAIM_SLACK: Duration = Duration::from_secs(5);
/// When the tool has no timeout: how long a claim holds.
const CLAIM_DEFAULT: Duration = Duration::from_secs(60);

impl Cache {
    pub fn new(store: Arc<dyn CacheStore>, run_id: &str, refresh: bool) -> Arc<Cache> {
        Cache::with_lookups(store, run_id, refresh, true)
    }

    /// A cache whose reads look only when `lookups` (`false`: `--no-cache`, whose writes
    /// still mark their backends).
    pub fn with_lookups(
        store: Arc<dyn CacheStore>,
        run_id: &str,
        refresh: bool,
        lookups: bool,
    ) -> Arc<Cache> {
        Arc::new(Cache {
            store,
            leading: Mutex::new(HashMap::new()),
            run_id: run_id.to_string(),
            refresh,
            lookups,
            marks_lost: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether cached reads look here (not under `--no-cache`).
    pub fn lookups(&self) -> bool {
        self.lookups
    }

    /// Look `key` up; wait while another identical call leads it. `timeout` is the tool's
    /// (it bounds how long another process may hold the key).
    pub fn lookup(
        self: &Arc<Self>,
        key: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<'static, Lookup> {
        self.lookup_on(key, timeout, Arc::from([]))
    }

    /// [`Cache::lookup`] for a tool reading `backends`: an entry stored before a write on
    /// one of them resolved is stale.
    pub fn lookup_on(
        self: &Arc<Self>,
        key: String,
        timeout: Option<Duration>,
        backends: Arc<[String]>,
    ) -> BoxFuture<'static, Lookup> {
        let hold = timeout.unwrap_or(CLAIM_DEFAULT) + CLAIM_SLACK;
        Box::pin(self.clone().find(key, hold, backends))
    }

    /// A fresh entry's output for `key`, without claiming anything (what `plan` shows).
    pub async fn peek(self: &Arc<Self>, key: String, backends: Arc<[String]>) -> Option<Value> {
        let marks = self.store.clone().marks(backends).get().await.ok()?;
        match self.store.clone().get(key).get().await {
            Ok(Some(e)) if e.marks == marks => Some(e.output),
            _ => None,
        }
    }

    /// A write on `backends` resolved (see the module's doc). A mark that cannot be stored
    /// turns this cache's hits off.
    pub async fn wrote(&self, backends: Arc<[String]>) {
        if self.store.clone().wrote(backends).await.is_err() {
            self.marks_lost
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    async fn find(self: Arc<Self>, key: String, hold: Duration, backends: Arc<[String]>) -> Lookup {
        loop {
            let local = match self.lead_here(&key) {
                Ok(l) => l,
                Err(mut leader) => {
                    // Another call of this process leads the key: wait until it lets go.
                    let _ = leader.changed().await;
                    continue;
                }
            };
            return self.find_led(key, hold, local, backends).await;
        }
    }

    /// As the one call of this process looking at `key`: an entry, a claim, or (another
    /// process leads it) a look again shortly.
    async fn find_led(
        self: Arc<Self>,
        key: String,
        hold: Duration,
        local: LocalLead,
        backends: Arc<[String]>,
    ) -> Lookup {
        let mut delay = Duration::from_millis(10);
        if self.marks_lost.load(std::sync::atomic::Ordering::SeqCst) {
            return Lookup::Bypass(CacheError("a write's mark could not be stored".into()));
        }
        loop {
            // The marks first: an entry carrying them was stored after every write that
            // resolved before this look.
            let marks = if backends.is_empty() {
                Vec::new()
            } else {
                match self.store.clone().marks(backends.clone()).get().await {
                    Ok(m) => m,
                    Err(e) => return Lookup::Bypass(e),
                }
            };
            match self.store.clone().get(key.clone()).get().await {
                Ok(Some(e)) if (!self.refresh || e.run == self.run_id) && e.marks == marks => {
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
                        marks: Some(marks),
                        backends,
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
    /// The backends' marks when it looked: its entry is fresh while they stand (`None`: they
    /// could not be read again, so it stores nothing).
    marks: Option<Vec<u64>>,
    backends: Arc<[String]>,
    _local: LocalLead,
}

impl Lead {
    /// Note the marks again just before the tool runs — after waiting for its backends in a
    /// store other processes share, where a write that arrived first may have resolved
    /// meanwhile (the entry would be stale at once otherwise).
    pub async fn look_again(&mut self) {
        if self.backends.is_empty() {
            return;
        }
        let store = self.cache.store.clone();
        self.marks = store.marks(self.backends.clone()).get().await.ok();
    }

    /// Keep `output` for `ttl`, then let the key go (waiters find the entry).
    pub async fn publish(mut self, output: &Value, ttl: Duration) {
        let Some(marks) = self.marks.take() else {
            return self.abandon().await;
        };
        let entry = Entry {
            run: self.cache.run_id.clone(),
            output: output.clone(),
            marks,
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

/// The cache key of a call: its owner (tenant, or caller:
/// [`crate::tools::mcp::owner`]), tool, invocation
/// target and resolved arguments.
pub(crate) fn key(
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

pub(crate) use crate::hash::{canonical, hex};

#[cfg(test)]
mod tests;
