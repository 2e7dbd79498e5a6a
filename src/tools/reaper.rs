//! What a process started dies with it, even under `kill -9`: a watchdog — this binary again,
//! `flux-tools __reaper`, in a process group of its own so no terminal signal reaches it —
//! reads the process groups of every tool program, hook and upstream server as they start
//! (`+PGID`) and end (`-PGID`) on a pipe whose only writer is this process. When this process
//! is gone, however it went, the pipe ends and the watchdog kills every group still listed,
//! then exits. So a lane's permits (file locks and leases that lapse with the process) are
//! never freed while the work they bounded still runs.
//!
//! Off until [`start`] (`mcp serve` starts it): then two small writes a program.

use std::io::{BufRead, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The argument that makes the binary the watchdog.
pub(crate) const ARG: &str = "__reaper";

static ON: AtomicBool = AtomicBool::new(false);
static PIPE: Mutex<Option<ChildStdin>> = Mutex::new(None);

/// Start the watchdog for this process (once). `Err`: it could not be started.
pub(crate) fn start() -> std::io::Result<()> {
    let mut pipe = PIPE.lock().unwrap_or_else(|e| e.into_inner());
    if pipe.is_some() {
        return Ok(());
    }
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn()?;
    *pipe = child.stdin;
    ON.store(pipe.is_some(), Ordering::SeqCst);
    // The watchdog outlives us on purpose; nobody waits for it here.
    Ok(())
}

fn tell(line: String) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let mut pipe = PIPE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pipe.as_mut() {
        let _ = p.write_all(line.as_bytes());
    }
}

/// Process group `pgid` started: kill it if this process dies first.
pub(crate) fn watch(pgid: i32) {
    if pgid > 0 {
        tell(format!("+{pgid}\n"));
    }
}

/// Process group `pgid` is gone (killed, its leader reaped): nothing to kill any more.
pub(crate) fn forget(pgid: i32) {
    if pgid > 0 {
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
    for g in groups {
        if g > 1 {
            // SAFETY: kill(2) of a process group our parent started and never said was gone.
            unsafe {
                libc::kill(-g, libc::SIGKILL);
            }
        }
    }
    0
}
