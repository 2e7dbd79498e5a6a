//! The calls a gateway has taken and not answered yet — parked for approval included — so a
//! stopping gateway says it drains (`/readyz`) and closes its wires only once each of them is
//! answered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// The count, and a bell for when it falls to zero.
#[derive(Default)]
pub(super) struct Open {
    n: AtomicUsize,
    none: Notify,
}

/// One call taken; answered when dropped.
pub(super) struct Taken(Arc<Open>);

impl Open {
    /// A call is taken.
    pub(super) fn take(self: &Arc<Self>) -> Taken {
        self.n.fetch_add(1, Ordering::SeqCst);
        Taken(self.clone())
    }

    /// How many calls are taken and unanswered.
    pub(super) fn count(&self) -> usize {
        self.n.load(Ordering::SeqCst)
    }

    /// Wait until every call taken is answered, or `within` has passed; whether they are.
    pub(super) async fn answered_within(&self, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let none = self.none.notified();
            if self.count() == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, none).await.is_err() {
                return self.count() == 0;
            }
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_the_last_call_taken_and_no_longer() {
        let open = Arc::new(Open::default());
        assert!(open.answered_within(Duration::ZERO).await);
        let (a, b) = (open.take(), open.take());
        assert!(!open.answered_within(Duration::from_secs(1)).await);
        drop(a);
        let waiting = tokio::spawn({
            let open = open.clone();
            async move { open.answered_within(Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "one call is still unanswered");
        drop(b);
        assert!(waiting.await.unwrap());
    }
}
