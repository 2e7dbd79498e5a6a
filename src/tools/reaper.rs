//! What a process started dies with it, even under `kill -9`: a watchdog — this binary again,
//! `flux-tools __reaper`, in a process group of its own so no terminal signal reaches it —
//! holds the list of the process groups of every tool program, hook and upstream server
//! (`groups.rs`: memory both processes map, so a program's start and end cost one atomic
//! store each and no wake-up; past its 1,024 slots, `+PGID`/`-PGID` lines on the pipe), and
//! waits on a pipe whose only writer is this process. When this process is gone, however it
//! went, the pipe ends and the watchdog kills every group still listed — and, for a moment
//! after, any a program starting just then lists for itself (in its child, before `execve`) —
//! then exits. So a lane's permits (file locks and leases that lapse with the process) are
//! never freed while the work they bounded still runs.
//!
//! A permit must not outlive the work either way: the local store's slot files are listed
//! here while held ([`hold`]), and every program started inherits them ([`inherit_held`], in
//! the child before `execve`), so a dead process's permit is freed by the kernel only when its
//! last program is gone — the watchdog's kill, not the death itself, hands it on.
//!
//! Off until [`start`] (`mcp serve` starts it) or, after [`arm`] (every face that runs tools),
//! until the first program starts: then two small writes a program.

use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;

/// The argument that makes the binary the watchdog.
pub(crate) const ARG: &str = "__reaper";

static ON: AtomicBool = AtomicBool::new(false);
static ARMED: AtomicBool = AtomicBool::new(false);
static PIPE: Mutex<Option<ChildStdin>> = Mutex::new(None);
/// The list shared with the watchdog, once it runs.
static GROUPS: std::sync::OnceLock<super::groups::Groups> = std::sync::OnceLock::new();
/// Why the watchdog could not start, once it was asked to.
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// How many permit descriptors are handed to programs at once; more are held as before (the
/// kernel frees them when this process dies).
const HELD_MAX: usize = 256;
/// Descriptors of permits held now (`-1`: a free entry). Read in a child between `clone` and
/// `execve`, so atomics only: no lock, no allocation.
static HELD: [AtomicI32; HELD_MAX] = [const { AtomicI32::new(-1) }; HELD_MAX];

/// From now on the first program started starts the watchdog (the faces that run tools).
pub(crate) fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// Why the watchdog asked for could not start (the face says so): tools may then outlive a
/// `kill -9` of this process.
pub(crate) fn failure() -> Option<String> {
    FAILED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A permit's descriptor is held: programs started from now on inherit it. `false`: the list
/// is full, and this permit is freed with this process as before.
pub(crate) fn hold(fd: i32) -> bool {
    HELD.iter().any(|h| {
        h.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })
}

/// The permit's descriptor is given back (before it is unlocked and closed).
pub(crate) fn let_go(fd: i32) {
    for h in &HELD {
        if h.compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

/// In a child about to `execve`: keep every held permit's descriptor open across it.
/// Async-signal-safe: atomic loads and `fcntl`.
pub(crate) fn inherit_held() {
    for h in &HELD {
        let fd = h.load(Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: fcntl(F_SETFD) on a descriptor this process holds open (listed before
            // it is closed); a failure only leaves it close-on-exec.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
        }
    }
}

/// Start the watchdog for this process (once). `Err`: it could not be started.
pub(crate) fn start() -> std::io::Result<()> {
    let mut pipe = PIPE.lock().unwrap_or_else(|e| e.into_inner());
    if pipe.is_some() {
        return Ok(());
    }
    let (groups, file) = super::groups::Groups::create()?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(file))
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn()?;
    let _ = GROUPS.set(groups);
    *pipe = child.stdin;
    ON.store(pipe.is_some(), Ordering::SeqCst);
    // The watchdog outlives us on purpose; nobody waits for it here.
    Ok(())
}

/// Armed and not started yet: start the watchdog now, before a program it must watch starts.
/// `false`: there is no watchdog.
pub(crate) fn ready() -> bool {
    if ON.load(Ordering::Relaxed) {
        return true;
    }
    if !ARMED.load(Ordering::SeqCst) {
        return false;
    }
    // Under `start`'s lock: a second thread here waits for the first one's watchdog.
    if let Err(e) = start() {
        ARMED.store(false, Ordering::SeqCst);
        *FAILED.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }
    ON.load(Ordering::SeqCst)
}

fn tell(line: String) {
    if !ready() {
        return;
    }
    let mut pipe = PIPE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pipe.as_mut() {
        let _ = p.write_all(line.as_bytes());
    }
}

/// In a program's child before `execve` (it shares this process's memory): list its own
/// process group, so that a `kill -9` of this process the instant after the program starts
/// still takes it — the parent's [`watch`] then finds it listed. Async-signal-safe: an atomic
/// load, `getpid` and atomic stores; a full list is left to the parent's pipe line.
pub(crate) fn watch_in_child() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    if let Some(g) = GROUPS.get() {
        // SAFETY: getpid has no failure mode.
        g.insert(unsafe { libc::getpid() });
    }
}

/// Process group `pgid` started: kill it if this process dies first.
pub(crate) fn watch(pgid: i32) {
    if pgid <= 0 || !ready() {
        return;
    }
    let groups = GROUPS.get();
    if groups.is_some_and(|g| g.contains(pgid)) {
        return;
    }
    if !groups.is_some_and(|g| g.insert(pgid)) {
        tell(format!("+{pgid}\n"));
    }
}

/// Process group `pgid` is gone (killed, its leader reaped): nothing to kill any more.
pub(crate) fn forget(pgid: i32) {
    if pgid <= 0 || !ON.load(Ordering::Relaxed) {
        return;
    }
    if !GROUPS.get().is_some_and(|g| g.remove(pgid)) {
        tell(format!("-{pgid}\n"));
    }
}

/// The watchdog itself: follow the list on stdin until it ends, then kill what is listed.
pub(crate) fn watchdog() -> u8 {
    let mut groups = std::collections::HashSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, n) = line.split_at(line.len().min(1));
        let Ok(pgid) = n.parse::<i32>() else { continue };
        match sign {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    // The list in shared memory (the watchdog's stdout), read now that its writer is gone.
    let stdout = std::mem::ManuallyDrop::new(
        // SAFETY: descriptor 1 is this process's; ManuallyDrop leaves it open.
        unsafe { std::fs::File::from_raw_fd(1) },
    );
    let shared = super::groups::Groups::open(&stdout);
    if let Some(s) = &shared {
        groups.extend(s.listed());
    }
    kill_all(&groups);
    // A program whose parent died while starting it lists itself a moment later (in its
    // child, before `execve`): look again a few times, and kill only what is new.
    for pause in LATE_LOOKS {
        std::thread::sleep(pause);
        let late: Vec<i32> = shared
            .iter()
            .flat_map(|s| s.listed())
            .filter(|g| !groups.contains(g))
            .collect();
        kill_all(&late);
        groups.extend(late);
    }
    0
}

/// When the watchdog looks at the list again after its first kill.
const LATE_LOOKS: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(5),
    std::time::Duration::from_millis(20),
    std::time::Duration::from_millis(100),
];

/// SIGKILL to each process group of `groups`.
fn kill_all<'a>(groups: impl IntoIterator<Item = &'a i32>) {
    for &g in groups {
        if g > 1 {
            // SAFETY: kill(2) of a process group our parent started and never said was gone.
            unsafe {
                libc::kill(-g, libc::SIGKILL);
            }
        }
    }
}
