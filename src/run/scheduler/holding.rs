//! The lanes a run's call tasks still hold after their completion was sent. A task sends its
//! completion *first* and gives its lanes back right after, so that the next call waiting on
//! them is the last task woken and runs next on the same worker (sent the other way round, the
//! coordinator was the last woken, and the waiter went to another worker: a futex wake and a
//! thread hop per call). The run waits here before it returns, so a shared store's release is
//! never dropped with the runtime.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// How long a run that ends waits for its tasks to give their lanes back (each does so right
/// after its completion: microseconds, unless a store's release blocks).
const HOLDING_FOR: Duration = Duration::from_secs(2);

#[derive(Default, Clone)]
pub(super) struct Holding(Arc<Count>);

#[derive(Default)]
pub(super) struct Count {
    tasks: AtomicUsize,
    idle: Notify,
}

/// One task's part: counted until dropped (the task ended, or was dropped with the runtime).
pub(super) struct Part(Arc<Count>);

impl Holding {
    pub(super) fn enter(&self) -> Part {
        self.0.tasks.fetch_add(1, Ordering::SeqCst);
        Part(self.0.clone())
    }

    /// Resolves once every part is dropped (or after [`HOLDING_FOR`]).
    pub(super) async fn released(&self) {
        let all = async {
            loop {
                let idle = self.0.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.0.tasks.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(HOLDING_FOR, all).await;
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        if self.0.tasks.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn released_once_every_part_is_dropped() {
        let holding = Holding::default();
        holding.released().await;
        let parts: Vec<Part> = (0..3).map(|_| holding.enter()).collect();
        let started = tokio::time::Instant::now();
        tokio::spawn(async move {
            for part in parts {
                tokio::time::sleep(Duration::from_millis(100)).await;
                drop(part);
            }
        });
        holding.released().await;
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}
