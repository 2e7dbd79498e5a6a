//! The HTTP face's listener, made to hold under connections that never say anything: at most
//! `connections_per_client` open connections from one address (one more is told `429` and
//! closed at once), a request's headers within `header_timeout` (hyper closes the connection
//! otherwise), and at the descriptor limit the oldest connection that has not yet sent a whole
//! request is closed to make room — never a busy loop around a failing `accept`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What bounds the connections.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub per_client: u32,
}

#[derive(Default)]
struct Open {
    by_client: HashMap<IpAddr, u32>,
    /// Connections that have not yet sent a whole request, oldest first.
    silent: BTreeMap<u64, JoinHandle<()>>,
    next: u64,
}

/// The open connections.
#[derive(Default, Clone)]
pub(super) struct Conns(Arc<Mutex<Open>>);

/// One connection's place: told when its first request came ([`Conn::spoke`]); gone when it
/// drops.
pub(super) struct Conn {
    conns: Conns,
    id: u64,
    client: IpAddr,
    spoke: AtomicBool,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for one more from `client` (`None`: it has `per_client` open).
    fn admit(&self, client: IpAddr, per_client: u32) -> Option<Conn> {
        let mut o = self.lock();
        let n = o.by_client.entry(client).or_default();
        if *n >= per_client {
            return None;
        }
        *n += 1;
        o.next += 1;
        Some(Conn {
            conns: self.clone(),
            id: o.next,
            client,
            spoke: AtomicBool::new(false),
        })
    }

    /// Close the oldest connection that has sent no whole request, and wait until its
    /// descriptor is given back; whether there was one.
    async fn shed(&self) -> bool {
        let oldest = self.lock().silent.pop_first();
        match oldest {
            Some((_, task)) => {
                task.abort();
                let _ = task.await;
                true
            }
            None => false,
        }
    }
}

impl Conn {
    /// Its first whole request came: it is no longer a candidate to shed.
    pub(super) fn spoke(&self) {
        if !self.spoke.load(Ordering::Relaxed) {
            let mut o = self.conns.lock();
            self.spoke.store(true, Ordering::Relaxed);
            o.silent.remove(&self.id);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut o = self.conns.lock();
        o.silent.remove(&self.id);
        if let Some(n) = o.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                o.by_client.remove(&self.client);
            }
        }
    }
}

/// Whether an `accept` error means the process (or the system) is out of descriptors.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accept until `stop`; each admitted connection is served by `serve` on a task of its own.
pub(super) async fn accept<F, Fut>(
    listener: TcpListener,
    stop: CancellationToken,
    bounds: Bounds,
    conns: Conns,
    serve: F,
) where
    F: Fn(TcpStream, Arc<Conn>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) if out_of_descriptors(&e) => {
                // Make room by closing the oldest silent connection; with none, wait a little
                // (the header timeout frees descriptors) rather than spin on `accept`.
                if !conns.shed().await {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
            // The peer left before it was accepted, and the like: nothing to do.
            Err(_) => continue,
        };
        let Some(conn) = conns.admit(peer.ip(), bounds.per_client) else {
            refuse(stream);
            continue;
        };
        let conn = Arc::new(conn);
        let id = conn.id;
        let task = tokio::spawn(super::repoll::Repoll::new(serve(stream, conn.clone())));
        let mut o = conns.lock();
        // It may have spoken already (then it is no candidate); if it has ended, dropping
        // `conn` below takes it off the list.
        if !conn.spoke.load(Ordering::Relaxed) {
            o.silent.insert(id, task);
        }
    }
}

/// Tell a client over its limit so, without reading what it sent, and close.
fn refuse(stream: TcpStream) {
    let text = "too many connections from this address\n";
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}
