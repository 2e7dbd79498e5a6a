//! Calls of `mcp serve` parked for approval out of band, on a board every process that
//! shares the lane store sees: with the `local` (or `memory`) store, files in the manifest's
//! private lane folder (the store's [`FileBoard`]); with Redis, two hashes every replica
//! reads. `flux-tools approvals` lists the waiting calls; `flux-tools approve ID@HASH` (or
//! `deny ID`), from any terminal or replica, answers one. An approval names the hash of the
//! arguments it was given for: a wrong hash is refused, and the waiting gateway checks the
//! hash again, so changed arguments are never run on an old approval. A waiting gateway says
//! it lives every second (one beat for all its calls, under the prefix of their ids); an entry
//! whose gateway has not beaten for [`STALE`] (it died) stays listed, marked orphaned, until
//! its deadline: it can still be answered, and the client's retry of the same call — the same
//! `_meta.idempotencyKey` of the same tenant, same tool and arguments — through any gateway
//! takes it over, with its id, deadline and any answer given meanwhile, instead of parking a
//! new one. A call without a key is never taken for another that only looks the same. A
//! gateway that stops, or a client whose session ends, takes its entries off the board.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::run::store::{Board, BoardOf, FileBoard};

/// How long an entry its gateway stopped renewing stays listed (seconds).
const STALE: f64 = 10.0;

/// One call waiting for approval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct Waiting {
    pub id: String,
    pub tool: String,
    pub args: Value,
    pub hash: String,
    /// The gateway waiting for the answer.
    pub pid: u32,
    /// The name the waiting gateway beats under (empty: the prefix of the id).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// The tenant the call came from (a retry is matched on tenant, tool and hash).
    #[serde(default)]
    pub tenant: String,
    /// A digest of the client's idempotency key for the call, when it sent one: only a retry
    /// with the same key takes the entry over (see [`Parked::adopt`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Who asked: the caller's subject (a JWT's `sub`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Listed only: its gateway stopped renewing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphaned: bool,
    /// Unix seconds: since when, until when it waits, and when its gateway last renewed it.
    pub since: f64,
    pub until: f64,
    #[serde(default)]
    pub seen: f64,
}

/// What `approve`/`deny` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    Approve,
    Deny,
}

/// The board of one manifest's parked calls.
#[derive(Clone)]
pub(super) struct Parked {
    board: Arc<dyn Board>,
    /// The removals of entries whose calls stopped waiting, still under way.
    leaving: tokio_util::task::TaskTracker,
}

/// A parked call's place: its entry goes when it drops.
pub(super) struct Place {
    board: Arc<dyn Board>,
    waiting: Waiting,
    leaving: tokio_util::task::TaskTracker,
}

pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Parked {
    /// The parked calls of `store`'s board when it shares one (Redis), else of the files of
    /// the manifest at canonical path `manifest`.
    pub(super) fn of(manifest: &Path, store: Option<Arc<dyn Board>>) -> Result<Parked, String> {
        if let Some(board) = store {
            return Ok(Parked {
                board,
                leaving: Default::default(),
            });
        }
        Ok(Parked {
            board: Arc::new(FileBoard::for_manifest(manifest, BoardOf::Calls)?),
            leaving: Default::default(),
        })
    }

    /// Park `w`: listed from now until the place drops (renew it with [`Place::renew`]).
    pub(super) async fn park(&self, mut w: Waiting) -> Result<Place, String> {
        w.seen = unix_now();
        let text = serde_json::to_string(&w).map_err(|e| e.to_string())?;
        self.board
            .clone()
            .put(w.id.clone(), text)
            .await
            .map_err(|e| e.0)?;
        Ok(Place {
            board: self.board.clone(),
            waiting: w,
            leaving: self.leaving.clone(),
        })
    }

    /// Wait (at most `within`) until the entries of calls that stopped waiting are gone from
    /// the board: a gateway that stops leaves none of its own behind.
    pub(super) async fn settled(&self, within: std::time::Duration) {
        self.leaving.close();
        let _ = tokio::time::timeout(within, self.leaving.wait()).await;
        self.leaving.reopen();
    }

    /// When each gateway last beat.
    async fn beats(&self) -> HashMap<String, f64> {
        let beats = self.board.clone().beats().await.unwrap_or_default();
        beats.into_iter().collect()
    }

    /// Say that gateway `gateway` (the prefix of its calls' ids) lives.
    pub(super) async fn beat(&self, gateway: &str) {
        let _ = self
            .board
            .clone()
            .beat(gateway.to_string(), unix_now())
            .await;
    }

    /// Entries `texts`, read, each marked orphaned or not; orphaned ones past their deadline
    /// are removed instead.
    async fn read(
        &self,
        texts: Vec<String>,
        beats: &HashMap<String, f64>,
    ) -> Vec<(Waiting, String)> {
        let now = unix_now();
        let mut out = Vec::new();
        for text in texts {
            let Ok(mut w) = serde_json::from_str::<Waiting>(&text) else {
                continue;
            };
            w.orphaned = !alive(&w, beats, now);
            if !w.orphaned || w.until >= now {
                out.push((w, text));
            } else {
                let _ = self.board.clone().remove(w.id).await;
            }
        }
        out.sort_by(|a, b| a.0.since.total_cmp(&b.0.since));
        out
    }

    /// The calls waiting now, oldest first, with the text each is stored as; orphaned ones
    /// (their gateway stopped beating) are marked, and removed past their deadline.
    async fn entries(&self) -> Vec<(Waiting, String)> {
        let texts = self.board.clone().entries().await.unwrap_or_default();
        let beats = self.beats().await;
        self.read(texts, &beats).await
    }

    /// The calls waiting now, oldest first.
    pub(super) async fn list(&self) -> Vec<Waiting> {
        self.entries().await.into_iter().map(|(w, _)| w).collect()
    }

    /// At most `max` of the calls waiting now (the first by id), oldest first, and how many
    /// wait in all: what a page that refreshes every second may read.
    pub(super) async fn some(&self, max: usize) -> (Vec<Waiting>, usize) {
        let mut ids = self.board.clone().ids().await.unwrap_or_default();
        let total = ids.len();
        ids.sort_by(|a, b| by_id(a).cmp(&by_id(b)));
        ids.truncate(max);
        let texts = self.board.clone().get(ids).await.unwrap_or_default();
        let beats = self.beats().await;
        let listed = self.read(texts, &beats).await;
        (listed.into_iter().map(|(w, _)| w).collect(), total)
    }

    /// How many calls wait (no entry is read).
    pub(super) async fn count(&self) -> usize {
        self.board.clone().ids().await.map_or(0, |ids| ids.len())
    }

    /// The orphaned entries: those whose gateway stopped beating (never `own`'s). Only their
    /// entries are read.
    pub(super) async fn orphans(&self, own: &str) -> Vec<(Waiting, String)> {
        let ids = self.board.clone().ids().await.unwrap_or_default();
        let beats = self.beats().await;
        let now = unix_now();
        let dead: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                let gw = gateway_of(id);
                gw != own && !beats.get(gw).is_some_and(|t| t + STALE >= now)
            })
            .collect();
        let texts = self.board.clone().get(dead).await.unwrap_or_default();
        let mut out = self.read(texts, &beats).await;
        out.retain(|(w, _)| w.orphaned);
        out
    }

    /// Take over the oldest of `orphans` for the same call as `w` — the same idempotency key
    /// of the same tenant and subject, for the same tool and arguments; a call without a key
    /// is never taken for another that looks the same: it keeps its id, deadline and answer,
    /// and lives from here on with this gateway's beat.
    pub(super) async fn adopt(&self, w: &Waiting, orphans: &[(Waiting, String)]) -> Option<Place> {
        let now = unix_now();
        for (old, text) in orphans {
            if w.key.is_none()
                || (&old.key, &old.tenant, &old.subject, &old.tool, &old.hash)
                    != (&w.key, &w.tenant, &w.subject, &w.tool, &w.hash)
            {
                continue;
            }
            let taken = Waiting {
                pid: w.pid,
                gateway: w.gateway.clone(),
                seen: now,
                orphaned: false,
                ..old.clone()
            };
            let Ok(entry) = serde_json::to_string(&taken) else {
                continue;
            };
            let claim = self
                .board
                .clone()
                .claim(taken.id.clone(), text.clone(), entry);
            if matches!(claim.await, Ok(true)) {
                return Some(Place {
                    board: self.board.clone(),
                    waiting: taken,
                    leaving: self.leaving.clone(),
                });
            }
        }
        None
    }

    /// Every answer given so far, by call id (its text: a [`decision`], and [`answered_by`]).
    pub(super) async fn answers(&self) -> Vec<(String, String)> {
        self.board.clone().answers().await.unwrap_or_default()
    }

    /// Answer the parked call `id`; `hash` (required to approve) must be the hash of its
    /// arguments. The waiting call it answered.
    pub(super) async fn answer(
        &self,
        id: &str,
        hash: Option<&str>,
        d: Decision,
        by: &str,
    ) -> Result<Waiting, String> {
        let Some(w) = self.list().await.into_iter().find(|w| w.id == id) else {
            return Err(format!("no call `{id}` waits for approval (it may have been answered, cancelled, or refused at its deadline)\nhint: `flux-tools approvals` lists the calls that wait"));
        };
        match (d, hash) {
            (Decision::Approve, None) => {
                return Err(format!("approve names the call with the hash of its arguments: `{id}@{}`", w.hash))
            }
            (_, Some(h)) if h != w.hash => {
                return Err(format!(
                    "`{id}` waits with arguments whose hash is {}, not {h}: refused (its arguments are not the ones you approved, or the hash is mistyped)\nhint: `flux-tools approvals` shows each call's arguments and ID@HASH",
                    w.hash
                ))
            }
            _ => {}
        }
        // Who answered goes with the answer, on one line (no line breaks from a name).
        let by: String = by.chars().filter(|c| !c.is_control()).collect();
        let body = match d {
            Decision::Approve => format!("approve {} by {by}", w.hash),
            Decision::Deny => format!("deny by {by}"),
        };
        self.board
            .clone()
            .set_answer(id.to_string(), body)
            .await
            .map_err(|e| e.0)?;
        Ok(w)
    }
}

impl Place {
    /// The entry as it waits.
    pub(super) fn waiting(&self) -> &Waiting {
        &self.waiting
    }
}

/// What answer `text` decides for a call waiting with arguments hash `hash` (an approval for
/// other arguments decides nothing).
pub(super) fn decision(text: &str, hash: &str) -> Option<Decision> {
    let mut words = text.split_whitespace();
    match (words.next(), words.next()) {
        (Some("approve"), Some(h)) if h == hash => Some(Decision::Approve),
        (Some("deny"), _) => Some(Decision::Deny),
        _ => None,
    }
}

/// Who gave answer `text` (`approve HASH by WHO`), when it says.
pub(super) fn answered_by(text: &str) -> Option<&str> {
    text.split_once(" by ").map(|(_, who)| who.trim())
}

impl Waiting {
    /// Who asked, as `flux-tools approvals` shows it.
    pub(super) fn asked_by(&self) -> String {
        match (&self.subject, self.tenant.as_str()) {
            (Some(s), "") => s.clone(),
            (Some(s), t) => format!("{s} (tenant {t})"),
            (None, "") => "(unknown)".into(),
            (None, t) => format!("tenant {t}"),
        }
    }
}

/// The gateway an entry's id names (`GATEWAY-SEQ`).
fn gateway_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(gw, _)| gw)
}

/// Ids in a stable order: by gateway, then by number.
fn by_id(id: &str) -> (&str, u64) {
    let (gw, n) = id.rsplit_once('-').unwrap_or((id, ""));
    (gw, n.parse().unwrap_or(u64::MAX))
}

/// Whether an entry's gateway lives: it beat within [`STALE`] (or, written by a gateway that
/// renewed each entry itself, the entry was renewed).
fn alive(w: &Waiting, beats: &HashMap<String, f64>, now: f64) -> bool {
    let gw = if w.gateway.is_empty() {
        gateway_of(&w.id)
    } else {
        &w.gateway
    };
    w.seen + STALE >= now || beats.get(gw).is_some_and(|t| t + STALE >= now)
}

impl Drop for Place {
    fn drop(&mut self) {
        let gone = self
            .board
            .clone()
            .remove(std::mem::take(&mut self.waiting.id));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            self.leaving.spawn_on(gone, &handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::store::Entries;

    fn waiting(id: &str, seen: f64) -> Waiting {
        Waiting {
            id: id.into(),
            tool: "write".into(),
            args: serde_json::json!({"x": 1}),
            hash: "h".into(),
            pid: 1,
            gateway: String::new(),
            tenant: "t".into(),
            key: Some("k".into()),
            subject: None,
            orphaned: false,
            since: seen,
            until: unix_now() + 60.0,
            seen,
        }
    }

    /// The file board: an entry its gateway stopped renewing is listed orphaned, taken over
    /// once (compare-and-set), and keeps its id and answer.
    #[tokio::test]
    async fn an_orphaned_file_entry_is_taken_over_once_with_its_answer() {
        let dir = tempfile::tempdir().expect("a folder");
        let board = Arc::new(FileBoard::new(dir.path().to_path_buf()).expect("the board"));
        let parked = Parked {
            board: board.clone(),
            leaving: Default::default(),
        };
        let old = waiting("gw1-1", unix_now() - 2.0 * STALE);
        let text = serde_json::to_string(&old).expect("json");
        board.clone().put(old.id.clone(), text).await.expect("put");
        let listed = parked.list().await;
        assert!(listed.len() == 1 && listed[0].orphaned, "{listed:?}");
        parked
            .answer("gw1-1", Some("h"), Decision::Approve, "alice")
            .await
            .expect("answer");
        let retry = waiting("gw2-7", unix_now());
        let orphans = parked.orphans("gw2").await;
        // Only the same call — its idempotency key — takes it over, never one that looks alike.
        for key in [None, Some("other".to_string())] {
            let alike = Waiting {
                key,
                ..retry.clone()
            };
            assert!(parked.adopt(&alike, &orphans).await.is_none(), "{alike:?}");
        }
        let place = parked.adopt(&retry, &orphans).await.expect("taken over");
        assert_eq!(place.waiting().id, "gw1-1");
        let answers = parked.answers().await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(decision(&answers[0].1, "h"), Some(Decision::Approve));
        assert!(
            parked.adopt(&retry, &orphans).await.is_none(),
            "taken over once"
        );
        let other = Waiting {
            tenant: "u".into(),
            ..waiting("gw2-8", unix_now())
        };
        assert!(
            parked
                .adopt(&other, &parked.orphans("gw2").await)
                .await
                .is_none(),
            "another tenant's call"
        );
    }
}
