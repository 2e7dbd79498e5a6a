//! Streamable HTTP on `/mcp` (rmcp's `StreamableHttpService` on hyper): `Host` is checked
//! against loopback names and `--allow-host`, `Origin` against `--allow-origin` (none given:
//! a request that carries an `Origin` is refused, so no web page reaches the gateway by DNS
//! rebinding), and, when the manifest has `[serve.tokens]`, `Authorization: Bearer` against
//! them (compared as SHA-256 digests): a request without a valid token gets 401; a valid one
//! names its tenant. No token is ever printed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::gateway::Gateway;
use super::handler::{Handler, Tenant};

/// Token digest → tenant.
pub type Tokens = HashMap<[u8; 32], String>;

/// The digest a token is looked up by.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// What the HTTP face is told.
pub struct HttpOptions {
    pub tokens: Tokens,
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    pub tenant: String,
}

type Body = BoxBody<Bytes, Infallible>;

fn unauthorized() -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from_static(
            b"{\"error\":\"a valid bearer token is required (Authorization: Bearer TOKEN)\"}",
        ))
        .boxed(),
    );
    *r.status_mut() = hyper::StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    r
}

/// The tenant of a request's bearer token (`Err`: refuse it).
fn tenant_of(tokens: &Tokens, req: &Request<hyper::body::Incoming>) -> Result<Option<String>, ()> {
    if tokens.is_empty() {
        return Ok(None);
    }
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(())?;
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .ok_or(())?;
    tokens
        .get(&digest(token.trim()))
        .cloned()
        .map(Some)
        .ok_or(())
}

/// Accept connections until `stop` is cancelled; `sessions` ends every MCP session (after
/// the gateway's drain).
pub async fn serve(
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
    let tenant = opts.tenant;
    let g = gateway.clone();
    let service: StreamableHttpService<Handler, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Handler::new(g.clone(), tenant.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let tokens = Arc::new(opts.tokens);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        // Answers are small writes: send each at once.
        let _ = stream.set_nodelay(true);
        let (service, tokens) = (service.clone(), tokens.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                let mut service = service.clone();
                let tenant = tenant_of(&tokens, &req);
                async move {
                    use tower_service::Service;
                    if req.uri().path() != "/mcp" {
                        let mut r = Response::new(
                            Full::new(Bytes::from_static(b"not found; MCP is at /mcp")).boxed(),
                        );
                        *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                        return Ok::<_, Infallible>(r);
                    }
                    match tenant {
                        Err(()) => Ok(unauthorized()),
                        Ok(t) => {
                            if let Some(t) = t {
                                req.extensions_mut().insert(Tenant(t));
                            }
                            service.call(req).await
                        }
                    }
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}
