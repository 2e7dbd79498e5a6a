//! Streamable HTTP on `/mcp` (rmcp's `StreamableHttpService` on hyper): `Host` is checked
//! against loopback names and `--allow-host`, `Origin` against `--allow-origin` (none given:
//! a request that carries an `Origin` is refused, so no web page reaches the gateway by DNS
//! rebinding), and who the request is by its bearer token (`door.rs`: `[serve.tokens]`, or a
//! JWT of `[serve.auth]`, whose metadata document is served here too). No token is ever
//! printed.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::audit::Event;
use super::caller::{Caller, Via};
use super::door::Door;
use super::entry::HttpEntry;
use super::fast::{self, Answer};
use super::gateway::{Gateway, Session};
use super::handler::Handler;
use super::order::Arrival;
use super::order::Pass;
use super::sessions::{Full as SessionsFull, Sessions};
use crate::manifest::Op;

/// What the HTTP face is told.
pub(super) struct HttpOptions {
    /// Who may come in.
    pub door: Door,
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    /// `[serve.limits]`.
    pub limits: crate::manifest::ServeLimits,
}

type Body = BoxBody<Bytes, Infallible>;
type Service = StreamableHttpService<Handler, LocalSessionManager>;
/// The largest request body read (rmcp's own limit).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// What every request is routed with.
struct Route {
    gateway: Arc<Gateway>,
    sessions: Arc<Sessions>,
    service: Service,
    door: Door,
    hosts: Vec<String>,
    body_timeout: std::time::Duration,
}

fn plain(status: hyper::StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r
}

tokio::task_local! {
    /// The session a request's handler created (an `initialize`), for the short way.
    static CREATED: std::cell::RefCell<Option<Arc<Session>>>;
}

impl Route {
    /// A request of no session (an `initialize`, or a stateless one) goes to rmcp — an
    /// `initialize` only while the session limits have room.
    async fn create(
        &self,
        req: Request<Full<Bytes>>,
        caller: &Caller,
        body: &Bytes,
    ) -> Response<Body> {
        let initialize = serde_json::from_slice::<serde_json::Value>(body)
            .is_ok_and(|m| m["method"] == "initialize");
        if initialize {
            if let Err(full) = self.admit(caller) {
                return sessions_full(&full);
            }
        }
        self.rmcp(req, caller, None).await
    }

    /// Room for one more session of `caller`.
    fn admit(&self, caller: &Caller) -> Result<(), SessionsFull> {
        let own = caller.session_limit(&self.gateway.catalog.manifest());
        self.sessions.admit(caller, own)
    }

    /// rmcp's answer. A session it opens — an `initialize`'s, or a remembered one opened again
    /// by the request that came back with its id — is registered under its id as `caller`'s,
    /// before the client has the answer. A DELETE it accepted is `200` (the SDKs take `202`
    /// for a failure).
    async fn rmcp(
        &self,
        mut req: Request<Full<Bytes>>,
        caller: &Caller,
        pass: Option<Arc<Pass>>,
    ) -> Response<Body> {
        use tower_service::Service;
        if let Some(p) = pass {
            req.extensions_mut().insert(Arrival(p));
        }
        let delete = req.method() == hyper::Method::DELETE;
        let asked = req
            .headers()
            .get(super::sessions::SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let (mut r, created) = CREATED
            .scope(std::cell::RefCell::new(None), async {
                let r = self
                    .service
                    .clone()
                    .call(req)
                    .await
                    .unwrap_or_else(|e| match e {});
                (r, CREATED.with(|c| c.borrow_mut().take()))
            })
            .await;
        let id = r
            .headers()
            .get(super::sessions::SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or(asked);
        if let (Some(session), Some(id)) = (created, id) {
            self.sessions.register(&id, &session, caller);
            self.sessions.share(&id).await;
        }
        if delete && r.status() == hyper::StatusCode::ACCEPTED {
            *r.status_mut() = hyper::StatusCode::OK;
        }
        r
    }

    /// Check the path and the token, then answer on the short way (`fast.rs`) or rmcp's.
    async fn answer(&self, mut req: Request<hyper::body::Incoming>) -> Response<Body> {
        let endpoint = super::ops::Endpoint::of(req.uri().path());
        if let Some(doc) = self.door.metadata(req.uri().path()) {
            return doc;
        }
        if matches!(req.uri().path(), "/" | "/status/events" | "/status/answer") {
            return self.status(req).await;
        }
        if endpoint.is_none() && req.uri().path() != "/mcp" {
            return plain(hyper::StatusCode::NOT_FOUND, "not found; MCP is at /mcp");
        }
        if let Some(e) = endpoint.filter(|e| !e.guarded()) {
            return ops_reply(super::ops::answer(&self.gateway, e).await);
        }
        let caller = match self.door.identify(req.headers()).await {
            Err(refused) => return refused,
            Ok(c) => c,
        };
        if let Some(e) = endpoint {
            let host = req
                .headers()
                .get(hyper::header::HOST)
                .and_then(|v| v.to_str().ok());
            if !host.is_some_and(|h| super::entry::host_allowed(h, &self.hosts)) {
                return plain(hyper::StatusCode::FORBIDDEN, "forbidden: Host not allowed");
            }
            if !self.may(&caller, req.headers(), Op::Metrics) {
                return self.ops_refused(&caller, "/metrics", Op::Metrics);
            }
            return ops_reply(super::ops::answer(&self.gateway, e).await);
        }
        req.extensions_mut().insert(caller.clone());
        // A same-origin request (a page on this gateway's own allowed name and port) is no
        // cross-origin one: its `Origin` is taken here and not judged again.
        if super::entry::same_origin(req.headers(), &self.hosts) {
            req.headers_mut().remove(hyper::header::ORIGIN);
        }
        let session_id = req
            .headers()
            .get(super::sessions::SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // A session is its creator's: to another tenant's token, or another person's, it does
        // not exist.
        if let Some(id) = &session_id {
            let found = self.sessions.fetch(id).await;
            if found == super::sessions::Found::Ended
                || !self.sessions.owned_by(id, &caller.owner())
            {
                return session_not_found();
            }
            // One let go for idleness opens again, if there is room for it.
            if self.sessions.remembered(id) {
                if let Err(full) = self.admit(&caller) {
                    return sessions_full(&full);
                }
            }
        }
        let (parts, body) = req.into_parts();
        let body = match self.read_body(&parts, body).await {
            Ok(b) => b,
            Err(refused) => return refused,
        };
        let Some(session_id) = session_id else {
            if let HttpEntry::Refused { status, body } =
                super::entry::http_request(&parts, &self.hosts, &body)
            {
                let status =
                    hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_REQUEST);
                return json_reply(status, body);
            }
            let req = Request::from_parts(parts, Full::new(body.clone()));
            return self.create(req, &caller, &body).await;
        };
        let pass = self.sessions.pass(&session_id);
        let message = match super::entry::http_request(&parts, &self.hosts, &body) {
            HttpEntry::Refused { status, body } => {
                let status =
                    hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_REQUEST);
                return json_reply(status, body);
            }
            HttpEntry::Rmcp => {
                let req = Request::from_parts(parts, Full::new(body));
                return self.rmcp(req, &caller, pass).await;
            }
            HttpEntry::Short(message) => message,
            HttpEntry::Task(t) => return self.task(&parts, (&session_id, &caller), t, pass).await,
        };
        let asked = (session_id.as_str(), &caller);
        match fast::answer(&self.gateway, &self.sessions, asked, message, pass.clone()).await {
            Some(Answer::Json(json)) => json_reply(hyper::StatusCode::OK, json),
            Some(Answer::Events(events)) => {
                use futures_util::StreamExt;
                event_stream(events.boxed())
            }
            Some(Answer::Accepted) => plain(hyper::StatusCode::ACCEPTED, ""),
            None => {
                let req = Request::from_parts(parts, Full::new(body));
                self.rmcp(req, &caller, pass).await
            }
        }
    }

    /// A task request of session `id`, or its call started as a task (the session opened
    /// here first when another replica opened it: rmcp opens it for a `ping`).
    async fn task(
        &self,
        parts: &http::request::Parts,
        (id, caller): (&str, &Caller),
        t: super::entry::Tasked,
        arrival: Option<Arc<Pass>>,
    ) -> Response<Body> {
        let tasks = self.gateway.tasks.clone();
        let (rid, answer) = match t {
            super::entry::Tasked::Ask { id, asked } => {
                (id, tasks.answer(&self.gateway, caller, asked).await)
            }
            super::entry::Tasked::Call { call, ttl, key } => {
                if self.sessions.get(id).is_none() {
                    let mut open = Request::builder().method(hyper::Method::POST).uri("/mcp");
                    for (k, v) in &parts.headers {
                        open = open.header(k, v);
                    }
                    let ping = r#"{"jsonrpc":"2.0","id":"flux-tools-open","method":"ping"}"#;
                    if let Ok(req) = open.body(Full::new(Bytes::from_static(ping.as_bytes()))) {
                        drop(self.rmcp(req, caller, None).await);
                    }
                }
                let Some((_, session)) = self.sessions.get(id) else {
                    return session_not_found();
                };
                let what = (call.name, call.args);
                let how = (ttl, key, arrival);
                let started = tasks.start(&self.gateway, session, caller, what, how);
                (call.id, started.await)
            }
        };
        json_reply(hyper::StatusCode::OK, super::tasks::reply(&rid, answer))
    }

    /// A POST's body, read within the body timeout (`408` past it) and the size limit (`413`);
    /// what it says is judged by `entry.rs`. Other methods have no body.
    async fn read_body(
        &self,
        parts: &http::request::Parts,
        body: hyper::body::Incoming,
    ) -> Result<Bytes, Response<Body>> {
        if parts.method != hyper::Method::POST {
            return Ok(Bytes::new());
        }
        let read = Limited::new(body, MAX_BODY).collect();
        let body = match tokio::time::timeout(self.body_timeout, read).await {
            Err(_) => {
                let why = "the request body did not arrive within the body timeout";
                return Err(plain(hyper::StatusCode::REQUEST_TIMEOUT, why));
            }
            Ok(Err(_)) => {
                return Err(plain(
                    hyper::StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                ))
            }
            Ok(Ok(b)) => b.to_bytes(),
        };
        Ok(body)
    }
}

impl Route {
    /// The status page, its stream of snapshots, and its answers to approvals.
    async fn status(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if !super::entry::host_allowed(&host, &self.hosts) {
            return plain(hyper::StatusCode::FORBIDDEN, "forbidden: Host not allowed");
        }
        let path = req.uri().path().to_string();
        match (req.method().clone(), path.as_str()) {
            (hyper::Method::GET, "/") => {
                let page = (
                    hyper::StatusCode::OK,
                    "text/html; charset=utf-8",
                    super::status::PAGE.to_string(),
                );
                let mut r = ops_reply(page);
                // No other site may frame the page (clickjacking an Approve).
                let h = r.headers_mut();
                h.insert(
                    hyper::header::X_FRAME_OPTIONS,
                    hyper::header::HeaderValue::from_static("DENY"),
                );
                h.insert(
                    hyper::header::CONTENT_SECURITY_POLICY,
                    hyper::header::HeaderValue::from_static("frame-ancestors 'none'"),
                );
                h.insert(
                    hyper::header::X_CONTENT_TYPE_OPTIONS,
                    hyper::header::HeaderValue::from_static("nosniff"),
                );
                r
            }
            (hyper::Method::GET, "/status/events") => {
                // The admin, and a role with `status`, see everything; anyone else with a
                // valid token, their own tenant's.
                if self.door.is_admin(req.headers()) {
                    return self.snapshots(None);
                }
                let caller = match self.door.identify(req.headers()).await {
                    Err(refused) => return refused,
                    Ok(c) => c,
                };
                let all = caller.via == Via::Local || self.may(&caller, req.headers(), Op::Status);
                self.snapshots((!all).then(|| caller.tenant.clone()))
            }
            (hyper::Method::POST, "/status/answer") => self.answer_approval(req, host).await,
            _ => plain(hyper::StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        }
    }

    /// Whether `caller` may use `op`: the admin token may; a caller of an open gateway may;
    /// else its roles say (without `[roles]`, a static token may read `/metrics`, as before
    /// roles were).
    fn may(&self, caller: &Caller, headers: &hyper::HeaderMap, op: Op) -> bool {
        if self.door.is_admin(headers) || caller.via == Via::Local {
            return true;
        }
        let m = self.gateway.catalog.manifest();
        if !m.roles.declared() {
            return op == Op::Metrics && caller.via == Via::Token;
        }
        caller.may(&m, op)
    }

    /// The refusal of an operations request, said in the audit trail.
    fn ops_refused(&self, caller: &Caller, what: &str, op: Op) -> Response<Body> {
        let needs = Op::ALL
            .iter()
            .find(|(_, o)| *o == op)
            .map_or("", |(n, _)| *n);
        let why = format!("needs the admin token or a role with ops = [\"{needs}\"]");
        let fields = serde_json::json!({"path": what, "reason": why});
        self.gateway
            .audit
            .record(Event::OpsRefused, Some(caller), fields);
        let mut r =
            Response::new(Full::new(Bytes::from(format!("forbidden: {what} {why}\n"))).boxed());
        *r.status_mut() = hyper::StatusCode::FORBIDDEN;
        r
    }

    /// A snapshot a second — of everything, or (`only`) of one tenant — as an event stream,
    /// for as long as the page reads it.
    fn snapshots(&self, only: Option<String>) -> Response<Body> {
        use futures_util::StreamExt;
        let g = self.gateway.clone();
        let ticks = futures_util::stream::unfold((g, true), move |(g, first)| {
            let only = only.clone();
            async move {
                if !first {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                let event = format!("data: {}\n\n", g.snapshot(only.as_deref()).await);
                Some((Bytes::from(event), (g, false)))
            }
        });
        event_stream(ticks.boxed())
    }

    /// Approve or deny a parked call from the page: the admin token or a role with `approve`,
    /// from the page itself.
    async fn answer_approval(
        &self,
        req: Request<hyper::body::Incoming>,
        host: String,
    ) -> Response<Body> {
        use hyper::StatusCode;
        if !super::status::same_site(req.headers(), &host) {
            return plain(
                StatusCode::FORBIDDEN,
                "forbidden: answers come from the status page itself",
            );
        }
        let by = if self.door.is_admin(req.headers()) {
            "admin".to_string()
        } else {
            let roles = self.gateway.catalog.manifest().roles.declared();
            if self.door.admin.is_none() && !roles {
                return plain(
                    StatusCode::FORBIDDEN,
                    "forbidden: the manifest has no [serve] admin_token",
                );
            }
            let caller = match self.door.identify(req.headers()).await {
                Err(refused) => return refused,
                Ok(c) => c,
            };
            if caller.via == Via::Local || !self.may(&caller, req.headers(), Op::Approve) {
                return self.ops_refused(&caller, "/status/answer", Op::Approve);
            }
            caller.who().to_string()
        };
        let Ok(body) = Limited::new(req.into_body(), 64 * 1024).collect().await else {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
        };
        let reply = match super::status::parse_answer(&body.to_bytes()) {
            Err(e) => (StatusCode::BAD_REQUEST, e),
            Ok((id, hash, d)) if id.starts_with("tool:") => {
                match super::reviewer::decide(&self.gateway, &format!("{id}@{hash}"), d, &by).await
                {
                    Ok(said) => (StatusCode::OK, said),
                    Err(e) => (StatusCode::CONFLICT, e),
                }
            }
            Ok((id, hash, d)) => match self.gateway.answer_parked(&id, &hash, d, &by).await {
                Ok(w) => (
                    StatusCode::OK,
                    format!(
                        "{}: call {} of {}",
                        if d == super::super::parked::Decision::Approve {
                            "approved"
                        } else {
                            "denied"
                        },
                        w.id,
                        w.tool
                    ),
                ),
                Err(e) => (StatusCode::CONFLICT, e),
            },
        };
        ops_reply((reply.0, "text/plain; charset=utf-8", reply.1 + "\n"))
    }
}

/// An event stream of `events` (rmcp's body type is `Sync`; the stream is polled by one task
/// only).
fn event_stream(events: futures_util::stream::BoxStream<'static, Bytes>) -> Response<Body> {
    use futures_util::StreamExt;
    let frames = sync_wrapper::SyncStream::new(
        events.map(|b| Ok::<_, Infallible>(hyper::body::Frame::data(b))),
    );
    let mut r = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(frames)));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    r
}

fn ops_reply((status, kind, text): super::ops::Reply) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(kind),
    );
    r
}

/// A JSON body with `status`.
fn json_reply(status: hyper::StatusCode, json: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(json)).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The answer to an `initialize` (or a remembered session's return) past a session limit.
fn sessions_full(full: &SessionsFull) -> Response<Body> {
    let (status, why) = match full {
        SessionsFull::All(n) => (
            hyper::StatusCode::SERVICE_UNAVAILABLE,
            format!("the gateway holds its limit of {n} sessions ([serve.limits] sessions); end one (DELETE) or try again later"),
        ),
        SessionsFull::Tenant(n) => (
            hyper::StatusCode::TOO_MANY_REQUESTS,
            format!("this tenant holds its limit of {n} sessions ([serve.limits] sessions_per_tenant); end one (DELETE) or try again later"),
        ),
        SessionsFull::Caller(n) => (
            hyper::StatusCode::TOO_MANY_REQUESTS,
            format!("you hold the limit of {n} sessions your roles allow ([roles.NAME] sessions); end one (DELETE) or try again later"),
        ),
    };
    let mut r = json_reply(
        status,
        super::fault::Fault::Busy(why).line(&serde_json::Value::Null),
    );
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("5"),
    );
    r
}

/// The answer to a session id this client cannot use (unknown, or another tenant's), as rmcp
/// answers an unknown one.
fn session_not_found() -> Response<Body> {
    plain(hyper::StatusCode::NOT_FOUND, "Not Found: Session not found")
}

/// Accept connections until `stop` is cancelled; `sessions` ends every MCP session (after
/// the gateway's drain).
pub(super) async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    opts: HttpOptions,
    (stop, sessions): (CancellationToken, CancellationToken),
) {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "[::1]"]
        .map(String::from)
        .to_vec();
    hosts.extend(opts.hosts);
    // No SSE priming event before each answer: a call's stream is not resumed after a
    // disconnect (a gateway call that lost its client is cancelled), so the event is a write
    // and a flush for nothing.
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_sse_retry(None)
        .with_cancellation_token(sessions);
    config = if opts.origins.is_empty() {
        config.enforce_origin_validation()
    } else {
        config.with_allowed_origins(opts.origins)
    };
    // Sessions idle for `session_idle` are let go; this table remembers them for rmcp to open
    // again when their client comes back.
    let table = gateway.http_sessions.clone();
    config.session_store = Some(Arc::new(super::sessions::Store(table.clone())));
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(opts.limits.session_idle);
    // Nor is an answer kept for a resume that never comes (rmcp keeps each for 60 s: a
    // `tools/list` of 500 tools is 80 KiB a request).
    manager.session_config.completed_cache_ttl = std::time::Duration::ZERO;
    let (tenant, g) = (opts.door.tenant.clone(), gateway.clone());
    let service: Service = StreamableHttpService::new(
        move || {
            let h = Handler::new(g.clone(), tenant.clone());
            // Tell the request that is creating the session (an `initialize`) of it.
            let _ = CREATED.try_with(|c| *c.borrow_mut() = Some(h.session().clone()));
            Ok(h)
        },
        Arc::new(manager),
        config.clone(),
    );
    let route = Arc::new(Route {
        gateway,
        sessions: table,
        service,
        door: opts.door,
        hosts: config.allowed_hosts,
        body_timeout: opts.limits.body_timeout,
    });
    let bounds = super::listen::Bounds {
        per_client: opts.limits.connections_per_client,
    };
    let header_timeout = opts.limits.header_timeout;
    let conns = super::listen::Conns::default();
    super::listen::accept(listener, stop, bounds, conns, move |stream, conn| {
        // Answers are small writes: send each at once.
        let _ = stream.set_nodelay(true);
        let route = route.clone();
        async move {
            let svc = hyper::service::service_fn(move |req| {
                conn.spoke();
                let route = route.clone();
                async move { Ok::<_, Infallible>(route.answer(req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(io, svc)
                .await;
        }
    })
    .await;
}
