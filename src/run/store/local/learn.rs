//! A learned lane (`concurrency = "auto"`) shared by the processes of one machine: its state
//! (the law, the window gathering, when it began, how long it must be — [`Shared`]) is a
//! JSON file, `learn`, in the lane's folder. Each process hands over what its calls saw every
//! [`EXCHANGE`](crate::run::store::learn::EXCHANGE) while it uses the lane, under the file's
//! `flock` (on a blocking thread): merged, judged when due, written back whole.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

use super::{flock, open_rw, unix_now};
use crate::manifest::AutoLimit;
use crate::run::store::learn::{Judge, Move, Shared, Window};
use crate::run::store::{BoxFuture, LaneError};

/// Judges a learned lane's windows in the file at its path.
pub(super) struct FileJudge(pub PathBuf);

impl Judge for FileJudge {
    fn exchange(
        &self,
        (mine, mine_limit): (Window, u32),
        bounds: AutoLimit,
    ) -> BoxFuture<'static, Result<(u32, Option<Move>), LaneError>> {
        let path = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let file = open_rw(&path)?;
                if !flock(&file, libc::LOCK_EX) {
                    return Err(LaneError(format!("cannot lock {}", path.display())));
                }
                let done = exchange(&file, (&mine, mine_limit), bounds);
                flock(&file, libc::LOCK_UN);
                done.map_err(|e| LaneError(format!("{}: {e}", path.display())))
            })
            .await
            .map_err(|e| LaneError(format!("learning the lane's limit: {e}")))?
        })
    }
}

/// Under the lock: read the state, merge `mine`, judge when due, write it back.
fn exchange(
    mut file: &File,
    (mine, mine_limit): (&Window, u32),
    bounds: AutoLimit,
) -> std::io::Result<(u32, Option<Move>)> {
    let now_ms = unix_now() * 1000.0;
    let mut text = String::new();
    file.rewind()?;
    file.read_to_string(&mut text)?;
    let mut state = serde_json::from_str::<Shared>(&text).unwrap_or(Shared::new(bounds, now_ms));
    // Answers gathered under another limit than the lane's say nothing of it.
    if state.law.limit() != mine_limit {
        return Ok((state.law.limit(), None));
    }
    let moved = state.exchange(mine, now_ms, bounds);
    let out = serde_json::to_string(&state).unwrap_or_default();
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(out.as_bytes())?;
    Ok((state.law.limit(), moved))
}
