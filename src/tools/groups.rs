//! The watchdog's list of live process groups, kept in a page of memory this process and the
//! watchdog both map (a `memfd`, the watchdog's stdout): a program's start and end are each
//! one atomic store here, and the watchdog reads the list once, when this process is gone — no
//! message and no wake-up of another process a program.
//!
//! An open-addressing table of [`SLOTS`] process-group ids: `0` a slot never used, `-1` one
//! emptied (a lookup goes on past it). A table that is full says so, and the caller tells the
//! watchdog over its pipe instead.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// How many process groups the table holds at once.
pub(crate) const SLOTS: usize = 1024;
const BYTES: usize = SLOTS * std::mem::size_of::<i32>();
const EMPTIED: i32 = -1;

/// The table, mapped shared.
pub(crate) struct Groups(&'static [AtomicI32]);

impl Groups {
    /// A new table, and the file holding it (for the watchdog to map).
    pub(crate) fn create() -> io::Result<(Groups, File)> {
        // SAFETY: memfd_create with a NUL-terminated name; the descriptor is ours alone.
        let fd = unsafe { libc::memfd_create(c"flux-tools-groups".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned to us, owned from here on.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(BYTES as u64)?;
        Ok((Groups(map(&file)?), file))
    }

    /// The table in `file` (the watchdog's stdout), when it is one.
    pub(crate) fn open(file: &File) -> Option<Groups> {
        let len = file.metadata().ok()?.len();
        (len == BYTES as u64)
            .then(|| map(file).ok().map(Groups))
            .flatten()
    }

    /// List `pgid`; `false`: the table is full.
    pub(crate) fn insert(&self, pgid: i32) -> bool {
        self.probe(pgid).any(|s| {
            let v = s.load(Ordering::Relaxed);
            v <= 0
                && s.compare_exchange(v, pgid, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// Whether `pgid` is listed.
    pub(crate) fn contains(&self, pgid: i32) -> bool {
        for s in self.probe(pgid) {
            match s.load(Ordering::SeqCst) {
                0 => return false,
                v if v == pgid => return true,
                _ => {}
            }
        }
        false
    }

    /// Take `pgid` off the list; `false`: it was not on it.
    pub(crate) fn remove(&self, pgid: i32) -> bool {
        for s in self.probe(pgid) {
            match s.load(Ordering::Relaxed) {
                0 => return false,
                v if v == pgid => {
                    s.store(EMPTIED, Ordering::SeqCst);
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    /// The groups listed now.
    pub(crate) fn listed(&self) -> Vec<i32> {
        (self.0.iter())
            .map(|s| s.load(Ordering::SeqCst))
            .filter(|v| *v > 1)
            .collect()
    }

    /// The slots `pgid` may be in, in the order it is looked for.
    fn probe(&self, pgid: i32) -> impl Iterator<Item = &AtomicI32> {
        let start = (pgid as u32).wrapping_mul(2_654_435_761) as usize % SLOTS;
        (0..SLOTS).map(move |i| &self.0[(start + i) % SLOTS])
    }
}

/// `file`'s first [`BYTES`], mapped shared for the rest of the process's life.
fn map(file: &File) -> io::Result<&'static [AtomicI32]> {
    // SAFETY: a shared mapping of a file of at least BYTES bytes; it is never unmapped, so the
    // slice lives as long as the process. `AtomicI32` has the size and alignment of `i32`, and
    // a page is aligned for it; every access goes through the atomics.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(std::slice::from_raw_parts(p.cast::<AtomicI32>(), SLOTS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_listed_here_are_seen_through_the_file_and_a_full_table_says_so() {
        let (here, file) = Groups::create().expect("a table");
        let there = Groups::open(&file).expect("the same table");
        assert!(here.insert(4242) && here.insert(7) && here.insert(4242 + SLOTS as i32));
        // A group listed behind another of the same first slot is found past it.
        assert!(here.contains(4242 + SLOTS as i32) && there.contains(7) && !here.contains(8));
        assert!(here.remove(4242));
        assert!(!here.remove(4242), "removed once");
        assert!(!here.contains(4242) && here.contains(4242 + SLOTS as i32));
        let mut seen = there.listed();
        seen.sort_unstable();
        assert_eq!(seen, [7, 4242 + SLOTS as i32]);
        // An emptied slot is taken again; past SLOTS groups the table is full.
        for g in 10..(10 + SLOTS as i32 - 2) {
            assert!(here.insert(g), "{g}");
        }
        assert!(!here.insert(99_999), "full");
        assert_eq!(there.listed().len(), SLOTS);
        assert!(Groups::open(&tempfile::tempfile().expect("a file")).is_none());
    }
}
