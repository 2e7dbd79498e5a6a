//! "You are next" (`1`) or "the permits are yours" (`g PAUSED_MS ALONG`: a release granted them,
//! and the backend read that came with them when `ALONG` is 1):
//! one pub/sub connection per process, pattern-subscribed to the `freed` channels of *its own*
//! tickets on every lane of the manifest, wakes the one call of this process whose ticket is at
//! the head of the lane's queue. A process's tickets start with its tag, and it listens for that
//! tag alone: a message wakes the one process it is for, not every process sharing the lane
//! (eight processes on a 2-core machine each woke for every handoff, and the one it was for
//! waited its turn for a CPU behind them). The listener starts with the first wait and comes back by itself after Redis
//! does (a message missed meanwhile costs a waiter one fallback period, never a hang: its next
//! try finds what a release granted it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;

/// How long the listener waits before connecting again after Redis went away.
const RECONNECT: Duration = Duration::from_secs(1);

pub(super) struct Bells {
    client: redis::Client,
    /// `flux-tools:NS:*:freed:TAG*`.
    pattern: String,
    /// This process's tag: the start of each of its tickets.
    tag: String,
    lanes: Mutex<HashMap<String, Arc<Bell>>>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Bells {
    pub(super) fn new(client: redis::Client, ns: &str) -> Arc<Bells> {
        let tag = format!("{:08x}", fastrand::u32(..));
        Arc::new(Bells {
            client,
            pattern: format!("flux-tools:{ns}:*:freed:{tag}*"),
            tag,
            lanes: Mutex::new(HashMap::new()),
            listener: Mutex::new(None),
        })
    }

    /// A new ticket of this process: its tag, then 16 random hex digits.
    pub(super) fn ticket(&self) -> String {
        format!("{}{:016x}", self.tag, fastrand::u64(..))
    }

    /// What wakes the waiter of `channel` (its own ticket's; listening from now on).
    pub(super) fn bell(self: &Arc<Self>, channel: &str) -> Arc<Bell> {
        self.listen();
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes.entry(channel.to_string()).or_default().clone()
    }

    /// The waiter of `channel` is done.
    pub(super) fn forget(&self, channel: &str) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes.remove(channel);
    }

    fn listen(self: &Arc<Self>) {
        let mut listener = self.listener.lock().unwrap_or_else(|e| e.into_inner());
        if listener.is_some() {
            return;
        }
        let me = Arc::downgrade(self);
        let (client, pattern) = (self.client.clone(), self.pattern.clone());
        *listener = Some(tokio::spawn(serve(me, client, pattern)));
    }

    fn ring(&self, channel: &str, message: &str) {
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = lanes.get(channel) {
            if let Some(grant) = message.strip_prefix("g ").and_then(grant) {
                *b.granted.lock().unwrap_or_else(|e| e.into_inner()) = Some(grant);
            }
            // A permit, not a broadcast: kept if the waiter is between two tries.
            b.notify.notify_one();
        }
    }
}

/// A grant's `PAUSED_MS ALONG`: how long the lane is paused, and whether the ticket's backend
/// read came along.
fn grant(text: &str) -> Option<(i64, bool)> {
    let (ms, along) = text.split_once(' ').unwrap_or((text, "0"));
    Some((ms.parse().ok()?, along == "1"))
}

/// One waiter's bell, and what a release that granted its ticket said of the lane's pause
/// and of its backend read.
#[derive(Default)]
pub(super) struct Bell {
    pub(super) notify: Notify,
    granted: Mutex<Option<(i64, bool)>>,
}

impl Bell {
    /// `Some((paused ms, read along))` once a release has granted the ticket its permits.
    pub(super) fn granted(&self) -> Option<(i64, bool)> {
        *self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Bells {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Receive "freed" messages and wake the waiters they name, for as long as the store lives.
async fn serve(bells: Weak<Bells>, client: redis::Client, pattern: String) {
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.psubscribe(&pattern).await.is_ok() {
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    let Some(b) = bells.upgrade() else { return };
                    let text: String = msg.get_payload().unwrap_or_default();
                    b.ring(msg.get_channel_name(), &text);
                }
            }
        }
        if bells.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(RECONNECT).await;
    }
}
