//! Records a shared store keeps for every process that uses it, each a text under a kind and
//! an id, kept for a while after it was last written or read: what `mcp serve` keeps of an
//! HTTP session (its owner and its `initialize`) so that any replica serves any of its
//! requests — and counters under the same id (what a session has spent). A store that is not
//! shared has none: its process keeps its own, in a [`LocalRecords`] where it needs them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{BoxFuture, LaneError};

/// Records of one kind.
pub trait Records: Send + Sync {
    /// Keep `text` under `id` for `keep`.
    fn put(
        self: Arc<Self>,
        id: String,
        text: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<(), LaneError>>;
    /// The text under `id`, kept `keep` longer from now (zero: as long as it was); `None`:
    /// there is none.
    fn get(
        self: Arc<Self>,
        id: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>>;
    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>>;
    /// Add each [`Add`] to the counters under `id` (kept `keep` longer), all or none: `Ok(Err((i,
    /// now)))` says the `i`-th would pass its most, counter `now` (nothing was added).
    fn tally(
        self: Arc<Self>,
        id: String,
        adds: Vec<Add>,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Tally, LaneError>>;
    /// The counters under `id` (none: an empty list).
    fn counters(
        self: Arc<Self>,
        id: String,
    ) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>>;
    /// Drop these counters under `id`.
    fn forget(
        self: Arc<Self>,
        id: String,
        counters: Vec<String>,
    ) -> BoxFuture<'static, Result<(), LaneError>>;
}

/// The kinds of records a shared store keeps, each under a name of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// An HTTP session of `mcp serve`: its owner and its `initialize`.
    Session,
    /// A task of `mcp serve` (and its cancel mark).
    Task,
}

impl RecordKind {
    /// The name its records are kept under.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RecordKind::Session => "session",
            RecordKind::Task => "task",
        }
    }
}

/// Records of one kind whose texts are values of `T` (as JSON): what a consumer holds, so
/// nobody writes a record of another shape under its kind. Its counters, and texts of its own
/// beside the values (a task's cancel mark), are the [`Typed::raw`] records'.
pub(crate) struct Typed<T> {
    raw: Arc<dyn Records>,
    of: std::marker::PhantomData<fn() -> T>,
}

impl<T> Clone for Typed<T> {
    fn clone(&self) -> Typed<T> {
        Typed {
            raw: self.raw.clone(),
            of: std::marker::PhantomData,
        }
    }
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> Typed<T> {
    pub(crate) fn new(raw: Arc<dyn Records>) -> Typed<T> {
        Typed {
            raw,
            of: std::marker::PhantomData,
        }
    }

    /// The records themselves (counters, plain texts).
    pub(crate) fn raw(&self) -> &Arc<dyn Records> {
        &self.raw
    }

    /// Keep `value` under `id` for `keep`.
    pub(crate) async fn put(&self, id: String, value: &T, keep: Duration) -> Result<(), LaneError> {
        let text = serde_json::to_string(value).map_err(|e| LaneError(e.to_string()))?;
        self.raw.clone().put(id, text, keep).await
    }

    /// The value under `id` (kept `keep` longer; zero: as long as it was); `None`: there is
    /// none. What is there but is not a `T` is an error.
    pub(crate) async fn get(&self, id: String, keep: Duration) -> Result<Option<T>, LaneError> {
        let Some(text) = self.raw.clone().get(id.clone(), keep).await? else {
            return Ok(None);
        };
        let read = serde_json::from_str(&text);
        read.map(Some)
            .map_err(|e| LaneError(format!("the record `{id}` is not of its kind: {e}")))
    }
}

/// A tally's outcome: added, or refused by the `i`-th addition, its counter being `now`.
pub(crate) type Tally = Result<(), (usize, f64)>;

/// One counter's addition, refused when it would take the counter past `most`.
#[derive(Debug, Clone)]
pub struct Add {
    pub counter: String,
    pub by: f64,
    pub most: Option<f64>,
}

/// Counters by name, and until when they are kept.
type Counters = (HashMap<String, f64>, Instant);

/// One process's records, at most `cap` texts (past it, the one that expires first goes).
pub(crate) struct LocalRecords {
    cap: usize,
    texts: Mutex<HashMap<String, (String, Instant)>>,
    counters: Mutex<HashMap<String, Counters>>,
}

impl LocalRecords {
    pub(crate) fn new(cap: usize) -> LocalRecords {
        LocalRecords {
            cap: cap.max(1),
            texts: Mutex::default(),
            counters: Mutex::default(),
        }
    }

    fn now_get(&self, id: &str, keep: Duration) -> Option<String> {
        let mut m = self.texts.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match m.get_mut(id) {
            Some((text, until)) if *until > now => {
                if !keep.is_zero() {
                    *until = now + keep;
                }
                Some(text.clone())
            }
            Some(_) => {
                m.remove(id);
                None
            }
            None => None,
        }
    }

    fn now_put(&self, id: String, text: String, keep: Duration) {
        let mut m = self.texts.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if m.len() >= self.cap && !m.contains_key(&id) {
            m.retain(|_, (_, until)| *until > now);
            if m.len() >= self.cap {
                let first = m
                    .iter()
                    .min_by_key(|(_, (_, u))| *u)
                    .map(|(k, _)| k.clone());
                if let Some(k) = first {
                    m.remove(&k);
                }
            }
        }
        m.insert(id, (text, now + keep));
    }

    fn now_tally(&self, id: String, adds: &[Add], keep: Duration) -> Tally {
        let mut m = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        m.retain(|_, (_, until)| *until > now);
        let (c, until) = m.entry(id).or_insert_with(|| (HashMap::new(), now));
        for (i, a) in adds.iter().enumerate() {
            let was = c.get(&a.counter).copied().unwrap_or(0.0);
            if a.most.is_some_and(|most| was + a.by > most + 1e-9) {
                return Err((i, was));
            }
        }
        for a in adds {
            *c.entry(a.counter.clone()).or_default() += a.by;
        }
        *until = now + keep;
        Ok(())
    }
}

impl Records for LocalRecords {
    fn put(
        self: Arc<Self>,
        id: String,
        text: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        self.now_put(id, text, keep);
        Box::pin(std::future::ready(Ok(())))
    }

    fn get(
        self: Arc<Self>,
        id: String,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Option<String>, LaneError>> {
        Box::pin(std::future::ready(Ok(self.now_get(&id, keep))))
    }

    fn remove(self: Arc<Self>, id: String) -> BoxFuture<'static, Result<(), LaneError>> {
        self.texts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        Box::pin(std::future::ready(Ok(())))
    }

    fn tally(
        self: Arc<Self>,
        id: String,
        adds: Vec<Add>,
        keep: Duration,
    ) -> BoxFuture<'static, Result<Tally, LaneError>> {
        Box::pin(std::future::ready(Ok(self.now_tally(id, &adds, keep))))
    }

    fn counters(
        self: Arc<Self>,
        id: String,
    ) -> BoxFuture<'static, Result<Vec<(String, f64)>, LaneError>> {
        let m = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let list = match m.get(&id) {
            Some((c, until)) if *until > now => c.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            _ => Vec::new(),
        };
        Box::pin(std::future::ready(Ok(list)))
    }

    fn forget(
        self: Arc<Self>,
        id: String,
        counters: Vec<String>,
    ) -> BoxFuture<'static, Result<(), LaneError>> {
        let mut m = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, _)) = m.get_mut(&id) {
            for k in &counters {
                c.remove(k);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_records_keep_texts_to_their_cap_and_tally_all_or_none() {
        let r = Arc::new(LocalRecords::new(2));
        let hour = Duration::from_secs(3600);
        for id in ["a", "b", "c"] {
            r.clone()
                .put(id.into(), id.into(), hour)
                .await
                .expect("put");
        }
        let a = r.clone().get("a".into(), hour).await.expect("get");
        let c = r.clone().get("c".into(), hour).await.expect("get");
        assert_eq!((a, c), (None, Some("c".to_string())));
        let add = |counter: &str, by, most| Add {
            counter: counter.into(),
            by,
            most,
        };
        let ok = r
            .clone()
            .tally("t".into(), vec![add("x", 2.0, Some(3.0))], hour);
        assert_eq!(ok.await.expect("tally"), Ok(()));
        let adds = vec![add("y", 1.0, None), add("x", 2.0, Some(3.0))];
        let refused = r
            .clone()
            .tally("t".into(), adds, hour)
            .await
            .expect("tally");
        assert_eq!(refused, Err((1, 2.0)));
        let counters = r.clone().counters("t".into()).await.expect("counters");
        assert_eq!(counters, vec![("x".to_string(), 2.0)]);
        r.clone()
            .forget("t".into(), vec!["x".into()])
            .await
            .expect("forget");
        let counters = r.clone().counters("t".into()).await.expect("counters");
        assert!(counters.is_empty());
    }
}
