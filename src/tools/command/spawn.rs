//! Starting a program the way `posix_spawn(3)` does — a child that shares our memory and runs
//! on a small stack of its own while the spawning thread waits (`CLONE_VM | CLONE_VFORK`),
//! sets itself up and calls `execve` — without what glibc's costs on every call.
//!
//! glibc's child resets the disposition of every signal its (fully blocked) mask holds: a
//! read and a write for each of 62 signals, 124 system calls, about 25 µs on the spawning
//! thread per program — as much again as all the rest of our work for a call — plus an `mmap`
//! and `munmap` of a stack and six `getrlimit`s for three `dup2` actions. A handler must never
//! run in a child that shares our memory (`execve` would reset them anyway). On Linux x86-64
//! ours asks the kernel to start the child with every handler of this process back at its
//! default (`clone3` with `CLONE_CLEAR_SIGHAND`, Linux 5.5): no system call a signal. Where
//! `clone3` is refused (an older kernel, or a seccomp filter that refuses it, as container
//! runtimes' default profiles do) it falls back, once and for all, to `clone` and a child that
//! reads each disposition and writes back only those that hold a handler. The stack is
//! reused. The child gets what it got from `posix_spawn`: a process group of its own,
//! SIGPIPE at its default, ignored signals still ignored, an empty mask, descriptors 0–2 and
//! the working directory asked for; a bare name is looked up on this process's `PATH` as
//! `execvp` does. Why the program could not start comes back through shared memory, as
//! glibc's does, and that child is reaped at once.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The child's stack: it calls only thin system-call wrappers, a few frames deep.
const STACK: usize = 64 * 1024;

thread_local! {
    /// One stack per spawning thread, reused: that thread waits while its child runs on it.
    static STACKS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What the child needs, prepared by the parent: no allocation or lock happens in the child.
struct Plan<'a> {
    /// Where to look for the program, in order (one path unless a bare name is searched).
    paths: &'a [&'a CStr],
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// The descriptors that become 0, 1 and 2.
    fds: [RawFd; 3],
    cwd: Option<&'a CStr>,
    /// The errno of the step that failed; 0 while none has.
    err: AtomicI32,
    /// The child started with this process's handlers already at their defaults.
    cleared: AtomicBool,
}

/// Start `program` with `argv` and `envp` (NUL-terminated arrays of pointers to C strings that
/// outlive the call) on descriptors `fds`, in `cwd`: its pid.
pub(super) fn start(
    program: &CStr,
    search: bool,
    argv: &[*const c_char],
    envp: &[*const c_char],
    fds: [RawFd; 3],
    cwd: Option<&CStr>,
) -> io::Result<libc::pid_t> {
    let found = if search { candidates(program) } else { Vec::new() };
    let searched: Vec<&CStr> = found.iter().map(CString::as_c_str).collect();
    let one = [program];
    let paths: &[&CStr] = if search { &searched } else { &one };
    let plan = Plan {
        paths,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        fds,
        cwd,
        err: AtomicI32::new(0),
        cleared: AtomicBool::new(false),
    };
    let pid = STACKS.with(|s| {
        let mut stack = s.borrow_mut();
        if stack.capacity() < STACK {
            *stack = Vec::with_capacity(STACK);
        }
        clone_child(&plan, stack.as_mut_ptr(), stack.capacity())
    })?;
    match plan.err.load(Ordering::SeqCst) {
        0 => Ok(pid),
        e => {
            // It ran to `_exit` before the clone returned: reap it now (and unlist it).
            // SAFETY: waitpid on the child just made, into nothing.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            crate::tools::reaper::forget(pid);
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// Clone the child onto `stack` (`len` bytes), every signal blocked in this thread meanwhile
/// (the child starts with this thread's mask, and no handler may run in it before it has
/// reset them); back once it has exec'd or exited.
fn clone_child(plan: &Plan<'_>, stack: *mut u8, len: usize) -> io::Result<libc::pid_t> {
    let mut all = MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `all` is filled by sigfillset before use; `old` is written by pthread_sigmask
    // and read only after it succeeded. The stack top stays inside the buffer (16-byte
    // aligned, as the ABI wants); the child only reads `plan` and stores into its atomics,
    // and the parent does not run until the child has exec'd or exited (CLONE_VFORK).
    unsafe {
        libc::sigfillset(all.as_mut_ptr());
        if libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr()) != 0 {
            return Err(io::Error::other("cannot block signals to start a program"));
        }
        let top = (stack as usize + len) & !15;
        let arg = std::ptr::from_ref(plan).cast_mut().cast::<c_void>();
        let made = match super::clone3::clone(child, stack, top, arg, &plan.cleared) {
            Some(made) => made,
            None => {
                let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
                let pid = libc::clone(child, top as *mut c_void, flags, arg);
                if pid < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(pid)
                }
            }
        };
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        made
    }
}

/// `program` in each directory of this process's `PATH` (`/bin:/usr/bin` without one), as
/// `execvp` tries them.
fn candidates(program: &CStr) -> Vec<CString> {
    let path = std::env::var_os("PATH");
    let path = path
        .as_deref()
        .map_or(&b"/bin:/usr/bin"[..], std::os::unix::ffi::OsStrExt::as_bytes);
    on_path(program, path).collect()
}

/// `program` in each directory of `dirs` (a `PATH` value), in order; an empty entry is the
/// working directory.
pub(super) fn on_path<'a>(program: &'a CStr, dirs: &'a [u8]) -> impl Iterator<Item = CString> + 'a {
    dirs.split(|c| *c == b':').filter_map(|dir| {
        let mut p = if dir.is_empty() { b".".to_vec() } else { dir.to_vec() };
        p.push(b'/');
        p.extend_from_slice(program.to_bytes());
        CString::new(p).ok()
    })
}

/// The child: runs on its own stack in our memory until `execve`. Only async-signal-safe
/// system-call wrappers from here on — no allocation, no lock, no panic.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive until this child has exec'd or exited.
    let plan = unsafe { &*arg.cast::<Plan<'_>>() };
    let err = match setup(plan) {
        Ok(()) => exec(plan),
        Err(e) => e,
    };
    plan.err.store(err.max(1), Ordering::SeqCst);
    // SAFETY: _exit(2) ends this child without running anything of the parent's.
    unsafe { libc::_exit(127) }
}

/// Signals, process group, descriptors, directory and mask, as `posix_spawn` sets them up.
fn setup(plan: &Plan<'_>) -> Result<(), c_int> {
    if plan.cleared.load(Ordering::Relaxed) {
        // Rust ignores SIGPIPE; a program expects its default.
        to_default(libc::SIGPIPE);
    } else {
        reset_handlers();
    }
    // SAFETY: system calls on this child's own process group, descriptors and mask, with
    // arguments prepared by the parent.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(errno());
        }
        // Listed before it can run anything: a kill of this process from now on takes it.
        crate::tools::reaper::watch_in_child();
        for (target, &fd) in (0..).zip(plan.fds.iter()) {
            // dup2 onto itself would leave close-on-exec set: clear it instead.
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                return Err(errno());
            }
        }
        // The permits this process holds go along: they are freed when the program is gone.
        crate::tools::reaper::inherit_held();
        if let Some(dir) = plan.cwd {
            if libc::chdir(dir.as_ptr()) != 0 {
                return Err(errno());
            }
        }
        let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(empty.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Every signal whose disposition is a handler of this process back to its default, and
/// SIGPIPE too (Rust ignores it; a program expects its default). Ignored ones stay ignored.
fn reset_handlers() {
    for sig in 1..libc::SIGRTMAX() + 1 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags, empty mask); the
        // calls only read and set this child's own dispositions (glibc refuses its internal
        // signals, which nobody sends to this child, with EINVAL: they are left as they are).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            let reset = sig == libc::SIGPIPE
                || (libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction != libc::SIG_DFL
                    && old.sa_sigaction != libc::SIG_IGN);
            if reset {
                to_default(sig);
            }
        }
    }
}

/// This child's disposition of `sig` back to its default.
fn to_default(sig: c_int) {
    // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags, empty mask), set on
    // this child's own disposition.
    unsafe {
        let default: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, &default, std::ptr::null_mut());
    }
}

/// `execve` on each candidate path until one starts; the errno that says why none did (as
/// `execvp`: EACCES from any over ENOENT from the last).
fn exec(plan: &Plan<'_>) -> c_int {
    let mut denied = false;
    let mut last = libc::ENOENT;
    for path in plan.paths {
        // SAFETY: the path, argv and envp are NUL-terminated and alive in the parent.
        unsafe { libc::execve(path.as_ptr(), plan.argv, plan.envp) };
        last = errno();
        match last {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return last,
        }
    }
    if denied {
        libc::EACCES
    } else {
        last
    }
}

/// This thread's errno, read directly (nothing that could allocate).
fn errno() -> c_int {
    // SAFETY: glibc's errno location for the calling thread is always valid to read.
    unsafe { *libc::__errno_location() }
}
