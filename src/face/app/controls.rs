//! What is running now, for every face: each run (a batch, a stream's segment, a turn, a
//! gateway call) registers its control channel here for as long as it runs, and the face
//! tells them all at once — drain (stdout went away), interrupt (SIGINT/SIGTERM, a gateway's
//! grace ran out) — and waits, without polling, until none is left.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::run::Control;

/// The control channels of the runs running now.
#[derive(Default)]
pub(crate) struct Controls {
    running: Mutex<BTreeMap<u64, mpsc::UnboundedSender<Control>>>,
    next: AtomicU64,
    /// Woken each time a run leaves.
    left: Notify,
}

/// A run's place in [`Controls`]: it leaves when this drops.
pub(crate) struct Running {
    controls: Arc<Controls>,
    id: u64,
}

impl Running {
    /// Tell this run alone (its client cancelled it).
    pub(crate) fn tell(&self, c: Control) {
        if let Some(tx) = self.controls.running().get(&self.id) {
            let _ = tx.send(c);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.controls.running().remove(&self.id);
        self.controls.left.notify_waiters();
    }
}

impl Controls {
    fn running(&self) -> MutexGuard<'_, BTreeMap<u64, mpsc::UnboundedSender<Control>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A run starts: its place (held while it runs) and the channel its scheduler reads.
    pub(crate) fn enter(self: &Arc<Self>) -> (Running, mpsc::UnboundedReceiver<Control>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.running().insert(id, tx);
        let place = Running {
            controls: self.clone(),
            id,
        };
        (place, rx)
    }

    /// Tell every run running now.
    pub(crate) fn tell(&self, c: Control) {
        for tx in self.running().values() {
            let _ = tx.send(c);
        }
    }

    /// Whether nothing runs.
    pub(crate) fn is_idle(&self) -> bool {
        self.running().is_empty()
    }

    /// Wait until nothing runs, or `within` has passed; whether nothing runs.
    pub(crate) async fn idle_within(&self, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let left = self.left.notified();
            if self.is_idle() {
                return true;
            }
            if tokio::time::timeout_at(until, left).await.is_err() {
                return self.is_idle();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_run_is_told_while_it_runs_and_waited_for_until_it_leaves() {
        let controls = Arc::new(Controls::default());
        let (place, mut rx) = controls.enter();
        controls.tell(Control::Drain);
        assert_eq!(rx.recv().await, Some(Control::Drain));
        assert!(!controls.idle_within(Duration::from_secs(1)).await);
        let leaves = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(place);
        });
        let start = tokio::time::Instant::now();
        assert!(controls.idle_within(Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        leaves.await.unwrap();
        controls.tell(Control::Interrupt);
        assert_eq!(rx.recv().await, None, "a run that left is told nothing");
    }
}
