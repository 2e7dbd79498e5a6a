//! What a program printed, read as it comes: stdout (bounded by the call loop's check against
//! `max_output`), the tail of stderr, and which pipes are still open; and how the end of a
//! program that ends its output by exiting is seen without a round of the runtime's.

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::process::ExitWatch;
use super::STDERR_TAIL;

/// Whether a program whose pipes have both ended, but which was not gone yet, is gone once it
/// has been given the core back (see [`Capture::one_ended`]).
pub(super) fn exiting_gone(exit: &ExitWatch) -> bool {
    std::thread::yield_now();
    exit.gone()
}

/// What a program printed: stdout (bounded by the loop's check against `max_output`) and the
/// tail of stderr, and which of the two pipes are still open.
pub(super) struct Capture {
    pub(super) out: Vec<u8>,
    pub(super) err_tail: Vec<u8>,
    pub(super) out_open: bool,
    pub(super) err_open: bool,
}

impl Capture {
    pub(super) fn new(max: usize) -> Capture {
        Capture {
            out: Vec::with_capacity(4096.min(max.saturating_add(1))),
            err_tail: Vec::new(),
            out_open: true,
            err_open: true,
        }
    }

    pub(super) fn closed(&self) -> bool {
        !self.out_open && !self.err_open
    }

    /// One pipe has just ended. A program's pipes close as it exits, one after the other and
    /// before its exit is done, and the close of the first wakes this thread, often on the
    /// program's own core, where it is put aside for us half-way through exiting. It is given
    /// the core back once, and the other pipe is read without waiting: its end then costs no
    /// round of the runtime's, and the exit is most often done when it is looked for.
    pub(super) fn one_ended(&mut self, stdout: &pipe::Receiver, stderr: &pipe::Receiver) {
        if !self.closed() {
            std::thread::yield_now();
            self.read_ready(stdout, stderr);
        }
    }

    /// Read what the open pipes already hold, without waiting (see [`read_ready`]).
    pub(super) fn read_ready(&mut self, stdout: &pipe::Receiver, stderr: &pipe::Receiver) {
        self.out_open = self.out_open && read_ready(stdout, &mut self.out);
        self.err_open = self.err_open && read_ready(stderr, &mut self.err_tail);
        trim_tail(&mut self.err_tail);
    }
}

/// Keep the tail of stderr only (what an error quotes), once it is twice that long.
pub(super) fn trim_tail(tail: &mut Vec<u8>) {
    if tail.len() > STDERR_TAIL * 2 {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
}

/// How much [`read_ready`] reads at most: a pipe still being written to is left to the loop.
const READY_AT_MOST: usize = 64 * 1024;

/// Read what `pipe` already holds, without waiting and without asking the runtime (which may
/// not have heard yet that it closed): whether it is still open.
fn read_ready(pipe: &pipe::Receiver, into: &mut Vec<u8>) -> bool {
    use std::os::fd::AsRawFd;
    let mut read = 0;
    while read < READY_AT_MOST {
        into.reserve(4096);
        let spare = into.spare_capacity_mut();
        // SAFETY: read(2) from our own non-blocking pipe into the vector's spare capacity;
        // only the bytes it reports are then counted as the vector's.
        let n = unsafe { libc::read(pipe.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        match usize::try_from(n) {
            Ok(0) => return false,
            Ok(n) => {
                // SAFETY: read(2) initialised these `n` bytes of the spare capacity.
                unsafe { into.set_len(into.len() + n) };
                read += n;
            }
            Err(_) => match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => {}
                std::io::ErrorKind::WouldBlock => return true,
                _ => return false,
            },
        }
    }
    true
}

/// Read what the pipe has into the spare room of `into`, made at least `room` bytes when it
/// is short (never zeroed; what a read leaves unfilled stays unused).
pub(super) async fn read_into(
    pipe: &mut pipe::Receiver,
    into: &mut Vec<u8>,
    room: usize,
) -> std::io::Result<usize> {
    if into.capacity() - into.len() < room / 4 {
        into.reserve(room);
    }
    pipe.read_buf(into).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pipe_pair() -> (pipe::Receiver, std::fs::File) {
        let (ours, theirs) = super::super::process::pipe().expect("a pipe");
        let ours = super::super::process::nonblocking(ours).expect("non-blocking");
        let ours = pipe::Receiver::from_owned_fd_unchecked(ours).expect("registered");
        (ours, std::fs::File::from(theirs))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn when_one_pipe_ends_the_other_is_read_to_its_end_without_the_runtime() {
        let (stdout, their_out) = pipe_pair();
        let (stderr, mut their_err) = pipe_pair();
        let mut cap = Capture::new(1024);
        their_err.write_all(b"last words").expect("written");
        drop(their_out);
        cap.out_open = false; // as the loop sets it when stdout's read returns 0
        cap.one_ended(&stdout, &stderr);
        assert!(cap.err_open, "stderr is still held open: {:?}", cap.err_tail);
        assert_eq!(cap.err_tail, b"last words");
        drop(their_err);
        cap.one_ended(&stdout, &stderr);
        assert!(cap.closed(), "stderr's end is read at once, without a wake-up");
        assert_eq!(cap.err_tail, b"last words");
    }

    #[test]
    fn a_program_that_exits_is_gone_once_given_the_core_and_one_that_runs_on_is_not() {
        let mut quick = std::process::Command::new("true").spawn().expect("true starts");
        let exit = ExitWatch::without_pidfd(quick.id() as libc::pid_t);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !exiting_gone(&exit) {
            assert!(std::time::Instant::now() < deadline, "true never exited");
        }
        let mut slow = std::process::Command::new("sleep").arg("5").spawn().expect("sleep");
        let running = ExitWatch::without_pidfd(slow.id() as libc::pid_t);
        assert!(!exiting_gone(&running), "a sleeping program is not gone");
        let _ = slow.kill();
        let _ = slow.wait();
        let _ = quick.wait();
    }
}
