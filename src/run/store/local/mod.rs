//! The `local` lane store (the default): tenant, tool and shared lanes held across every
//! `flux-tools` process on the machine that uses the same manifest.
//!
//! Each such lane is a folder under a per-user runtime directory (mode 0700), keyed by the
//! manifest's canonical path: `slot-0 … slot-N-1` files whose advisory `flock` is a permit, a
//! `gate` file, and a `rate` file holding the lane's token bucket. The kernel drops a dead
//! process's locks at once, so a crashed or SIGKILLed run frees its permits immediately.
//! Inside a process the in-memory fair semaphore (`fair.rs`) still queues calls — in call order
//! within a flow, round robin across sessions — so at most N of them look for a slot; across
//! processes the head waiter holds the gate while it waits, so newcomers queue behind it instead
//! of overtaking it, and processes take turns. `backend.rs` keeps a backend's read/write order
//! across processes (with `word.rs`, a counter mapped shared); `spend.rs` a tenant's window.
//! Waiting on the gate blocks a thread, not a core; waiting for a slot polls with a back-off
//! from 2 to 50 ms.
//! Per-run lanes (the turn, the batch's narrowed copies) and lanes borrowed from a parent run
//! (`FLUX_TOOLS_LEASE`) stay in memory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{
    Admission, Answer, BoxFuture, Flow, LaneError, LaneStore, Lease, MemoryLanes, RateSpec,
    TokenState,
};

mod backend;
mod board;
mod learn;
pub(crate) use board::FileBoard;
mod bell;
mod spend;
mod word;
use crate::events::LaneStats;
use crate::plan::LaneSpec;
use crate::run::store::{Backends, Connection, LaneFigures, Lanes, TenantSpend};

/// The per-user folder the local store keeps its lock files in.
pub fn runtime_dir() -> Result<PathBuf, LaneError> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let base = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("flux-tools"),
        _ => std::env::temp_dir().join(format!("flux-tools-{uid}")),
    };
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
    {
        return Err(LaneError(format!(
            "cannot create the lane folder {}: {e}",
            base.display()
        )));
    }
    let meta =
        std::fs::metadata(&base).map_err(|e| LaneError(format!("{}: {e}", base.display())))?;
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(LaneError(format!(
            "the lane folder {} must belong to you and be private (mode 0700)",
            base.display()
        )));
    }
    Ok(base)
}

fn lane_folder(root: &Path, name: &str) -> PathBuf {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    root.join(format!(
        "{clean}-{:08x}",
        crate::hash::fnv(name.as_bytes()) as u32
    ))
}

/// Make `dir` (and its parents) private to this user.
fn private_dir(dir: &Path) -> Result<(), LaneError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| LaneError(format!("cannot create {}: {e}", dir.display())))
}

/// `flock`, taken again when a signal interrupts the wait.
fn flock(file: &File, op: i32) -> bool {
    loop {
        // SAFETY: flock on a file descriptor we own; failure is reported by the return value.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return true;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

fn open_rw(path: &Path) -> Result<File, LaneError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| LaneError(format!("cannot open {}: {e}", path.display())))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Slot files held for one lease. Programs started while it is held inherit its descriptors
/// (`tools::reaper::hold`), so if this process dies the permit is freed when they are gone,
/// not before; given back here, each is unlocked outright (a program's copy of the descriptor
/// does not keep it). Dropping it also tells the lane which slot came free, where the next
/// search starts, and rings the lane's doorbell so a process waiting for a slot looks at once.
struct Slots {
    files: Vec<(u32, File)>,
    hint: Arc<AtomicU32>,
    bell: Arc<PathBuf>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        let Some((k, _)) = self.files.first() else {
            return;
        };
        self.hint.store(*k, Ordering::Relaxed);
        // Unlock first, then ring: the waiter must find the slot free.
        for (_, f) in self.files.drain(..) {
            crate::tools::reaper::let_go(f.as_raw_fd());
            flock(&f, libc::LOCK_UN);
        }
        bell::ring(&self.bell);
    }
}

/// A descriptor of a lane's gate: the lane's own, or a duplicate a blocking thread owns.
enum Gate<'a> {
    Here(&'a File),
    Owned(File),
}

impl Gate<'_> {
    fn file(&self) -> &File {
        match self {
            Gate::Here(f) => f,
            Gate::Owned(f) => f,
        }
    }
}

/// Unlocks the gate's flock when dropped (also when the waiting task was abandoned after the
/// blocking lock succeeded). Either descriptor unlocks it: they share one open file.
struct Unlock<'a>(Gate<'a>);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        flock(self.0.file(), libc::LOCK_UN);
    }
}

/// One lane shared through files. The gate and the rate file stay open for the run; slot
/// files are opened per lease (a lane of a thousand slots must not hold a thousand
/// descriptors), starting the search at the slot most recently given back.
struct FileLane {
    dir: PathBuf,
    slots: u32,
    rate: Option<RateSpec>,
    gate: File,
    /// Calls of this process take the gate one at a time (a flock on one shared descriptor
    /// does not exclude its own holders).
    gate_turn: tokio::sync::Mutex<()>,
    rate_file: std::sync::Mutex<File>,
    hint: Arc<AtomicU32>,
    /// The doorbell a freed slot rings, and this process's ear on it.
    bell_path: Arc<PathBuf>,
    bell: tokio::sync::Mutex<Option<bell::Bell>>,
    /// A learned lane's learner: only its first `limit()` slots are taken.
    learner: Option<Arc<crate::run::store::learn::Learner>>,
}

impl FileLane {
    fn open(dir: PathBuf, slots: u32, rate: Option<RateSpec>) -> Result<FileLane, LaneError> {
        Ok(FileLane {
            learner: None,
            gate: open_rw(&dir.join("gate"))?,
            rate_file: std::sync::Mutex::new(open_rw(&dir.join("rate"))?),
            slots,
            rate,
            gate_turn: tokio::sync::Mutex::new(()),
            hint: Arc::new(AtomicU32::new(0)),
            bell_path: Arc::new(dir.join("doorbell")),
            bell: tokio::sync::Mutex::new(None),
            dir,
        })
    }

    async fn take(&self, weight: u32) -> Result<Slots, LaneError> {
        let _turn = self.gate_turn.lock().await;
        let _gate = if flock(&self.gate, libc::LOCK_EX | libc::LOCK_NB) {
            Unlock(Gate::Here(&self.gate))
        } else {
            // Another process holds the gate: wait for it on a blocking thread, through a
            // duplicate of the descriptor (the same lock) that thread can own.
            let gate = self
                .gate
                .try_clone()
                .map_err(|e| LaneError(format!("lane gate: {e}")))?;
            let waiting = Unlock(Gate::Owned(gate));
            tokio::task::spawn_blocking(move || {
                if flock(waiting.0.file(), libc::LOCK_EX) {
                    Ok(waiting)
                } else {
                    Err(LaneError(format!(
                        "flock failed: {}",
                        std::io::Error::last_os_error()
                    )))
                }
            })
            .await
            .map_err(|e| LaneError(format!("lane gate: {e}")))??
        };
        // Slots taken so far: given back as they should be if this wait is abandoned.
        let mut held = Slots {
            files: Vec::with_capacity(weight as usize),
            hint: self.hint.clone(),
            bell: self.bell_path.clone(),
        };
        // Listen before looking: a slot freed between the look and the wait rings a bell
        // this process already hears.
        let mut bell = self.bell.lock().await;
        bell::listen(&mut bell, &self.bell_path);
        loop {
            // A learned lane uses the slots under its limit as it stands now.
            let slots = (self.learner.as_ref()).map_or(self.slots, |l| l.limit().min(self.slots));
            let start = self.hint.load(Ordering::Relaxed) % slots.max(1);
            for i in 0..slots {
                let k = (start + i) % slots;
                if held.files.len() as u32 >= weight {
                    break;
                }
                if held.files.iter().any(|(h, _)| *h == k) {
                    continue;
                }
                let f = open_rw(&self.dir.join(format!("slot-{k}")))?;
                if flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
                    crate::tools::reaper::hold(f.as_raw_fd());
                    held.files.push((k, f));
                }
            }
            if held.files.len() as u32 >= weight {
                return Ok(held);
            }
            bell::wait(&mut bell, &self.bell_path, bell::FALLBACK).await;
        }
    }

    /// Run `f` on the lane's token state under the `rate` file's lock. With `wait` false the
    /// lock is only tried: `Ok(None)` when another process holds it (the caller then waits on
    /// a blocking thread, never on a runtime thread).
    fn with_tokens<T>(
        &self,
        wait: bool,
        f: impl FnOnce(&mut TokenState, f64) -> T,
    ) -> Result<Option<T>, LaneError> {
        let mut file = self
            .rate_file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let file = &mut *file;
        file.rewind()
            .map_err(|e| LaneError(format!("{}: {e}", self.dir.display())))?;
        let op = if wait {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        if !flock(file, op) {
            let err = std::io::Error::last_os_error();
            if !wait && err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(LaneError(format!(
                "cannot lock the rate of {}: {err}",
                self.dir.display()
            )));
        }
        let now = unix_now();
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let nums: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let mut st = match nums.as_slice() {
            [tokens, at, paused] => TokenState {
                tokens: *tokens,
                at: *at,
                paused_until: *paused,
            },
            _ => TokenState::full(self.rate, now),
        };
        let before = (nums.len() == 3).then_some(st);
        let out = f(&mut st, now);
        // Unchanged (a lane without a rate that is not backing off): nothing to write.
        let written = if before == Some(st) {
            Ok(())
        } else {
            let line = format!("{} {} {}\n", st.tokens, st.at, st.paused_until);
            file.set_len(0)
                .and_then(|_| file.rewind())
                .and_then(|_| file.write_all(line.as_bytes()))
        };
        flock(file, libc::LOCK_UN);
        written.map_err(|e| {
            LaneError(format!(
                "cannot update the rate of {}: {e}",
                self.dir.display()
            ))
        })?;
        Ok(Some(out))
    }
}

/// Lanes shared by every process on this machine using the same manifest.
pub struct LocalLanes {
    mem: Arc<MemoryLanes>,
    files: Vec<Option<FileLane>>,
    /// This manifest's folder (lanes, and `keys/` for parallel_safe = false calls).
    root: PathBuf,
    /// This process's shared holds of backends, for every run it makes.
    backends: Arc<backend::Backends>,
}

impl LocalLanes {
    /// The file lanes of `specs` in `root`, beside `mem`.
    fn with(
        root: PathBuf,
        mem: MemoryLanes,
        specs: &[LaneSpec],
        backends: Arc<backend::Backends>,
    ) -> Result<LocalLanes, LaneError> {
        let mut files = Vec::with_capacity(specs.len());
        for s in specs {
            let shared =
                s.key.across_runs() && !s.borrowed && (s.limit.is_some() || s.rate.is_some());
            if !shared {
                files.push(None);
                continue;
            }
            let dir = lane_folder(&root, &s.name);
            private_dir(&dir)?;
            let mut lane = FileLane::open(dir, s.limit.unwrap_or(0), RateSpec::of(s))?;
            lane.learner = mem.learner(files.len());
            if let Some(l) = &lane.learner {
                let judge = learn::FileJudge(lane.dir.join("learn"));
                crate::run::store::learn::keep_exchanging(l, Arc::new(judge));
            }
            files.push(Some(lane));
        }
        Ok(LocalLanes {
            mem: Arc::new(mem),
            files,
            root,
            backends,
        })
    }
}

impl LocalLanes {
    /// `manifest`: the manifest's canonical path, which names the set of shared lanes.
    pub fn new(specs: &[LaneSpec], manifest: &Path) -> Result<LocalLanes, LaneError> {
        let root = runtime_dir()?.join(format!(
            "{:016x}",
            crate::hash::fnv(manifest.as_os_str().as_encoded_bytes())
        ));
        LocalLanes::with(
            root,
            MemoryLanes::sharing(specs, true),
            specs,
            Arc::default(),
        )
    }

    /// How many permits of `lane` other processes hold, found with non-blocking lock attempts.
    fn probe_elsewhere(&self, lane: usize) -> Option<u64> {
        let f = self.file(lane).filter(|f| f.slots > 0)?;
        if !self.mem.should_probe(lane) {
            return None;
        }
        // A slot we cannot lock is held by someone: by us, or by another run.
        let mut locked = 0u64;
        for k in 0..f.slots {
            let Ok(file) = open_rw(&f.dir.join(format!("slot-{k}"))) else {
                continue;
            };
            if flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                flock(&file, libc::LOCK_UN);
            } else {
                locked += 1;
            }
        }
        let n = locked.saturating_sub(self.mem.held_here(lane));
        self.mem.note_elsewhere(lane, n);
        Some(n)
    }

    fn file(&self, lane: usize) -> Option<&FileLane> {
        self.files.get(lane).and_then(Option::as_ref)
    }
}

impl Connection for LocalLanes {
    fn for_lanes(&self, specs: &[LaneSpec], flow: &Flow) -> Result<Arc<dyn LaneStore>, LaneError> {
        let mem = self.mem.renewed(specs, flow);
        let store = LocalLanes::with(self.root.clone(), mem, specs, self.backends.clone())?;
        Ok(Arc::new(store))
    }

    fn cache_store(&self) -> Arc<dyn crate::run::cache::CacheStore> {
        Arc::new(crate::run::cache::FileCache::new(&self.root))
    }

    fn ping(self: Arc<Self>) -> BoxFuture<'static, Result<(), LaneError>> {
        let found = std::fs::metadata(&self.root)
            .map(|_| ())
            .map_err(|e| LaneError(format!("the lane folder {}: {e}", self.root.display())));
        Box::pin(std::future::ready(found))
    }
}

impl crate::run::store::Heeds for LocalLanes {
    fn quota(self: Arc<Self>, lane: usize, remaining: u64, reset: Duration) {
        self.mem.heed(lane, remaining, reset);
        if remaining == 0 {
            self.pause_shared(lane, reset);
        }
    }

    fn observe(
        &self,
        lane: usize,
        sample: crate::run::store::Sample,
        sent: tokio::time::Instant,
    ) -> Option<crate::run::store::Move> {
        self.mem.observe(lane, sample, sent)
    }
}

impl Lanes for LocalLanes {
    fn try_acquire(&self, lane: usize, weight: u32) -> Option<Lease> {
        match self.file(lane) {
            Some(f) if f.slots > 0 => None,
            _ => self.mem.try_acquire(lane, weight),
        }
    }

    fn acquire(
        self: Arc<Self>,
        lane: usize,
        weight: u32,
        order: u64,
    ) -> BoxFuture<'static, Result<Lease, LaneError>> {
        Box::pin(async move {
            // In call order within this process, at most `limit` at a time…
            let lease = self.mem.clone().acquire(lane, weight, order).await?;
            // …then a slot shared with every other process.
            match self.file(lane) {
                Some(f) if f.slots > 0 => Ok(lease.with_shared(Box::new(f.take(weight).await?))),
                _ => Ok(lease),
            }
        })
    }

    fn admission(self: Arc<Self>, lane: usize) -> Answer<Result<Admission, LaneError>> {
        let Some(f) = self.file(lane) else {
            return Answer::Now(self.mem.admit(lane));
        };
        let rate = f.rate;
        match f.with_tokens(false, |st, now| st.admit(now, rate)) {
            Ok(Some(adm)) => Answer::Now(Ok(adm)),
            Err(e) => Answer::Now(Err(e)),
            // Another process is at the bucket: wait for it on a blocking thread.
            Ok(None) => Answer::Later(Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    let f = self
                        .file(lane)
                        .ok_or_else(|| LaneError("no such lane".into()))?;
                    f.with_tokens(true, |st, now| st.admit(now, rate))
                        .map(Option::unwrap_or_default)
                })
                .await
                .map_err(|e| LaneError(format!("rate lock: {e}")))?
            })),
        }
    }

    fn back_off(self: Arc<Self>, lane: usize, wait: Duration) {
        self.mem.pause(lane, wait);
        self.pause_shared(lane, wait);
    }

    fn record_wait(&self, lane: usize, wait: Duration, token: bool) {
        self.mem.record_wait(lane, wait, token);
    }
}

impl LocalLanes {
    /// Pause `lane` in its rate file for `wait`, for every process of the machine.
    fn pause_shared(self: Arc<Self>, lane: usize, wait: Duration) {
        let Some(f) = self.file(lane) else { return };
        let has_rate = f.rate.is_some();
        let pause = move |st: &mut TokenState, now: f64| st.back_off(now, wait, has_rate);
        if let Ok(Some(())) = f.with_tokens(false, pause) {
            return;
        }
        // Another process is at the bucket: record the pause from a blocking thread.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn_blocking(move || {
                if let Some(f) = self.file(lane) {
                    let _ = f.with_tokens(true, pause);
                }
            });
        }
    }
}

impl LaneFigures for LocalLanes {
    fn stats(&self) -> Vec<LaneStats> {
        self.mem.stats()
    }

    fn held_elsewhere(self: Arc<Self>, lane: usize) -> Answer<Option<u64>> {
        // Only non-blocking lock attempts: a quick probe, answered at once.
        Answer::Now(self.probe_elsewhere(lane))
    }

    fn occupancy(&self) -> Vec<super::Occupancy> {
        self.mem.occupancy_of(true)
    }
}

impl Backends for LocalLanes {
    fn orders_backends(&self) -> bool {
        true
    }

    fn try_backend(
        &self,
        backend: &str,
        claim: crate::plan::Claim,
    ) -> Option<Box<dyn Send + Sync>> {
        let joined = self.backends.try_join(&self.root, backend, claim).ok()??;
        Some(Box::new(joined))
    }

    fn backend(
        self: Arc<Self>,
        backend: String,
        claim: crate::plan::Claim,
    ) -> BoxFuture<'static, Result<Box<dyn Send + Sync>, LaneError>> {
        Box::pin(async move {
            let held = self.backends.hold(&self.root, &backend, claim).await?;
            Ok(Box::new(held) as Box<dyn Send + Sync>)
        })
    }

    fn exclusive(
        self: Arc<Self>,
        key: String,
    ) -> BoxFuture<'static, Result<Option<Box<dyn Send + Sync>>, LaneError>> {
        Box::pin(async move {
            let dir = self.root.join("keys");
            private_dir(&dir)?;
            let file = open_rw(&dir.join(crate::hash::fnv_hex(key.as_bytes())))?;
            if flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                return Ok(Some(Box::new(file) as Box<dyn Send + Sync>));
            }
            let file = tokio::task::spawn_blocking(move || {
                if flock(&file, libc::LOCK_EX) {
                    Ok(file)
                } else {
                    Err(LaneError(format!(
                        "flock failed: {}",
                        std::io::Error::last_os_error()
                    )))
                }
            })
            .await
            .map_err(|e| LaneError(format!("keyed lock: {e}")))??;
            Ok(Some(Box::new(file) as Box<dyn Send + Sync>))
        })
    }
}

impl TenantSpend for LocalLanes {
    fn charge(
        self: Arc<Self>,
        tenant: String,
        window: crate::manifest::TenantWindow,
        cost: f64,
    ) -> BoxFuture<'static, Result<super::Charge, LaneError>> {
        Box::pin(async move {
            let root = self.root.clone();
            tokio::task::spawn_blocking(move || spend::charge(&root, &tenant, &window, cost))
                .await
                .map_err(|e| LaneError(format!("tenant window: {e}")))?
        })
    }

    fn refund(self: Arc<Self>, tenant: String, id: String) {
        let root = self.root.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn_blocking(move || spend::refund(&root, &tenant, &id));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Two stores over the same manifest stand for two processes: their descriptors are
    //! distinct, so their flocks exclude each other exactly as separate processes' do.

    use super::*;
    use crate::plan::LaneKey;

    fn spec(limit: u32) -> LaneSpec {
        LaneSpec {
            auto: None,
            learned: None,
            key: LaneKey::Tool("t".into()),
            name: "tool:t".into(),
            limit: Some(limit),
            rate: None,
            burst: None,
            borrowed: false,
        }
    }

    fn manifest() -> PathBuf {
        std::env::temp_dir().join(format!(
            "flux-tools-local-test-{}-{}.toml",
            std::process::id(),
            fastrand::u64(..)
        ))
    }

    #[tokio::test]
    async fn a_slot_given_back_is_taken_by_the_other_process_and_never_twice() {
        let m = manifest();
        let a = Arc::new(LocalLanes::new(&[spec(1)], &m).unwrap());
        let b = Arc::new(LocalLanes::new(&[spec(1)], &m).unwrap());
        let held = a.clone().acquire(0, 1, 0).await.unwrap();
        // The one slot is A's: B waits (polling with its back-off) until A gives it back.
        let waiting =
            tokio::time::timeout(Duration::from_millis(150), b.clone().acquire(0, 1, 0)).await;
        assert!(waiting.is_err(), "B got a slot A holds");
        assert_eq!(b.clone().held_elsewhere(0).get().await, Some(1));
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(2), b.clone().acquire(0, 1, 0))
            .await
            .expect("B never got the slot A gave back")
            .unwrap();
        // Now A must wait in turn.
        let again =
            tokio::time::timeout(Duration::from_millis(150), a.clone().acquire(0, 1, 1)).await;
        assert!(again.is_err(), "A took a slot B holds");
        drop(got);
        tokio::time::timeout(Duration::from_secs(2), a.clone().acquire(0, 1, 1))
            .await
            .expect("A never got the slot back")
            .unwrap();
        let _ = std::fs::remove_dir_all(&a.root);
    }

    #[tokio::test]
    async fn one_process_fills_every_slot_and_a_back_off_is_seen_by_the_other() {
        let m = manifest();
        let a = Arc::new(LocalLanes::new(&[spec(3)], &m).unwrap());
        let b = Arc::new(LocalLanes::new(&[spec(3)], &m).unwrap());
        let mut leases = Vec::new();
        for i in 0..3 {
            leases.push(a.clone().acquire(0, 1, i).await.unwrap());
        }
        assert_eq!(b.clone().held_elsewhere(0).get().await, Some(3));
        let waiting =
            tokio::time::timeout(Duration::from_millis(150), b.clone().acquire(0, 1, 0)).await;
        assert!(waiting.is_err(), "B got a fourth slot of three");
        leases.pop();
        tokio::time::timeout(Duration::from_secs(2), b.clone().acquire(0, 1, 0))
            .await
            .expect("B never got the freed slot")
            .unwrap();
        // A 429 back-off noted by A pauses B's admissions too (the shared rate file).
        a.clone().back_off(0, Duration::from_secs(5));
        let adm = b.clone().admission(0).get().await.unwrap();
        assert!(
            adm.wait > Duration::from_secs(3),
            "B's wait: {:?}",
            adm.wait
        );
        let _ = std::fs::remove_dir_all(&a.root);
    }
}
