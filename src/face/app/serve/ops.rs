//! The operations endpoints beside `/mcp`, for orchestrators and Prometheus: `/healthz` (the
//! process answers), `/readyz` (the lane store answers and the gateway is not draining; the
//! manifest is loaded before the listener opens) and `/metrics` (OpenMetrics text, which
//! Prometheus scrapes). The probes carry no data and take no token, and answer whatever the
//! `Host` (an orchestrator probes by address); `/metrics` names tools and tenants, so it takes
//! the same `Host` check and bearer token as `/mcp`.

use std::sync::Arc;

use super::gateway::Gateway;

/// The endpoint a path names, if it is one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    Health,
    Ready,
    Metrics,
}

impl Endpoint {
    pub(super) fn of(path: &str) -> Option<Endpoint> {
        match path {
            "/healthz" => Some(Endpoint::Health),
            "/readyz" => Some(Endpoint::Ready),
            "/metrics" => Some(Endpoint::Metrics),
            _ => None,
        }
    }

    /// Whether it needs the `Host` check and the token.
    pub(super) fn guarded(self) -> bool {
        self == Endpoint::Metrics
    }
}

/// What an endpoint answers: status, content type, body.
pub(super) type Reply = (hyper::StatusCode, &'static str, String);

pub(super) async fn answer(gateway: &Arc<Gateway>, e: Endpoint) -> Reply {
    const TEXT: &str = "text/plain; charset=utf-8";
    match e {
        Endpoint::Health => (hyper::StatusCode::OK, TEXT, "ok\n".into()),
        Endpoint::Ready => match gateway.ready().await {
            Ok(()) => (hyper::StatusCode::OK, TEXT, "ready\n".into()),
            Err(why) => (
                hyper::StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: {why}\n"),
            ),
        },
        Endpoint::Metrics => (
            hyper::StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            gateway.metrics_text().await,
        ),
    }
}
