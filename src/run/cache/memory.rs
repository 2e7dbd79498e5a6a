//! Cached results in this process only (`--lane-store memory`), on tokio's clock (so tests
//! expire entries on a paused clock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{CacheError, CacheStore, Claim, Entry};
use crate::run::store::{Answer, BoxFuture};

/// Entries with the instant each expires.
#[derive(Default)]
pub(crate) struct MemoryCache {
    entries: Mutex<HashMap<String, (Entry, Instant)>>,
    marks: Mutex<HashMap<String, u64>>,
}

impl MemoryCache {
    pub(crate) fn new() -> MemoryCache {
        MemoryCache::default()
    }
}

impl CacheStore for MemoryCache {
    fn get(self: Arc<Self>, key: String) -> Answer<Result<Option<Entry>, CacheError>> {
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let found = match map.get(&key) {
            Some((e, expires)) if *expires > Instant::now() => Some(e.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        };
        Answer::Now(Ok(found))
    }

    fn put(self: Arc<Self>, key: String, entry: Entry, ttl: Duration) -> BoxFuture<'static, ()> {
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key, (entry, Instant::now() + ttl));
        Box::pin(std::future::ready(()))
    }

    fn claim(
        self: Arc<Self>,
        _key: String,
        _hold: Duration,
    ) -> Answer<Result<Option<Claim>, CacheError>> {
        // No other process shares this store: the in-process lead is the only claim.
        Answer::Now(Ok(Some(Box::new(()))))
    }

    fn marks(self: Arc<Self>, backends: Arc<[String]>) -> Answer<Result<Vec<u64>, CacheError>> {
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        Answer::Now(Ok(backends
            .iter()
            .map(|b| marks.get(b).copied().unwrap_or(0))
            .collect()))
    }

    fn wrote(
        self: Arc<Self>,
        backends: Arc<[String]>,
    ) -> BoxFuture<'static, Result<(), CacheError>> {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        for b in backends.iter() {
            *marks.entry(b.clone()).or_insert(0) += 1;
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
