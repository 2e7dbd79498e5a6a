//! A minimal keep-alive HTTP/1.1 server for the HTTP benchmark: answers every request with a
//! small JSON body, so the figures measure the client side (flux-tools or a load generator).
//!
//! Usage: http_server PORT [COUNT_FILE] — with COUNT_FILE, the number of connections accepted
//! so far is written there after each accept (to see how many a client opened).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";

fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(8766);
    let count_file = std::env::args().nth(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        let mut accepted = 0u64;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                continue;
            };
            accepted += 1;
            if let Some(f) = &count_file {
                let _ = std::fs::write(f, accepted.to_string());
            }
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut filled = 0;
                loop {
                    let Ok(n) = sock.read(&mut buf[filled..]).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    filled += n;
                    // Answer every complete request head in the buffer (bodies are not expected).
                    while let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                        if sock.write_all(RESPONSE).await.is_err() {
                            return;
                        }
                        buf.copy_within(end + 4..filled, 0);
                        filled -= end + 4;
                    }
                    if filled == buf.len() {
                        return;
                    }
                }
            });
        }
    });
}
