//! A connection's own wake-ups answered by polling it again at once. hyper's HTTP/1 server
//! wakes its connection's task from inside that task's poll on every request with a body (the
//! service reading the body wakes the dispatcher that fed it). tokio takes a task woken while
//! it runs as one that yields: it goes to the back of the queue and a parked worker is woken to
//! share the work — a `FUTEX_WAKE` a request, after which the other worker takes the I/O
//! driver and the connection changes threads every call (43–57 µs a call at one client, see
//! `benches/README.md`). [`Repoll`] polls its future with a waker of its own: a wake during the
//! poll is noted and the future polled again in the same poll (at most [`AGAIN`] times, then
//! the task yields as before, so a future that keeps waking itself cannot hold the worker);
//! a wake at any other time is the task's.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// How many times one poll may poll its future again for wake-ups of its own.
const AGAIN: usize = 3;

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;

/// `fut`, its own wake-ups during a poll answered by polling it again.
pub(super) struct Repoll<F> {
    fut: Pin<Box<F>>,
    shared: Arc<Shared>,
    waker: Waker,
}

/// What the inner waker and the poll share: whether a poll is under way (and was woken), and
/// the task's waker for a wake-up between polls.
struct Shared {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let noted = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s == POLLING).then_some(WOKEN)
            });
        // Polling (now noted) or already noted: the poll runs the future again.
        if let Err(IDLE) = noted {
            self.task.wake();
        }
    }
}

impl<F: Future> Repoll<F> {
    pub(super) fn new(fut: F) -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(shared.clone());
        Repoll {
            fut: Box::pin(fut),
            shared,
            waker,
        }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.shared.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..=AGAIN {
            this.shared.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(out) = this.fut.as_mut().poll(&mut inner) {
                this.shared.state.store(IDLE, Ordering::Release);
                return Poll::Ready(out);
            }
            let left = this.shared.state.compare_exchange(
                POLLING,
                IDLE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if left.is_ok() {
                return Poll::Pending;
            }
        }
        // Still waking itself: the task yields, as it would have.
        this.shared.state.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A task waker that counts its wake-ups.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that wakes itself during its first `n` polls, then is ready.
    struct SelfWaking {
        n: usize,
        polls: usize,
    }
    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.n {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wake_during_the_poll_is_answered_by_polling_again_not_by_the_task() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut f = Repoll::new(SelfWaking { n: 2, polls: 0 });
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(3));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_task() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let mut f = Repoll::new(SelfWaking {
            n: usize::MAX,
            polls: 0,
        });
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(
            f.fut.polls,
            AGAIN + 1,
            "polled once and again {AGAIN} times"
        );
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the task is woken to yield"
        );
    }

    #[test]
    fn a_wake_between_polls_wakes_the_task_and_a_wake_from_another_thread_is_not_lost() {
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let mut f = Repoll::new(std::future::poll_fn(move |cx| {
            let _ = tx.send(cx.waker().clone());
            Poll::<()>::Pending
        }));
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        let inner = rx.recv().unwrap();
        std::thread::spawn(move || inner.wake()).join().unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_channel_fed_from_another_task_is_read_through_it() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(1);
        let reader = tokio::spawn(Repoll::new(async move {
            let mut sum = 0;
            while let Some(v) = rx.recv().await {
                sum += v;
            }
            sum
        }));
        for v in 1..=1000 {
            tx.send(v).await.unwrap();
        }
        drop(tx);
        assert_eq!(reader.await.unwrap(), 500_500);
    }
}
