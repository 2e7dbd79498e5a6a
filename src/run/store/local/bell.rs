//! A lane's doorbell: a FIFO (`doorbell`, mode 0600) in the lane's folder. A process that gives
//! a slot back writes one byte to it; the process whose call waits at the head of the lane
//! (holding the gate) waits for the FIFO to become readable — a kernel wake-up, not a poll —
//! then drains it and looks for a slot again. Every process keeps the FIFO open read-write (so
//! it never reads end-of-file and a ring always has a reader to land in); a ring nobody is
//! waiting for stays in the pipe, so at worst the next wait returns at once. If the doorbell is
//! removed or replaced, rings are lost until a waiter notices (it checks the path at every
//! wait and makes it again): the wait then ends after [`FALLBACK`] anyway, so a lost ring costs
//! one fallback period, never a hang.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The longest a waiter waits for a ring before looking again.
pub(super) const FALLBACK: Duration = Duration::from_millis(100);

/// This process's end of a doorbell: the FIFO open read-write, registered with tokio, and
/// the inode it was opened at.
pub(super) struct Bell {
    fd: AsyncFd<File>,
    inode: u64,
}

/// Make the doorbell if it is missing (a FIFO, mode 0600).
fn make(path: &Path) {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: mkfifo with a valid NUL-terminated path; an existing file is left as it is.
    unsafe {
        libc::mkfifo(c.as_ptr(), 0o600);
    }
}

/// Open the doorbell at `path` (making it if missing). `None` when it is not a FIFO or
/// cannot be opened: the waiter then falls back to looking every [`FALLBACK`].
fn open(path: &Path) -> Option<Bell> {
    make(path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_fifo() {
        return None;
    }
    // SAFETY: the `File` owns its descriptor and moves into the `AsyncFd`, which keeps it open
    // (and the same) until the `AsyncFd` is dropped.
    let fd = unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) }.ok()?;
    Some(Bell {
        inode: meta.ino(),
        fd,
    })
}

/// Be listening on the doorbell at `path`: open it if this process is not, or if the path
/// now names another file (it was removed, or replaced).
pub(super) fn listen(bell: &mut Option<Bell>, path: &Path) {
    let current = std::fs::metadata(path).ok().map(|m| m.ino());
    if bell.as_ref().is_some_and(|b| Some(b.inode) == current) {
        return;
    }
    *bell = open(path);
}

/// Wait until the doorbell rings or `limit` passes, then drain it.
pub(super) async fn wait(bell: &mut Option<Bell>, path: &Path, limit: Duration) {
    listen(bell, path);
    let Some(b) = bell.as_ref() else {
        tokio::time::sleep(limit).await;
        return;
    };
    let Ok(Ok(mut guard)) = tokio::time::timeout(limit, b.fd.readable()).await else {
        return;
    };
    let mut buf = [0u8; 256];
    loop {
        match guard.try_io(|fd| fd.get_ref().read(&mut buf)) {
            Ok(Ok(n)) if n > 0 => continue,
            // Drained (would block) or an error: either way, look again.
            Ok(_) | Err(_) => break,
        }
    }
}

/// Ring the doorbell at `path`: one byte, without blocking (a full pipe already says "look").
pub(super) fn ring(path: &Path) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path);
    if let Ok(mut f) = file {
        let is_fifo = f.metadata().is_ok_and(|m| m.file_type().is_fifo());
        if is_fifo {
            let _ = std::io::Write::write(&mut f, b"!");
        }
    }
}
