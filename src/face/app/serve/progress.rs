//! A served call's progress notifications: while it waits (for its turn, in a lane) what it
//! waits for, again every [`PROGRESS_EVERY`] (clients whose timeout resets on progress keep
//! waiting for a call that is merely queued); once it runs, its upstream's own progress.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::events::Event;
use crate::tools::Progress;

/// Where a call's progress goes: the client's progress token, wrapped by the transport.
pub(super) type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// How often a call that waits tells its client so.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A call's progress notifications: while it waits (for its turn, in a lane) what it waits
/// for, again every [`PROGRESS_EVERY`]; once it runs, its upstream's own progress.
pub(super) struct Reporter {
    sink: ProgressSink,
    /// How many notifications went out, and what the call waits for now (`None`: running).
    state: Mutex<(u64, Option<String>)>,
    /// Whether the repeating tick is started (on the first wait: most calls never wait).
    ticking: std::sync::atomic::AtomicBool,
    /// Set once the call runs (its tool reached), for whoever asked to know.
    started: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Reporter {
    pub(super) fn new(
        sink: ProgressSink,
        started: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) -> Reporter {
        Reporter {
            sink,
            state: Mutex::new((0, None)),
            ticking: std::sync::atomic::AtomicBool::new(false),
            started,
        }
    }

    fn send(&self, message: String) {
        let n = match self.state.lock() {
            Ok(mut s) => {
                s.0 += 1;
                s.0
            }
            Err(_) => return,
        };
        (self.sink)(Progress {
            progress: n as f64,
            total: None,
            message: Some(message),
        });
    }

    pub(super) fn waiting(self: &Arc<Self>, message: String) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = Some(message.clone());
        }
        self.send(message);
        if !self.ticking.swap(true, Ordering::Relaxed) {
            self.tick();
        }
    }

    fn running(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = None;
        }
        if let Some(started) = &self.started {
            started.store(true, Ordering::Relaxed);
        }
    }

    /// Say again what the call waits for, every [`PROGRESS_EVERY`], while the call lasts.
    fn tick(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                let Some(me) = me.upgrade() else { return };
                let waiting = me.state.lock().ok().and_then(|s| s.1.clone());
                if let Some(m) = waiting {
                    me.send(m);
                }
            }
        });
    }

    /// Follow the call's run: lane waits become messages, the upstream's progress is passed on.
    pub(super) async fn watch(
        self: Arc<Self>,
        mut events: mpsc::UnboundedReceiver<Event>,
        mut upstream: mpsc::UnboundedReceiver<Progress>,
        lane_text: impl Fn(usize) -> String,
    ) {
        loop {
            tokio::select! {
                e = events.recv() => match e {
                    Some(Event::LaneWaiting { lane, .. }) => self.waiting(lane_text(lane)),
                    Some(Event::CallStarted { .. }) => self.running(),
                    Some(_) => {}
                    None => break,
                },
                p = upstream.recv() => match p {
                    Some(p) => (self.sink)(p),
                    None => break,
                },
            }
        }
    }
}
