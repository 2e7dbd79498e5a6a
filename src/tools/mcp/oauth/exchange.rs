//! RFC 8693 token exchange, for an upstream server with `identity = "caller"`: the gateway
//! gives the upstream's authorization server the access token its caller presented (the
//! subject token) and, authenticated as its own client (`client_id`, `client_secret`), gets a
//! token of the caller's own for the upstream (the resource indicator, the manifest's
//! `scopes`). Tokens so got are kept in memory only, per caller ([`super::Tokens`] of that
//! caller's own upstream session), never on disk and never shared across callers.

use std::time::Duration;

use rmcp::transport::auth::AuthorizationMetadata;
use serde::Deserialize;

use super::{now, Current, MARGIN_SECS};
use crate::manifest::UpstreamAuth;

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

#[derive(Deserialize)]
struct Issued {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Refusal {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Exchange `subject` (the caller's token) at `metadata`'s token endpoint for a token for
/// `resource`.
pub(super) async fn exchange(
    name: &str,
    metadata: &AuthorizationMetadata,
    resource: &str,
    auth: &UpstreamAuth,
    subject: &str,
) -> Result<Current, String> {
    let client_id = auth.client_id.clone().unwrap_or_default();
    let secret = match &auth.client_secret {
        Some(t) => t
            .render(&serde_json::Map::new(), &|s| s.to_string())
            .map_err(|e| format!("MCP server `{name}`: {e}"))?,
        None => return Err(format!("MCP server `{name}` has no `client_secret` to exchange tokens with")),
    };
    let post = posts_secret(metadata);
    let mut pairs = vec![
        ("grant_type", GRANT),
        ("subject_token", subject),
        ("subject_token_type", ACCESS_TOKEN),
        ("requested_token_type", ACCESS_TOKEN),
        ("resource", resource),
    ];
    let scope = auth.scopes.join(" ");
    if !scope.is_empty() {
        pairs.push(("scope", &scope));
    }
    if post {
        pairs.extend([("client_id", client_id.as_str()), ("client_secret", secret.as_str())]);
    }
    let body = form(&pairs);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let mut request = http
        .post(&metadata.token_endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body);
    if !post {
        // RFC 6749 §2.3.1: each part form-encoded before it is joined.
        let enc = |s: &str| oauth2::url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        request = request.basic_auth(enc(&client_id), Some(enc(&secret)));
    }
    let response = request.send().await.map_err(|e| {
        format!("MCP server `{name}`: its authorization server cannot be reached to exchange the caller's token: {}", e.without_url())
    })?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| e.without_url().to_string())?;
    if !status.is_success() {
        let r: Refusal = serde_json::from_slice(&body).unwrap_or_default();
        let why = match r.error_description {
            Some(d) => format!("{} ({d})", r.error),
            None => r.error,
        };
        return Err(format!(
            "MCP server `{name}`: its authorization server refused to exchange the caller's token for one of its own: HTTP {status} {why}"
        ));
    }
    let issued: Issued = serde_json::from_slice(&body)
        .map_err(|_| format!("MCP server `{name}`: its authorization server's token exchange answered no access token"))?;
    let until = issued.expires_in.map(|life| now() + life - MARGIN_SECS.min(life / 2));
    Ok(Current { token: issued.access_token, until })
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
fn form(pairs: &[(&str, &str)]) -> String {
    let mut f = oauth2::url::form_urlencoded::Serializer::new(String::new());
    f.extend_pairs(pairs);
    f.finish()
}

/// Whether the client's secret goes in the form (`client_secret_post`, when the server
/// takes only that) rather than in HTTP Basic.
fn posts_secret(metadata: &AuthorizationMetadata) -> bool {
    let methods = metadata
        .additional_fields
        .get("token_endpoint_auth_methods_supported")
        .and_then(serde_json::Value::as_array);
    methods.is_some_and(|m| {
        let has = |x: &str| m.iter().any(|v| v.as_str() == Some(x));
        has("client_secret_post") && !has("client_secret_basic")
    })
}
