//! A backend's read/write order across the processes of one machine: the folder
//! `backends/NAME-HASH/` beside the lanes, with a `gate` and a `lock` file. A call takes the
//! gate (exclusive), then the lock — shared for a read or a concurrent write (writes that
//! commute overlap each other; across processes they may overlap reads too), exclusive for a
//! plain write — then lets the gate go. The
//! one holding the gate is the next in line, so a call that comes later queues behind it at
//! the gate instead of slipping past it to the lock: a write waits for the reads and the write
//! before it, a read for the write before it, and reads overlap. The kernel drops a dead
//! process's locks at once. Waits happen on a blocking thread, never a runtime thread.

use std::fs::File;
use std::path::Path;

use super::{flock, lane_folder, open_rw};
use crate::plan::Claim;
use crate::run::lanes::LaneError;

/// Hold `backend` as `claim`; the returned file holds the lock until dropped.
pub(super) async fn hold(root: &Path, backend: &str, claim: Claim) -> Result<File, LaneError> {
    let dir = lane_folder(&root.join("backends"), backend);
    super::private_dir(&dir)?;
    let gate = open_rw(&dir.join("gate"))?;
    let lock = open_rw(&dir.join("lock"))?;
    let mode = match claim {
        Claim::Read | Claim::ConcurrentWrite => libc::LOCK_SH,
        Claim::Write => libc::LOCK_EX,
    };
    // Nobody at the gate and the lock free in this mode: no thread needed.
    if flock(&gate, libc::LOCK_EX | libc::LOCK_NB) {
        let free = flock(&lock, mode | libc::LOCK_NB);
        if free {
            flock(&gate, libc::LOCK_UN);
            return Ok(lock);
        }
        return wait(gate, lock, mode, true).await;
    }
    wait(gate, lock, mode, false).await
}

/// On a blocking thread: take the gate (unless held already), wait for the lock, let the gate go.
async fn wait(gate: File, lock: File, mode: i32, gated: bool) -> Result<File, LaneError> {
    let failed = || LaneError(format!("flock failed: {}", std::io::Error::last_os_error()));
    tokio::task::spawn_blocking(move || {
        if !gated && !flock(&gate, libc::LOCK_EX) {
            return Err(failed());
        }
        let got = flock(&lock, mode);
        flock(&gate, libc::LOCK_UN);
        if got {
            Ok(lock)
        } else {
            Err(failed())
        }
    })
    .await
    .map_err(|e| LaneError(format!("backend lock: {e}")))?
}
