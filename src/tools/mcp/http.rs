//! A session with an MCP server over Streamable HTTP: its headers, and — for a server with
//! `auth` — a client that signs each request with its token: the gateway's own, or (with
//! `identity = "caller"`) the token of the one caller the session is for.

use std::sync::Arc;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;

use super::oauth::bearer::Bearer;
use super::oauth::Tokens;
use super::server::{Service, Upstream};
use crate::manifest::McpServer;
use crate::tools::Behalf;

/// A session with HTTP server `decl` at `url` (its token sent, when it has `auth`).
pub(super) async fn serve(
    decl: &McpServer,
    url: &crate::template::Template,
    upstream: &Upstream,
    render: &(dyn Fn(&crate::template::Template) -> Result<String, String> + Sync),
    caller: Option<&Behalf>,
) -> Result<(Service, Option<Arc<Tokens>>), String> {
    let name = &decl.name;
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::default();
    config.uri = render(url)?.into();
    for (k, v) in &decl.headers {
        let hn = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("MCP server `{name}`: `{k}` is not a header name"))?;
        let mut hv = reqwest::header::HeaderValue::from_str(&render(v)?)
            .map_err(|_| format!("MCP server `{name}`: header `{k}` cannot be sent"))?;
        hv.set_sensitive(v.has_secret());
        config.custom_headers.insert(hn, hv);
    }
    let failed = |e: rmcp::service::ClientInitializeError| {
        format!("MCP server `{name}` ({}) failed to initialize: {e}", url.redacted())
    };
    let Some(_) = &decl.auth else {
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        return Ok((upstream.clone().serve(transport).await.map_err(failed)?, None));
    };
    let tokens = Arc::new(tokens_of(decl, &config.uri, caller)?);
    let http = Bearer {
        http: reqwest::Client::new(),
        tokens: tokens.clone(),
    };
    let transport = StreamableHttpClientTransport::with_client(http, config);
    match upstream.clone().serve(transport).await {
        Ok(service) => Ok((service, Some(tokens))),
        // Not signed in, or refused: say that, not how the transport ended.
        Err(e) => Err(tokens.refusal().unwrap_or_else(|| failed(e))),
    }
}

/// The tokens a session of `decl` sends: the caller's own for a session of one caller, else
/// the gateway's.
fn tokens_of(decl: &McpServer, url: &str, caller: Option<&Behalf>) -> Result<Tokens, String> {
    match caller {
        Some(c) => Tokens::for_caller(decl, url, c.token.clone()),
        None => Tokens::new(decl, url),
    }
}
