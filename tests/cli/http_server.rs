//! A real HTTP/1.1 server for the tests, on 127.0.0.1 with an OS-chosen port. It records
//! every request (arrival time, headers, body) and the peak number in flight, and misbehaves
//! on demand: 429 with Retry-After, 503, slow answers, a connection closed mid-body, garbage.
//! Written on raw sockets because the misbehaviour is the point; one thread per connection,
//! `Connection: close` on every answer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// The body as sent (an OTLP export is protobuf, not text).
    pub raw: Vec<u8>,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    requests: Vec<Request>,
    in_flight: usize,
    peak: usize,
    seen: HashMap<String, u32>,
    /// Effects made, by idempotency key: how many times each was applied.
    effects: HashMap<String, u32>,
    /// `/capacity/C/MS`: calls in (served or queued), calls served now.
    cap_in: usize,
    cap_serving: usize,
    /// `/quota/N/SECS`: calls in the current window, and when it began.
    quota: (u64, Option<Instant>),
    cap_peak: usize,
}

pub struct TestServer {
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || handle(conn, &st));
            }
        });
        TestServer { base, state }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn requests_to(&self, prefix: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.starts_with(prefix))
            .collect()
    }

    pub fn peak_in_flight(&self) -> usize {
        self.state.lock().unwrap().peak
    }

    /// The most calls `/capacity/C/MS` had in at once (served and queued; answered ones are
    /// out before their answer is written).
    pub fn capacity_peak(&self) -> usize {
        self.state.lock().unwrap().cap_peak
    }

    /// How many times each idempotency key's effect was applied (`POST /effects/MODE`).
    pub fn effects(&self) -> HashMap<String, u32> {
        self.state.lock().unwrap().effects.clone()
    }
}

/// `POST /effects/MODE` (a write keyed by its `Idempotency-Key`): `fast` applies and
/// answers; `applied_late` applies, then answers only after 3 s; `lost` — the first time a key
/// arrives — answers after 3 s and never applies (as a request lost on its way would), and
/// applies at once any later time. It does not dedupe: a key sent twice is applied twice,
/// so a test sees every duplicate.
/// `GET /effects` answers the key's effect (`applied: true`) or 404.
fn effects(out: &mut TcpStream, req: &Request, mode: Option<&str>, state: &Arc<Mutex<State>>) {
    let Some(key) = req.headers.get("idempotency-key").cloned() else {
        return send(
            out,
            "400 Bad Request",
            "text/plain",
            "",
            "no Idempotency-Key",
        );
    };
    let found = |s: &State| s.effects.get(&key).copied();
    let Some(mode) = mode else {
        return match found(&state.lock().unwrap()) {
            Some(n) => {
                let body = serde_json::json!({"key": key, "applied": true, "times": n});
                send(out, "200 OK", "application/json", "", &body.to_string())
            }
            None => send(out, "404 Not Found", "text/plain", "", "no such effect"),
        };
    };
    let first = {
        let mut s = state.lock().unwrap();
        let n = s.seen.entry(format!("effects:{key}")).or_default();
        *n += 1;
        *n == 1
    };
    let apply = |s: &Arc<Mutex<State>>| {
        let mut s = s.lock().unwrap();
        *s.effects.entry(key.clone()).or_default() += 1;
    };
    match mode {
        "lost" if first => std::thread::sleep(Duration::from_secs(3)),
        "applied_late" => {
            apply(state);
            std::thread::sleep(Duration::from_secs(3));
        }
        _ => apply(state),
    }
    let body = serde_json::json!({"key": key, "mode": mode});
    send(out, "200 OK", "application/json", "", &body.to_string());
}

/// `/quota/N/SECS`: N calls a window of SECS seconds (from its first call), each answer stating
/// what remains and when the window resets (`X-RateLimit-*`); a call beyond them gets 429.
fn quota(out: &mut TcpStream, state: &Arc<Mutex<State>>, n: u64, secs: u64) {
    let (used, reset) = {
        let mut s = state.lock().unwrap();
        let now = Instant::now();
        let began = match s.quota.1 {
            Some(b) if now.duration_since(b) < Duration::from_secs(secs) => b,
            _ => {
                s.quota = (0, Some(now));
                now
            }
        };
        s.quota.0 += 1;
        let left = Duration::from_secs(secs).saturating_sub(now.duration_since(began));
        (s.quota.0, left.as_secs_f64().ceil() as u64)
    };
    let extra = format!(
        "X-RateLimit-Limit: {n}\r\nX-RateLimit-Remaining: {}\r\nX-RateLimit-Reset: {reset}\r\n",
        n.saturating_sub(used)
    );
    if used > n {
        return send(
            out,
            "429 Too Many Requests",
            "text/plain",
            &extra,
            "quota spent",
        );
    }
    send(
        out,
        "200 OK",
        "application/json",
        &extra,
        &format!("{{\"call\": {used}}}"),
    );
}

/// `/capacity/C/MS`: a backend with a hidden capacity — up to `c` calls served at once in
/// `ms` each, the rest queued (their latency grows), 429 beyond twice its capacity.
fn capacity(out: &mut TcpStream, state: &Arc<Mutex<State>>, c: usize, ms: u64) {
    {
        let mut s = state.lock().unwrap();
        if s.cap_in >= 2 * c {
            drop(s);
            return send(
                out,
                "429 Too Many Requests",
                "text/plain",
                "",
                "over capacity",
            );
        }
        s.cap_in += 1;
        s.cap_peak = s.cap_peak.max(s.cap_in);
    }
    loop {
        {
            let mut s = state.lock().unwrap();
            if s.cap_serving < c {
                s.cap_serving += 1;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(ms));
    {
        let mut s = state.lock().unwrap();
        s.cap_serving -= 1;
        s.cap_in -= 1;
    }
    send(out, "200 OK", "application/json", "", "{\"ok\": true}");
}

fn handle(stream: TcpStream, state: &Arc<Mutex<State>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let req = Request {
        method,
        path: path.clone(),
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
        raw: body,
        at: Instant::now(),
    };
    {
        let mut s = state.lock().unwrap();
        s.requests.push(req.clone());
        s.in_flight += 1;
        s.peak = s.peak.max(s.in_flight);
    }
    let mut out = stream;
    respond(&mut out, &req, state);
    state.lock().unwrap().in_flight -= 1;
}

fn send(out: &mut TcpStream, status: &str, content_type: &str, extra: &str, body: &str) {
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    let _ = out.flush();
}

fn respond(out: &mut TcpStream, req: &Request, state: &Arc<Mutex<State>>) {
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["echo", ..] => {
            let body = serde_json::json!({
                "method": req.method,
                "path": path,
                "query": query,
                "body": serde_json::from_str::<serde_json::Value>(&req.body).ok(),
                "idempotency_key": req.headers.get("idempotency-key"),
                "traceparent": req.headers.get("traceparent"),
            });
            send(out, "200 OK", "application/json", "", &body.to_string());
        }
        ["slow", ms] => {
            std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(100)));
            send(
                out,
                "200 OK",
                "application/json",
                "",
                &format!("{{\"slept\": {ms}}}"),
            );
        }
        ["text"] => send(out, "200 OK", "text/plain", "", "plain text"),
        ["quota", n, secs] => quota(
            out,
            state,
            n.parse().unwrap_or(3),
            secs.parse().unwrap_or(1),
        ),
        ["capacity", c, ms] => capacity(
            out,
            state,
            c.parse().unwrap_or(4),
            ms.parse().unwrap_or(200),
        ),
        ["effects"] if req.method == "GET" => effects(out, req, None, state),
        ["effects", mode] if req.method == "POST" => effects(out, req, Some(mode), state),
        // An OTLP/HTTP collector: an empty ExportTraceServiceResponse is zero bytes.
        ["v1", "traces"] => send(out, "200 OK", "application/x-protobuf", "", ""),
        ["status", code] => {
            let code: u16 = code.parse().unwrap_or(500);
            send(
                out,
                &format!("{code} Whatever"),
                "text/plain",
                "",
                &format!("server says {code}"),
            );
        }
        ["once", code, key] => {
            let n = {
                let mut s = state.lock().unwrap();
                let n = s.seen.entry(key.to_string()).or_default();
                *n += 1;
                *n
            };
            if n == 1 {
                let extra = if *code == "429" {
                    "Retry-After: 1\r\n"
                } else {
                    ""
                };
                send(
                    out,
                    &format!("{code} Not Now"),
                    "text/plain",
                    extra,
                    "try again later",
                );
            } else {
                send(
                    out,
                    "200 OK",
                    "application/json",
                    "",
                    &format!("{{\"ok\": true, \"attempt\": {n}}}"),
                );
            }
        }
        ["reset"] => {
            let _ = write!(out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\npartial body");
            let _ = out.flush();
            let _ = out.shutdown(std::net::Shutdown::Both);
        }
        ["garbage"] => {
            let _ = out.write_all(b"this is not http at all\r\n\r\n");
            let _ = out.shutdown(std::net::Shutdown::Both);
        }
        _ => send(out, "404 Not Found", "text/plain", "", "no such thing"),
    }
}
