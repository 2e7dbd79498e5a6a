//! A backend's read/write order across the processes of one machine: the folder
//! `backends/NAME-HASH/` beside the lanes, with a `gate` and a `lock` file. A call takes the
//! gate (exclusive), then the lock — shared for a read or a concurrent write (writes that
//! commute overlap each other; across processes they may overlap reads too), exclusive for a
//! plain write — then lets the gate go. The
//! one holding the gate is the next in line, so a call that comes later queues behind it at
//! the gate instead of slipping past it to the lock: a write waits for the reads and the write
//! before it, a read for the write before it, and reads overlap. The kernel drops a dead
//! process's locks at once. Waits happen on a blocking thread, never a runtime thread.
//!
//! A process holds each backend shared through one lock file while any of its calls reads it
//! ([`Backends`]): a read that finds the gate free joins that hold — two `flock`s on files kept
//! open, where taking its own would cost a `mkdir`, two `open`s and five locks. One that finds
//! someone at the gate queues there as before, so a write waiting in another process is never
//! overtaken.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{flock, lane_folder, open_rw};
use crate::plan::Claim;
use crate::run::lanes::LaneError;

/// This process's shared holds, by backend: the gate and the lock files kept open, the lock
/// held shared while `readers` > 0.
#[derive(Default)]
pub(super) struct Backends {
    held: Mutex<HashMap<String, Shared>>,
}

struct Shared {
    gate: File,
    lock: File,
    readers: usize,
}

/// A hold of a backend: a lock of its own, or a place in the process's shared hold.
pub(super) enum Held {
    /// Its own open lock file: closing it lets the lock go.
    Own(#[allow(dead_code)] File),
    Joined(Arc<Backends>, String),
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Held::Joined(backends, name) = self {
            let mut held = backends.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = held.get_mut(name.as_str()) {
                s.readers = s.readers.saturating_sub(1);
                if s.readers == 0 {
                    flock(&s.lock, libc::LOCK_UN);
                }
            }
        }
    }
}

impl Backends {
    /// Hold `backend` as `claim` (files under `root`) until the returned hold drops.
    pub(super) async fn hold(
        self: &Arc<Self>,
        root: &Path,
        backend: &str,
        claim: Claim,
    ) -> Result<Held, LaneError> {
        if claim != Claim::Write && self.join(root, backend)? {
            return Ok(Held::Joined(self.clone(), backend.to_string()));
        }
        Ok(Held::Own(hold(root, backend, claim).await?))
    }

    /// Join (or begin) this process's shared hold of `backend` when nobody waits at its gate
    /// and no other process writes to it; `false`: queue as a call of its own.
    fn join(&self, root: &Path, backend: &str) -> Result<bool, LaneError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !held.contains_key(backend) {
            let dir = lane_folder(&root.join("backends"), backend);
            super::private_dir(&dir)?;
            let (gate, lock) = (open_rw(&dir.join("gate"))?, open_rw(&dir.join("lock"))?);
            let s = Shared {
                gate,
                lock,
                readers: 0,
            };
            held.insert(backend.to_string(), s);
        }
        let Some(s) = held.get_mut(backend) else {
            return Ok(false);
        };
        if !flock(&s.gate, libc::LOCK_EX | libc::LOCK_NB) {
            return Ok(false);
        }
        let holds = s.readers > 0 || flock(&s.lock, libc::LOCK_SH | libc::LOCK_NB);
        flock(&s.gate, libc::LOCK_UN);
        if holds {
            s.readers += 1;
        }
        Ok(holds)
    }
}

/// Hold `backend` as `claim`; the returned file holds the lock until dropped.
async fn hold(root: &Path, backend: &str, claim: Claim) -> Result<File, LaneError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Two `Backends` are two processes: `flock` locks belong to open files, not to processes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_join_one_hold_but_never_overtake_a_write_waiting_elsewhere() {
        let root = tempfile::tempdir().expect("a folder");
        let (a, b) = (Arc::new(Backends::default()), Arc::new(Backends::default()));
        let r1 = a.hold(root.path(), "db", Claim::Read).await.expect("r1");
        let r1b = a.hold(root.path(), "db", Claim::Read).await.expect("r1b");
        assert!(matches!((&r1, &r1b), (Held::Joined(..), Held::Joined(..))));
        // Another process's write waits for the reads, at the gate.
        let (b2, path) = (b.clone(), root.path().to_path_buf());
        let w = tokio::spawn(async move { b2.hold(&path, "db", Claim::Write).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!w.is_finished(), "the write waits for the reads");
        // A later read here queues behind that write instead of joining the hold.
        let (a2, path) = (a.clone(), root.path().to_path_buf());
        let r2 = tokio::spawn(async move { a2.hold(&path, "db", Claim::Read).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !r2.is_finished(),
            "the read must not overtake the waiting write"
        );
        drop((r1, r1b));
        let w = w.await.expect("task").expect("the write");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!r2.is_finished(), "the read waits for the write to end");
        drop(w);
        let r2 = r2.await.expect("task").expect("r2");
        drop(r2);
        // With nobody else about, a read joins again.
        let r3 = a.hold(root.path(), "db", Claim::Read).await.expect("r3");
        assert!(matches!(r3, Held::Joined(..)));
    }
}
