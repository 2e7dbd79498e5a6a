//! The child of [`spawn`](super::spawn) made by `clone3(2)` with `CLONE_CLEAR_SIGHAND`: the
//! kernel starts it with every handler of this process back at its default, so the child
//! needs no system call a signal to be safe to run in our memory until it execs (about 15 µs
//! a program on this project's VMs, where each `rt_sigaction` costs 0.2 µs). Linux x86-64
//! only, and only until the kernel refuses it once (older than 5.5, or a seccomp filter that
//! refuses `clone3`, as container runtimes' default profiles do): then the caller falls back
//! to `clone` for good.

use std::ffi::{c_int, c_void};
use std::io;
use std::sync::atomic::AtomicBool;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use std::sync::atomic::Ordering;

/// The child's entry: it gets the argument and never returns (it execs or `_exit`s).
pub(super) type Entry = extern "C" fn(*mut c_void) -> c_int;

/// Whether `clone3` is still worth trying here.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static WORKS: AtomicBool = AtomicBool::new(true);

#[cfg(test)]
thread_local! {
    /// Tests: this thread starts its programs the fallback way.
    static FALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tests: run `f` with this thread's programs started by `clone` and the per-signal reset.
#[cfg(test)]
pub(super) fn with_fallback<R>(f: impl FnOnce() -> R) -> R {
    FALLBACK.with(|b| b.set(true));
    let r = f();
    FALLBACK.with(|b| b.set(false));
    r
}

/// `CLONE_CLEAR_SIGHAND` (the `libc` crate types it per target; this is the kernel's value).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// Start `entry(arg)` in a child that shares our memory and runs on the stack from `base` up
/// to `top` (16-byte aligned) while this thread waits (`CLONE_VM | CLONE_VFORK`), its
/// handlers cleared; `cleared` is set before it starts. `None` when `clone3` cannot be used
/// here (the caller uses `clone`, and `cleared` is left false).
///
/// # Safety
/// `entry` must only call async-signal-safe functions and end in `execve` or `_exit`, and
/// `arg` and the stack must stay valid until this returns.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(super) unsafe fn clone(
    entry: Entry,
    base: *mut u8,
    top: usize,
    arg: *mut c_void,
    cleared: &AtomicBool,
) -> Option<io::Result<libc::pid_t>> {
    if !WORKS.load(Ordering::Relaxed) {
        return None;
    }
    #[cfg(test)]
    if FALLBACK.with(std::cell::Cell::get) {
        return None;
    }
    // SAFETY: clone_args is plain integers; zero is "not asked" for every field not set.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLEAR_SIGHAND;
    args.exit_signal = libc::SIGCHLD as u64;
    args.stack = base as u64;
    args.stack_size = (top - base as usize) as u64;
    cleared.store(true, Ordering::Relaxed);
    let ret: i64;
    // SAFETY: the raw clone3 system call. In the parent it returns the pid or -errno like any
    // system call (rcx and r11 are clobbered by `syscall`). The child resumes after it with
    // rax = 0 on the top of the new stack, every other register as the parent had it: it
    // calls `entry(arg)` from there (the top is 16-byte aligned, as a call wants) and never
    // comes back, so nothing of the parent's frame is touched from the child.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") std::ptr::from_ref(&args),
            in("rsi") std::mem::size_of::<libc::clone_args>(),
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    match ret {
        pid if pid > 0 => Some(Ok(pid as libc::pid_t)),
        e => {
            cleared.store(false, Ordering::Relaxed);
            let errno = i32::try_from(-e).unwrap_or(libc::EINVAL);
            match errno {
                libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG => {
                    WORKS.store(false, Ordering::Relaxed);
                    None
                }
                _ => Some(Err(io::Error::from_raw_os_error(errno))),
            }
        }
    }
}

/// Elsewhere: always `clone`.
///
/// # Safety
/// None needed: nothing is started.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub(super) unsafe fn clone(
    _entry: Entry,
    _base: *mut u8,
    _top: usize,
    _arg: *mut c_void,
    _cleared: &AtomicBool,
) -> Option<io::Result<libc::pid_t>> {
    None
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::*;

    extern "C" fn on_usr1(_: c_int) {}

    /// The child's verdict: 0 when SIGUSR1 (handled here) is at its default and SIGUSR2
    /// (ignored here) is still ignored, 1 otherwise.
    extern "C" fn look(_: *mut c_void) -> c_int {
        // SAFETY: reads of this child's own dispositions into zeroed structs, then _exit.
        unsafe {
            let mut usr1: libc::sigaction = std::mem::zeroed();
            let mut usr2: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut usr1);
            libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut usr2);
            let ok = usr1.sa_sigaction == libc::SIG_DFL && usr2.sa_sigaction == libc::SIG_IGN;
            libc::_exit(if ok { 0 } else { 1 })
        }
    }

    #[test]
    fn a_child_starts_with_our_handlers_at_their_defaults_and_ignored_signals_still_ignored() {
        // SAFETY: this test binary's own SIGUSR1/SIGUSR2 dispositions (nothing else in it
        // uses them); a child on a stack that outlives it; waitpid on that child.
        unsafe {
            let mut handler: libc::sigaction = std::mem::zeroed();
            handler.sa_sigaction = on_usr1 as extern "C" fn(c_int) as usize;
            assert_eq!(libc::sigaction(libc::SIGUSR1, &handler, std::ptr::null_mut()), 0);
            libc::signal(libc::SIGUSR2, libc::SIG_IGN);
            let mut stack = vec![0u8; 64 * 1024];
            let base = stack.as_mut_ptr();
            let top = (base as usize + stack.len()) & !15;
            let cleared = AtomicBool::new(false);
            let Some(made) = clone(look, base, top, std::ptr::null_mut(), &cleared) else {
                eprintln!("notice: clone3 is refused here; the fallback is what runs");
                return;
            };
            let pid = made.expect("the child starts");
            assert!(cleared.load(Ordering::Relaxed));
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(libc::WIFEXITED(status), "status {status}");
            assert_eq!(libc::WEXITSTATUS(status), 0, "a handler was left in the child");
        }
    }
}
