//! SIGINT and SIGTERM, listened for once per process: the engine (which interrupts its runs)
//! and the gateway (which drains) each subscribe, so there is one listener however many care.

use std::sync::OnceLock;

use tokio::sync::watch;

/// How many signals have come so far.
static SEEN: OnceLock<watch::Sender<u64>> = OnceLock::new();

/// A receiver that changes with each SIGINT or SIGTERM. The first call starts the listener on
/// the current runtime (call it inside one); without signals to listen to, it never changes.
pub(super) fn subscribe() -> watch::Receiver<u64> {
    SEEN.get_or_init(|| {
        let (tx, _) = watch::channel(0);
        listen(tx.clone());
        tx
    })
    .subscribe()
}

fn listen(seen: watch::Sender<u64>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            seen.send_modify(|n| *n += 1);
        }
    });
}

/// Wait for the next signal (forever, when there is no listener).
pub(super) async fn next(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
