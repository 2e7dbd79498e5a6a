//! A program's stdout and stderr pipes, made off the path from one program's exit to the next
//! one's start: a tool keeps one pair ready, made (non-blocking, watched by the runtime) while
//! its last program runs, so a call takes it at once instead of making it between the last
//! exit and its own start (six system calls: at J = 1 about 3 % of a `/bin/true` call).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::net::unix::pipe;

use super::process::{nonblocking, pipe};

/// How many pairs all tools keep ready at most (four descriptors each): a manifest of many
/// command tools holds no more than this many open beyond its calls'.
const MOST_SPARES: usize = 32;
static SPARES: AtomicUsize = AtomicUsize::new(0);

/// A program's stdout and stderr: our read ends, watched by the runtime, and its write ends.
pub(super) struct Outputs {
    pub(super) stdout: pipe::Receiver,
    pub(super) stderr: pipe::Receiver,
    pub(super) their_stdout: OwnedFd,
    pub(super) their_stderr: OwnedFd,
}

impl Outputs {
    /// Two new pipes, our ends made ready for the runtime.
    pub(super) fn new() -> io::Result<Outputs> {
        let (out_r, their_stdout) = pipe()?;
        let (err_r, their_stderr) = pipe()?;
        Ok(Outputs {
            stdout: nonblocking(out_r).and_then(pipe::Receiver::from_owned_fd_unchecked)?,
            stderr: nonblocking(err_r).and_then(pipe::Receiver::from_owned_fd_unchecked)?,
            their_stdout,
            their_stderr,
        })
    }
}

/// The pair a tool keeps ready (counted against [`MOST_SPARES`] while it is kept).
#[derive(Default)]
pub(super) struct Spare(Mutex<Option<Outputs>>);

impl Spare {
    /// The pair kept ready, or two new pipes.
    pub(super) fn take(&self) -> io::Result<Outputs> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match kept {
            Some(o) => {
                SPARES.fetch_sub(1, Ordering::Relaxed);
                Ok(o)
            }
            None => Outputs::new(),
        }
    }

    /// Make a pair ready for the next call, unless one is, or enough are kept already. Called
    /// once a program has started, while it runs.
    pub(super) fn refill(&self) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_some() || SPARES.fetch_add(1, Ordering::Relaxed) >= MOST_SPARES {
            if kept.is_none() {
                SPARES.fetch_sub(1, Ordering::Relaxed);
            }
            return;
        }
        match Outputs::new() {
            Ok(o) => *kept = Some(o),
            Err(_) => {
                SPARES.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        if self.0.get_mut().unwrap_or_else(|e| e.into_inner()).take().is_some() {
            SPARES.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_next_call_takes_the_pair_made_while_the_last_program_ran() {
        let spare = Spare::default();
        spare.refill();
        let kept = spare.0.lock().map(|o| o.as_ref().map(|o| o.stdout.as_raw_fd()));
        let kept = kept.ok().flatten();
        assert!(kept.is_some(), "no pair was made ready");
        spare.refill(); // one is ready: nothing more is made
        let taken = spare.take().expect("the kept pair");
        assert_eq!(Some(taken.stdout.as_raw_fd()), kept);
        assert!(spare.0.lock().map(|o| o.is_none()).unwrap_or(false));
        let fresh = spare.take().expect("two new pipes");
        assert_ne!(fresh.stdout.as_raw_fd(), taken.stdout.as_raw_fd());
    }
}
