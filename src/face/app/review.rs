//! Definitions `tools.lock` holds back at `mcp serve`, up for review on a board every process
//! that shares the lane store sees (the catalog's twin of [`super::parked`]): with the `local`
//! store, files in the manifest's private lane folder; with Redis, hashes every replica reads.
//! A gateway puts each tool it holds back there (its definition now, the one pinned, the
//! diff); `flux-tools approvals` lists them, and `flux-tools approve tool:NAME@HASH` (or
//! `deny`), from any terminal, records a decision on that exact definition — kept on the board,
//! so every replica, and one started later, finds it. A decision names the hash it was given
//! for: a definition that changed again meanwhile is not approved by it.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::parked::Decision;
use crate::lock::Pin;
use crate::run::store::{Board, BoardOf, FileBoard};

/// A tool held back, as the board lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct HeldTool {
    /// Its definition now (name, where it comes from, hash, text).
    pub now: Pin,
    /// The hash the lock pins under its name (`None`: it is new).
    pub was: Option<String>,
    /// What changed, as `flux-tools lock --check` says it.
    pub change: String,
    /// Unix seconds: since when it is held back.
    pub since: f64,
}

impl HeldTool {
    /// `tool:NAME@HASH`: what `approve` takes.
    pub(crate) fn handle(&self) -> String {
        format!("tool:{}@{}", self.now.name, short(&self.now.hash))
    }
}

/// A decision on one definition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Verdict {
    pub approved: bool,
    /// The definition decided on.
    pub pin: Pin,
    /// Who decided.
    pub by: String,
    pub at: f64,
}

/// The hash as `approvals` shows it and `approve` takes it: its first 16 hex digits.
pub(crate) fn short(hash: &str) -> &str {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    hex.get(..16).unwrap_or(hex)
}

/// The board's id of tool `name`'s entry (a file name, a hash field: digits and letters only).
fn entry_id(name: &str) -> String {
    format!("t{:016x}", crate::hash::fnv(name.as_bytes()))
}

/// The board's id of a decision on tool `name`'s definition `hash` (never an entry's: an entry
/// taken off leaves its decisions).
fn verdict_id(name: &str, hash: &str) -> String {
    format!("{}-{}", entry_id(name), short(hash))
}

/// The board of one manifest's held-back definitions.
#[derive(Clone)]
pub(crate) struct Review {
    board: Arc<dyn Board>,
}

impl Review {
    /// The board of `store` when it shares one (Redis), else the files of the manifest at
    /// canonical path `manifest`.
    pub(crate) fn of(manifest: &Path, store: Option<Arc<dyn Board>>) -> Result<Review, String> {
        let board = match store {
            Some(board) => board,
            None => Arc::new(FileBoard::for_manifest(manifest, BoardOf::Catalog)?),
        };
        Ok(Review { board })
    }

    /// List `held` (in place of what was listed under its name).
    pub(crate) async fn put(&self, held: &HeldTool) -> Result<(), String> {
        let text = serde_json::to_string(held).map_err(|e| e.to_string())?;
        let put = self.board.clone().put(entry_id(&held.now.name), text);
        put.await.map_err(|e| e.0)
    }

    /// Take tool `name` off the list (its decisions stay).
    pub(crate) async fn remove(&self, name: &str) -> Result<(), String> {
        let gone = self.board.clone().remove(entry_id(name));
        gone.await.map_err(|e| e.0)
    }

    /// Every tool held back, by name.
    pub(crate) async fn list(&self) -> Result<Vec<HeldTool>, String> {
        let texts = self.board.clone().entries().await.map_err(|e| e.0)?;
        let mut held: Vec<HeldTool> = (texts.iter())
            .filter_map(|t| serde_json::from_str(t).ok())
            .collect();
        held.sort_by(|a, b| a.now.name.cmp(&b.now.name));
        Ok(held)
    }

    /// Every decision recorded.
    pub(crate) async fn verdicts(&self) -> Result<Vec<Verdict>, String> {
        let answers = self.board.clone().answers().await.map_err(|e| e.0)?;
        Ok((answers.iter())
            .filter(|(id, _)| id.contains('-'))
            .filter_map(|(_, text)| serde_json::from_str(text).ok())
            .collect())
    }

    /// Decide on `handle` (`tool:NAME@HASH`, the hash as listed or whole) for `by`: the listed
    /// definition it names. A name not listed, or a hash that is not its definition's now, is
    /// refused.
    pub(crate) async fn decide(
        &self,
        handle: &str,
        d: Decision,
        by: &str,
    ) -> Result<HeldTool, String> {
        let rest = handle.strip_prefix("tool:").unwrap_or(handle);
        let Some((name, hash)) = rest.rsplit_once('@') else {
            return Err(format!(
                "`{handle}` names no definition\nhint: write tool:NAME@HASH, as `flux-tools approvals` lists it"
            ));
        };
        let listed = self.list().await?;
        let Some(held) = listed.into_iter().find(|h| h.now.name == name) else {
            return Err(format!(
                "no tool `{name}` is held back for review\nhint: `flux-tools approvals` lists those that are"
            ));
        };
        let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
        let whole = held
            .now
            .hash
            .strip_prefix("sha256:")
            .unwrap_or(&held.now.hash);
        if hash.len() < 16 || !whole.starts_with(hash) {
            return Err(format!(
                "`{handle}` is not the definition of `{name}` held back now ({})\nhint: review it again with `flux-tools approvals`: it changed since",
                held.handle()
            ));
        }
        let verdict = Verdict {
            approved: d == Decision::Approve,
            pin: held.now.clone(),
            by: by.to_string(),
            at: super::parked::unix_now(),
        };
        let text = serde_json::to_string(&verdict).map_err(|e| e.to_string())?;
        let id = verdict_id(name, &held.now.hash);
        self.board
            .clone()
            .set_answer(id, text)
            .await
            .map_err(|e| e.0)?;
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(description: &str) -> Pin {
        let def = serde_json::json!({"name": "send", "description": description});
        Pin::new(crate::lock::Kind::Tool, "send", "mcp:s".into(), &def)
    }

    #[tokio::test]
    async fn a_decision_names_one_definition_and_outlives_the_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let board: Arc<dyn Board> = Arc::new(FileBoard::new(dir.path().join("c")).expect("board"));
        let review = Review::of(dir.path(), Some(board)).expect("review");
        let held = HeldTool {
            now: pin("Send."),
            was: None,
            change: "new".into(),
            since: 0.0,
        };
        review.put(&held).await.expect("put");
        let other = pin("Send!").hash;
        let wrong = format!("tool:send@{}", short(&other));
        assert!(review
            .decide(&wrong, Decision::Approve, "me")
            .await
            .is_err());
        assert!(review
            .decide("tool:nope@0123456789abcdef", Decision::Approve, "me")
            .await
            .is_err());
        assert!(review
            .decide("tool:send@0123", Decision::Approve, "me")
            .await
            .is_err());
        let got = review.decide(&held.handle(), Decision::Approve, "me").await;
        assert_eq!(got.expect("approved"), held);
        review.remove("send").await.expect("remove");
        assert!(review.list().await.expect("list").is_empty());
        let verdicts = review.verdicts().await.expect("verdicts");
        assert_eq!(verdicts.len(), 1);
        assert!(verdicts[0].approved && verdicts[0].pin == held.now && verdicts[0].by == "me");
    }
}
