//! The gateway's lines about calls on stderr, written by a thread of their own. Who reads
//! stderr is the launcher's business (a desktop client, a supervisor): one that never does
//! fills the pipe, and a worker writing to it would block — and with it every client. Here a
//! full queue drops the line (counted, and said once the pipe moves again); nothing waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

/// Lines waiting for the writer before new ones are dropped.
const QUEUED: usize = 1024;

static LINES: OnceLock<Option<SyncSender<String>>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Say `line` on stderr, without waiting for it to be written.
pub(super) fn line(line: String) {
    let writer = LINES.get_or_init(|| {
        let (tx, rx) = sync_channel::<String>(QUEUED);
        let spawned = std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                use std::io::Write;
                for line in rx {
                    let mut err = std::io::stderr().lock();
                    let dropped = DROPPED.swap(0, Ordering::Relaxed);
                    if dropped > 0 {
                        let _ = writeln!(
                            err,
                            "flux-tools mcp serve: {dropped} lines were not said (stderr was not read)"
                        );
                    }
                    let _ = writeln!(err, "{line}");
                }
            });
        spawned.ok().map(|_| tx)
    });
    match writer.as_ref().map(|w| w.try_send(line)) {
        Some(Ok(())) => {}
        Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}
