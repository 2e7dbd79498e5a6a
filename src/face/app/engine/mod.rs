//! The engine the CLI faces drive: opened once from [`RunOptions`] and what the face hands
//! in (the approver), it is the [`Core`] every run shares (`core.rs`: manifest, MCP sessions,
//! lane store, run id, approvals, cache, tools, controls, and where runs end) plus what only a
//! command-line run has — the reporters on their own thread, the budget carried from batch to
//! batch, the summary, a closed stdout that drains the runs. It accepts work — a whole batch
//! ([`Engine::execute`]), a stream's segment ([`Engine::spawn_segment`]), a turn (a new run on
//! the same engine, [`Engine::new_run`]) — ends each run through the core
//! ([`Core::end_run`]) and closes once ([`Engine::close`]). The gateway drives a [`Core`]
//! itself (`serve/`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

mod core;
mod kit;

pub(super) use self::core::Core;
pub(super) use kit::{CallKit, Scope};

use super::controls::{Controls, Running};
use super::options::RunOptions;
use super::prepare::Parts;
use crate::events::{Event, Status};
use crate::model_formats::{InputFormat, Usage};
use crate::plan::Plan;
use crate::report::Reporter;
use crate::run::{self, Approver, Cassette, Control, Journal, Resume};
use crate::run::{RunConfig, RunEnd, RunReport};

/// How long the event consumer lets events gather after each round.
const REPORTER_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
/// How many empty looks, a pause apart, before the reporters' thread parks until the next event.
const REPORTER_IDLE_LOOKS: u32 = 3;

/// The engine a CLI face drives: the [`Core`] every run shares, plus the reporters on their
/// own thread, the budget carried from one batch to the next, and the summary.
pub(super) struct Engine {
    /// What every run shares (the gateway drives one of its own).
    pub core: Core,
    consumer: Option<std::thread::JoinHandle<()>>,
    /// Set when stdout went away: nothing more is dispatched, and the run exits 0.
    pub drained: Arc<AtomicBool>,
    /// Set on SIGINT/SIGTERM: a stream stops reading.
    pub interrupted: Arc<AtomicBool>,
    /// What the run has spent (carried from one batch to the next).
    pub spent: f64,
    /// Calls the run has made (carried from one batch to the next, against `max_calls`).
    pub calls_made: u64,
    quiet: bool,
}

/// What the history needs of a run besides its report: the shape its plan had.
#[derive(Debug, Clone)]
pub(super) struct RunShape {
    pub width: usize,
    pub input_format: InputFormat,
    pub usage: Option<Usage>,
}

impl RunShape {
    /// The shape of `plan`, for an engine that keeps a history (the simulated schedule that
    /// gives the width is not free at 100,000 calls: without a history it is not run).
    pub(super) fn of(plan: &Plan, engine: &Engine) -> RunShape {
        RunShape {
            width: if engine.core.keeps_history() {
                crate::plan::simulate(plan).width
            } else {
                0
            },
            input_format: plan.input_format,
            usage: plan.usage.clone(),
        }
    }
}

/// A run's summary lines (none under `--quiet`) and exit status.
pub(super) struct Summary {
    lines: Vec<String>,
    pub status: u8,
}

impl Summary {
    /// The lines on stderr; the exit status.
    pub(super) fn print(self) -> u8 {
        for l in &self.lines {
            eprintln!("{l}");
        }
        self.status
    }
}

/// The durable parts of a run over a whole batch (none for a stream).
#[derive(Default)]
pub(super) struct Durability {
    pub journal: Option<Journal>,
    pub resume: Option<Arc<Resume>>,
    pub retry_indeterminate: bool,
    pub no_resend: bool,
    pub record: bool,
    pub replay: Option<Arc<Cassette>>,
}

impl Engine {
    /// Start the reporters and open the core (a face that stops on SIGINT/SIGTERM says so:
    /// [`Engine::interrupt_on_signals`]).
    pub(super) fn open(opts: &RunOptions, parts: Parts, approver: Arc<dyn Approver>) -> Engine {
        let controls: Arc<Controls> = Arc::default();
        let drained = Arc::new(AtomicBool::new(false));
        let (c, d) = (controls.clone(), drained.clone());
        let reporters = super::reporters::live(opts, move || {
            d.store(true, Ordering::SeqCst);
            c.tell(Control::Drain);
        });
        if opts.streaming {
            watch_reader(controls.clone(), drained.clone());
        }
        let (events, consumer) = if reporters.is_empty() {
            (None, None)
        } else {
            let (tx, rx) = mpsc::unbounded_channel::<Event>();
            let consumer = std::thread::spawn(move || consume(rx, reporters));
            (Some(tx), Some(consumer))
        };
        let core = Core::open(opts, parts, approver, (events, controls));
        Engine {
            core,
            consumer,
            drained,
            interrupted: Arc::new(AtomicBool::new(false)),
            spent: 0.0,
            calls_made: 0,
            quiet: opts.quiet,
        }
    }

    /// SIGINT and SIGTERM reach every run of this engine: the first stops them gracefully,
    /// the second at once (the CLI faces; the gateway drains on its own terms).
    pub(super) fn interrupt_on_signals(&self, rt: &tokio::runtime::Runtime) {
        let (controls, interrupted) = (self.core.controls.clone(), self.interrupted.clone());
        let mut signals = rt.block_on(async { super::signals::subscribe() });
        rt.spawn(async move {
            loop {
                super::signals::next(&mut signals).await;
                interrupted.store(true, Ordering::SeqCst);
                controls.tell(Control::Interrupt);
            }
        });
    }

    /// Start another run in this process (a `--turns` turn): the core's new run, and nothing
    /// spent or called yet.
    pub(super) fn new_run(&mut self, named: Option<String>) {
        self.core.new_run(named);
        self.spent = 0.0;
        self.calls_made = 0;
    }

    /// Tell the reporters something the batches do not (a stream's start, growth and end).
    pub(super) fn emit(&self, e: Event) {
        if let Some(tx) = &self.core.events {
            let _ = tx.send(e);
        }
    }

    /// The configuration of one batch, and its control channel (registered with the others).
    fn config(
        &mut self,
        plan: &Plan,
        d: Durability,
        segment: Option<usize>,
    ) -> (RunConfig, Running, mpsc::UnboundedReceiver<Control>) {
        let kit = self.core.kit(plan);
        let (running, rx) = self.core.controls.enter();
        if self.drained.load(Ordering::SeqCst) {
            self.core.controls.tell(Control::Drain);
        }
        let scope = Scope {
            run_id: self.core.run_id.clone(),
            lanes: self.core.lanes.clone(),
            segment,
            start: Some(self.core.start),
            spent: self.spent,
            calls_made: self.calls_made,
            trace: self.core.trace.clone(),
        };
        let mut config = kit.config(scope, None);
        config.journal = d.journal;
        config.resume = d.resume;
        config.retry_indeterminate = d.retry_indeterminate;
        config.no_resend = d.no_resend;
        config.record = d.record;
        config.replay = d.replay;
        (config, running, rx)
    }

    /// Run a whole batch to its end. The caller may keep a clone of `plan`: then the run
    /// ends without freeing it (see `run_whole`).
    pub(super) fn execute(
        &mut self,
        rt: &tokio::runtime::Runtime,
        plan: Arc<Plan>,
        d: Durability,
    ) -> RunReport {
        let (config, running, rx) = self.config(&plan, d, None);
        let manifest = self.core.manifest.clone();
        let report = rt.block_on(run::execute_spawned(manifest, plan, config, rx));
        drop(running);
        self.spent = report.spent;
        self.calls_made = report.calls_made;
        report
    }

    /// Start one segment of a stream (its calls numbered from `base` in the run); it runs
    /// beside whatever segments are running.
    pub(super) fn spawn_segment(
        &mut self,
        rt: &tokio::runtime::Runtime,
        plan: Plan,
        base: usize,
    ) -> JoinHandle<RunReport> {
        let (config, running, rx) = self.config(&plan, Durability::default(), Some(base));
        let manifest = self.core.manifest.clone();
        rt.spawn(async move {
            let report = run::execute(manifest, Arc::new(plan), config, rx).await;
            drop(running);
            report
        })
    }

    /// End the run: MCP sessions closed, every event rendered.
    pub(super) fn close(self, rt: tokio::runtime::Runtime) {
        let Engine { core, consumer, .. } = self;
        // The core holds the events' sender: closed with it, the reporters see the end.
        core.close(rt);
        if let Some(c) = consumer {
            // Out of its pause at once: the last lines go out now, not a pause or two later.
            c.thread().unpark();
            let _ = c.join();
        }
    }

    /// The run's summary — one line and the lane lines, after `label` (e.g. `turn 3: `) —
    /// and its exit status. Printed by [`Summary::print`] (a face prints it after its
    /// outputs).
    pub(super) fn summary(
        &self,
        end: &RunEnd<'_>,
        statuses: &[Status],
        label: Option<&str>,
    ) -> Summary {
        let mut lines = Vec::new();
        if !self.quiet {
            let line = crate::report::summary::line(end.outcome, end.stats, statuses);
            lines.push(format!("{}{line}", label.unwrap_or("")));
            for l in crate::report::summary::lane_lines(end.stats) {
                lines.push(format!("  {l}"));
            }
        }
        Summary {
            lines,
            status: super::exit_code(end.outcome, end.stats.failed),
        }
    }
}

/// Feed events to the reporters until the run ends.
///
/// Events are taken in batches, one wake-up a millisecond at most, and the thread parks only
/// once a few looks in a row found nothing: while calls keep finishing, a call's completion
/// never has to wake this thread (a futex and a context switch a call otherwise). Its pauses
/// are `park_timeout`s, which [`Engine::close`] cuts short: a run's last lines and its end
/// are seen as soon as the run is over, and once every sender is gone it does not pause again
/// (a one-call run ended about 2 ms later before).
fn consume(mut rx: mpsc::UnboundedReceiver<Event>, mut reporters: Vec<Box<dyn Reporter>>) {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut idle = 0;
    loop {
        let first = if idle >= REPORTER_IDLE_LOOKS {
            rx.blocking_recv()
        } else {
            match rx.try_recv() {
                Ok(ev) => Some(ev),
                Err(TryRecvError::Empty) => {
                    idle += 1;
                    std::thread::park_timeout(REPORTER_PAUSE);
                    continue;
                }
                Err(TryRecvError::Disconnected) => None,
            }
        };
        let Some(ev) = first else { break };
        idle = 0;
        for rep in reporters.iter_mut() {
            rep.handle(&ev);
        }
        // Handle whatever else is already waiting, then flush once: streamed lines go out as
        // soon as the run pauses, without a write per line when it does not.
        while let Ok(ev) = rx.try_recv() {
            for rep in reporters.iter_mut() {
                rep.handle(&ev);
            }
        }
        for rep in reporters.iter_mut() {
            rep.flush();
        }
        if !rx.is_closed() {
            std::thread::park_timeout(REPORTER_PAUSE);
        }
    }
}

/// When stdout is a pipe, notice at once when its reader goes away (`| head -1`), not at the
/// next write: nothing more is dispatched, and the run ends when its calls in flight do.
fn watch_reader(controls: Arc<Controls>, drained: Arc<AtomicBool>) {
    use std::os::fd::AsRawFd;
    let fd = std::io::stdout().as_raw_fd();
    // SAFETY: fstat on our own stdout into a zeroed struct; failure is reported by the result.
    let is_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_pipe {
        return;
    }
    std::thread::spawn(move || loop {
        let mut p = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own; with no events asked for, it returns only when
        // the pipe's reader has closed (POLLERR/POLLHUP), or on an error.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            drained.store(true, Ordering::SeqCst);
            controls.tell(Control::Drain);
            return;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    });
}
