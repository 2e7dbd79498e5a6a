//! What a process still has to tell Redis when a call lets go — permits given back, a place in
//! a queue left, a refund — is sent from `Drop` by a task of its own. Those tasks are counted
//! here, so a process that ends waits for them ([`Pending::settled`]) instead of leaving its
//! last permits held until their lease lapses (other processes would wait that long).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

impl Pending {
    /// Run `work` on the current runtime, counted until it ends (nothing without a runtime:
    /// the lease lapses on its own).
    ///
    /// It is polled once here, before its task is spawned: what it sends goes on the
    /// connection now, ahead of anything a task woken after this asks (permits given back
    /// reach Redis before the in-process waiter they free asks for them). The task only
    /// waits for the answer.
    pub(super) fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut work = Box::pin(work);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if work.as_mut().poll(&mut cx).is_ready() {
            return;
        }
        self.count.fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        handle.spawn(async move {
            work.await;
            if me.count.fetch_sub(1, Ordering::SeqCst) == 1 {
                me.idle.notify_waiters();
            }
        });
    }

    /// Resolves once no such task is left.
    pub(super) async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn settles_once_every_task_has_ended() {
        let pending = Arc::new(Pending::default());
        pending.settled().await;
        for ms in [50, 200] {
            pending.spawn(tokio::time::sleep(Duration::from_millis(ms)));
        }
        let started = tokio::time::Instant::now();
        pending.settled().await;
        assert_eq!(started.elapsed(), Duration::from_millis(200));
    }
}
