//! A counter every process on the machine sees: eight bytes of a file, mapped shared. A
//! backend's `writers` word counts the writes announced on it (waiting for it or holding
//! it), so a read whose process already holds the backend shared can tell, with no system
//! call, that nobody waits to write and join that hold. A write announces itself before it
//! queues at the gate and takes the announcement back when it ends or is given up
//! ([`Announced`]). A process killed while it writes leaves the word too high: reads of that
//! backend then look at the gate each time as they did before the word existed — slower,
//! never looser.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::open_rw;
use crate::run::store::LaneError;

/// Bytes mapped: one `u64`.
const LEN: usize = std::mem::size_of::<u64>();

pub(super) struct Word {
    at: NonNull<AtomicU64>,
    /// Kept open for as long as it is mapped.
    _file: File,
}

// SAFETY: the mapping is only reached through atomic operations, from any thread.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    /// Map the word kept in `path`, made (as zero) the first time.
    pub(super) fn open(path: &Path) -> Result<Word, LaneError> {
        let failed = |e: std::io::Error| LaneError(format!("cannot map {}: {e}", path.display()));
        let file = open_rw(path)?;
        // The file only ever grows, so no process's mapping ever loses its page.
        if file.metadata().map_err(failed)?.len() < LEN as u64 {
            file.set_len(LEN as u64).map_err(failed)?;
        }
        // SAFETY: a fresh shared mapping of the file's first LEN bytes, which exist; the
        // pointer is page aligned, so aligned for an AtomicU64.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(failed(std::io::Error::last_os_error()));
        }
        let at = NonNull::new(at.cast::<AtomicU64>())
            .ok_or_else(|| failed(std::io::Error::other("mapped at null")))?;
        Ok(Word { at, _file: file })
    }

    fn atomic(&self) -> &AtomicU64 {
        // SAFETY: mapped, aligned and alive for as long as self.
        unsafe { self.at.as_ref() }
    }

    pub(super) fn get(&self) -> u64 {
        self.atomic().load(Ordering::SeqCst)
    }

    /// Count one more, until the returned announcement drops.
    pub(super) fn announce(self: &Arc<Self>) -> Announced {
        self.atomic().fetch_add(1, Ordering::SeqCst);
        Announced(self.clone())
    }
}

impl Drop for Word {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `open`, used by nobody now.
        unsafe { libc::munmap(self.at.as_ptr().cast(), LEN) };
    }
}

/// One count of a [`Word`], taken back when dropped.
pub(super) struct Announced(Arc<Word>);

impl Drop for Announced {
    fn drop(&mut self) {
        let word = self.0.atomic();
        let _ = word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two mappings of one file stand for two processes.
    #[test]
    fn two_mappings_see_one_count_and_an_announcement_is_taken_back_when_dropped() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("writers");
        let (a, b) = (
            Arc::new(Word::open(&path).expect("a")),
            Arc::new(Word::open(&path).expect("b")),
        );
        assert_eq!((a.get(), b.get()), (0, 0));
        let one = a.announce();
        let two = b.announce();
        assert_eq!(b.get(), 2);
        drop(one);
        assert_eq!(a.get(), 1);
        drop(two);
        assert_eq!((a.get(), b.get()), (0, 0));
        assert_eq!(std::fs::metadata(&path).expect("the file").len(), 8);
    }
}
