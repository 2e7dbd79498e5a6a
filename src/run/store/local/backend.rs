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
//! ([`Backends`]): a read that finds the gate free (and no write of this process waiting) joins
//! that hold — two `flock`s on files kept open, where taking its own would cost a `mkdir`, two
//! `open`s and five locks. One that finds someone at the gate queues there as before, so a
//! write waiting here or in another process is never overtaken. A hold whose last read ended
//! is kept [`LINGER`] longer for the next read, so reads that come one after another share
//! one lock instead of taking and leaving it each; a task gives it up then, or at once when a
//! write wants the backend (one of this process, or one the next read finds at the gate).
//!
//! A write announces itself in the backend's `writers` word ([`Word`]) before it queues, so a
//! read of a process that holds the backend already joins with no system call while the word
//! reads zero, and looks at the gate as above only when some write is about.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::word::{Announced, Word};
use super::{flock, lane_folder, open_rw};
use crate::plan::Claim;
use crate::run::store::LaneError;

/// How long a shared hold outlives its last read, for the next one.
const LINGER: Duration = Duration::from_millis(1);

/// This process's shared holds, by backend: the gate and the lock files kept open.
#[derive(Default)]
pub(super) struct Backends {
    held: Mutex<HashMap<String, Arc<Cell>>>,
    /// A task is due to give up lingering holds.
    reaping: std::sync::atomic::AtomicBool,
}

/// One backend's shared hold.
type Cell = Mutex<Shared>;

pub(super) struct Shared {
    gate: File,
    lock: File,
    /// Writes announced on the backend, by every process.
    writers: Arc<Word>,
    /// Reads of this process holding the backend now.
    readers: usize,
    /// Writes of this process waiting for it.
    writes: usize,
    /// The lock is held shared (by `readers`, or lingering after the last of them).
    locked: bool,
    /// When the last read left (`readers` == 0 while `locked`).
    idle: Instant,
}

impl Shared {
    fn unlock(&mut self) {
        if self.locked {
            flock(&self.lock, libc::LOCK_UN);
            self.locked = false;
        }
    }
}

fn lock(cell: &Cell) -> std::sync::MutexGuard<'_, Shared> {
    // Every update is one step: the state stays consistent if a holder panicked.
    cell.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hold of a backend: a lock of its own, or a place in the process's shared hold.
pub(super) enum Held {
    /// Its own open lock file (closing it lets the lock go), and a write's announcement.
    Own(
        #[allow(dead_code)] File,
        #[allow(dead_code)] Option<Announced>,
    ),
    Joined(Arc<Backends>, Arc<Cell>),
}

impl Drop for Held {
    fn drop(&mut self) {
        let Held::Joined(backends, cell) = self else {
            return;
        };
        let linger = {
            let mut s = lock(cell);
            s.readers = s.readers.saturating_sub(1);
            if s.readers > 0 {
                return;
            }
            if s.writes > 0 {
                return s.unlock();
            }
            s.idle = Instant::now();
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => Some(rt),
                Err(_) => {
                    s.unlock();
                    None
                }
            }
        };
        if let Some(rt) = linger {
            backends.clone().reap_later(&rt);
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
        if let Some(joined) = self.try_join(root, backend, claim)? {
            return Ok(joined);
        }
        let write = claim == Claim::Write;
        let announced = match write {
            true => Some(lock(&*self.cell(root, backend)?).writers.announce()),
            false => None,
        };
        self.writing(backend, write, 1);
        let got = hold(root, backend, claim).await;
        self.writing(backend, write, -1);
        Ok(Held::Own(got?, announced))
    }

    /// A read's place in the process's shared hold of `backend`, at once, when it may join
    /// (`None`: it queues as a call of its own, [`hold`](Self::hold)).
    pub(super) fn try_join(
        self: &Arc<Self>,
        root: &Path,
        backend: &str,
        claim: Claim,
    ) -> Result<Option<Held>, LaneError> {
        if claim == Claim::Write {
            return Ok(None);
        }
        let cell = self.cell(root, backend)?;
        let joined = join(&mut lock(&cell));
        Ok(joined.then(|| Held::Joined(self.clone(), cell)))
    }

    /// The shared hold of `backend`, its files opened the first time.
    fn cell(&self, root: &Path, backend: &str) -> Result<Arc<Cell>, LaneError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = held.get(backend) {
            return Ok(c.clone());
        }
        let dir = lane_folder(&root.join("backends"), backend);
        super::private_dir(&dir)?;
        let (gate, lock) = (open_rw(&dir.join("gate"))?, open_rw(&dir.join("lock"))?);
        let writers = Arc::new(Word::open(&dir.join("writers"))?);
        let now = Instant::now();
        let cell = Arc::new(Mutex::new(Shared {
            gate,
            lock,
            writers,
            readers: 0,
            writes: 0,
            locked: false,
            idle: now,
        }));
        held.insert(backend.to_string(), cell.clone());
        Ok(cell)
    }

    /// A write of this process wants `backend` (`by` 1) or has it (-1): while one waits, a
    /// hold whose reads have all left is given up at once rather than lingering.
    fn writing(&self, backend: &str, write: bool, by: isize) {
        let cell = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.get(backend).cloned()
        };
        if let Some(cell) = cell {
            let mut s = lock(&cell);
            if write {
                s.writes = s.writes.saturating_add_signed(by);
            }
            if s.readers == 0 {
                s.unlock();
            }
        }
    }

    /// Give up, after [`LINGER`], the holds whose last read has left by then (one task for
    /// all of them, running while any lingers).
    fn reap_later(self: Arc<Self>, rt: &tokio::runtime::Handle) {
        use std::sync::atomic::Ordering;
        if self.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        rt.spawn(async move {
            loop {
                tokio::time::sleep(LINGER).await;
                let cells: Vec<Arc<Cell>> = {
                    let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                    held.values().cloned().collect()
                };
                let now = Instant::now();
                let mut lingering = false;
                for cell in &cells {
                    let mut s = lock(cell);
                    if s.readers > 0 || !s.locked {
                        continue;
                    }
                    if now.duration_since(s.idle) >= LINGER {
                        s.unlock();
                    } else {
                        lingering = true;
                    }
                }
                if !lingering {
                    self.reaping.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }
}

/// Join (or begin) a shared hold when nobody waits at its gate and no other process writes
/// to the backend: `false`, queue as a call of its own.
fn join(s: &mut Shared) -> bool {
    if s.writes > 0 {
        // A write of this process waits: this read comes after it.
        return false;
    }
    if s.locked && s.writers.get() == 0 {
        // Held here, and no write announced anywhere: nobody can be waiting at the gate.
        s.readers += 1;
        return true;
    }
    if !flock(&s.gate, libc::LOCK_EX | libc::LOCK_NB) {
        // Someone is next in line: a hold nobody of ours uses lets them in.
        if s.readers == 0 {
            s.unlock();
        }
        return false;
    }
    if !s.locked {
        s.locked = flock(&s.lock, libc::LOCK_SH | libc::LOCK_NB);
    }
    flock(&s.gate, libc::LOCK_UN);
    if s.locked {
        s.readers += 1;
    }
    s.locked
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

    /// The gateway's case: sessions of one process read and write one backend.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_never_overtakes_a_write_of_its_own_process_waiting_for_earlier_reads() {
        let root = tempfile::tempdir().expect("a folder");
        let a = Arc::new(Backends::default());
        let r1 = a.hold(root.path(), "db", Claim::Read).await.expect("r1");
        let (a2, path) = (a.clone(), root.path().to_path_buf());
        let w = tokio::spawn(async move { a2.hold(&path, "db", Claim::Write).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!w.is_finished(), "the write waits for the read before it");
        let (a3, path) = (a.clone(), root.path().to_path_buf());
        let r2 = tokio::spawn(async move { a3.hold(&path, "db", Claim::Read).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!r2.is_finished(), "the later read waits for the write");
        drop(r1);
        let w = w.await.expect("task").expect("the write");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !r2.is_finished(),
            "the later read waits for the write to end"
        );
        drop(w);
        r2.await.expect("task").expect("r2");
    }

    /// A write waiting in another process is announced in the shared word, so reads of a
    /// process holding the backend stop joining; a write given up takes that back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_given_up_elsewhere_lets_reads_join_again_with_no_gate_look() {
        let root = tempfile::tempdir().expect("a folder");
        let (a, b) = (Arc::new(Backends::default()), Arc::new(Backends::default()));
        let r1 = a.hold(root.path(), "db", Claim::Read).await.expect("r1");
        let (b2, path) = (b.clone(), root.path().to_path_buf());
        let w = tokio::spawn(async move { b2.hold(&path, "db", Claim::Write).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let word = lock(&a.cell(root.path(), "db").expect("cell"))
            .writers
            .clone();
        assert_eq!(word.get(), 1, "the waiting write is announced");
        let r2 = a.try_join(root.path(), "db", Claim::Read).expect("look");
        assert!(r2.is_none(), "a read does not join past an announced write");
        w.abort();
        let _ = w.await;
        // The aborted wait's blocking thread still holds the gate until it gets the lock;
        // the announcement is gone at once.
        assert_eq!(word.get(), 0, "the write given up is no longer announced");
        let r3 = a.try_join(root.path(), "db", Claim::Read).expect("look");
        assert!(matches!(r3, Some(Held::Joined(..))), "reads join again");
        drop((r1, r3));
    }

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
        // The hold lingers after its last read, then lets a write elsewhere in by itself…
        drop(r3);
        let w2 = tokio::time::timeout(
            Duration::from_secs(5),
            b.hold(root.path(), "db", Claim::Write),
        );
        let w2 = w2.await.expect("a lingering hold is given up").expect("w2");
        drop(w2);
        // …and a write of this process at once.
        let r4 = a.hold(root.path(), "db", Claim::Read).await.expect("r4");
        drop(r4);
        let w3 = tokio::time::timeout(
            Duration::from_millis(500),
            a.hold(root.path(), "db", Claim::Write),
        );
        assert!(matches!(w3.await, Ok(Ok(Held::Own(..)))));
    }
}
