//! `flux-tools mcp login NAME`: the authorization code flow with PKCE and the resource
//! indicator, a person at a browser. The server is asked once without a token (its 401 names
//! where to sign in and which scope), its authorization server is checked ([`check_issuer`]),
//! the client is the manifest's (`client_id`), its metadata document (`client_metadata_url`,
//! when the server takes one) or one registered on the spot; the browser comes back to a
//! listener on loopback, and what it brings is exchanged for tokens, kept by [`store`].

use std::time::Duration;

use oauth2::TokenResponse;
use rmcp::transport::auth::{AuthorizationManager, AuthorizationRequest, AuthorizationSession, StoredCredentials};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::store::{self, Kept};
use super::{check_issuer, now};
use crate::manifest::{Grant, McpServer};

/// The most a browser's request to the loopback listener may be.
const MOST_REQUEST: usize = 16 * 1024;

/// A sign-in under way: the URL the person opens, and the listener their browser comes back to.
pub(crate) struct Begun {
    pub url: String,
    name: String,
    server_url: String,
    path: std::path::PathBuf,
    listener: TcpListener,
    session: AuthorizationSession,
    client_secret: Option<String>,
    redirect_uri: String,
    scopes: Vec<String>,
    metadata: rmcp::transport::auth::AuthorizationMetadata,
}

/// Start signing in to `decl` (rendered URL `url`).
pub(crate) async fn begin(decl: &McpServer, url: &str) -> Result<Begun, String> {
    let name = &decl.name;
    let auth = decl.auth.as_ref().filter(|a| a.grant == Grant::Code).ok_or_else(|| {
        format!("MCP server `{name}` has no `auth = \"oauth\"`: there is nothing to sign in to")
    })?;
    let path = store::path_of(decl, url)?;
    let wanted = match store::load(&path) {
        Ok(Some(k)) => k.wanted_scopes,
        _ => Vec::new(),
    };
    let challenge = challenge(name, url).await?;
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(|e| format!("MCP server `{name}`: {e}"))?;
    let found = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("MCP server `{name}`: cannot find where to sign in: {e}"))?;
    check_issuer(name, url, auth, &found.metadata)?;
    manager.set_metadata(found.metadata.clone());
    let listener = TcpListener::bind(("127.0.0.1", auth.redirect_port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{} for the sign-in's redirect: {e}", auth.redirect_port))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let scopes = scopes_to_ask(&manager, &auth.scopes, wanted).await;
    let mut request = AuthorizationRequest::new(redirect_uri.clone()).with_client_name("flux-tools");
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.clone());
    }
    let cimd = found
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        == Some(true);
    let (client_id, client_secret) = match (&auth.client_id, &auth.client_metadata_url) {
        (Some(id), _) => (Some(id.clone()), manifest_secret(decl)?),
        (None, Some(_)) if cimd => (None, None),
        _ => {
            let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let registered = manager
                .register_client("flux-tools", &redirect_uri, &refs)
                .await
                .map_err(|e| format!("MCP server `{name}`: cannot register a client with its authorization server (name one with `client_id`): {e}"))?;
            (Some(registered.client_id), registered.client_secret)
        }
    };
    match client_id {
        Some(id) => request = request.with_preregistered_client(id),
        None => {
            let doc = auth.client_metadata_url.clone().unwrap_or_default();
            request = request.with_client_metadata_url(doc);
        }
    }
    if let Some(secret) = &client_secret {
        request = request.with_client_secret(secret.clone());
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| format!("MCP server `{name}`: cannot start the sign-in: {e}"))?;
    Ok(Begun {
        url: with_consent(session.get_authorization_url()),
        name: name.clone(),
        server_url: url.to_string(),
        path,
        listener,
        session,
        client_secret,
        redirect_uri,
        scopes,
        metadata: found.metadata,
    })
}

/// The manifest's `client_secret`, read from the environment.
fn manifest_secret(decl: &McpServer) -> Result<Option<String>, String> {
    let Some(t) = decl.auth.as_ref().and_then(|a| a.client_secret.as_ref()) else {
        return Ok(None);
    };
    t.render(&serde_json::Map::new(), &|s| s.to_string())
        .map(Some)
        .map_err(|e| format!("MCP server `{}`: {e}", decl.name))
}

/// The scopes to ask for: the manifest's, else those the server suggests (its challenge, its
/// metadata's `scopes_supported`); and those it asked for since (`insufficient_scope`).
async fn scopes_to_ask(manager: &AuthorizationManager, manifest: &[String], wanted: Vec<String>) -> Vec<String> {
    let mut scopes = if manifest.is_empty() {
        manager.select_initial_scopes(&[]).await
    } else {
        manifest.to_vec()
    };
    for w in wanted {
        if !scopes.contains(&w) {
            scopes.push(w);
        }
    }
    scopes
}

/// Ask the server without a token: its 401's `WWW-Authenticate`, or `None` when it has none
/// (or answered).
async fn challenge(name: &str, url: &str) -> Result<Option<String>, String> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flux-tools", "version": env!("CARGO_PKG_VERSION")}}
    });
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| format!("MCP server `{name}` cannot be reached: {e}"))?;
    if response.status().is_success() {
        // It may want a token for some requests only (a step-up server): its metadata says
        // where to sign in.
        return Ok(None);
    }
    Ok(response
        .headers()
        .get("www-authenticate")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string))
}

impl Begun {
    /// Wait (up to `wait`) for the browser to come back, exchange its code for tokens and
    /// keep them: the granted scopes.
    pub(crate) async fn finish(self, wait: Duration) -> Result<Vec<String>, String> {
        let name = self.name.clone();
        let redirect = tokio::time::timeout(wait, callback(&self.listener))
            .await
            .map_err(|_| format!("no browser came back to {} within {}s: the sign-in to `{name}` is abandoned", self.redirect_uri, wait.as_secs()))??;
        let (mut stream, target) = redirect;
        let full = format!("http://127.0.0.1{target}");
        let exchanged = self.session.handle_callback_url(&full).await;
        let (status, page) = match &exchanged {
            Ok(_) => ("200 OK", format!("Signed in to {name}. You may close this window.")),
            Err(_) => ("400 Bad Request", format!("The sign-in to {name} failed: see the terminal.")),
        };
        let _ = respond(&mut stream, status, &page).await;
        let response = exchanged.map_err(|e| format!("MCP server `{name}`: the sign-in failed: {e}"))?;
        let (client_id, _) = self
            .session
            .get_credentials()
            .await
            .map_err(|e| format!("MCP server `{name}`: {e}"))?;
        let granted: Vec<String> = response
            .scopes()
            .map(|s| s.iter().map(|s| s.to_string()).collect())
            .unwrap_or_else(|| self.scopes.clone());
        let resource = resource_of(&self.url).unwrap_or_else(|| self.server_url.clone());
        let credentials = StoredCredentials::new(client_id.clone(), Some(response), granted.clone(), Some(now()))
            .with_issuer(self.metadata.issuer.clone());
        let kept = Kept {
            url: self.server_url.clone(),
            client_id,
            client_secret: self.client_secret.clone(),
            redirect_uri: Some(self.redirect_uri.clone()),
            metadata: self.metadata.clone(),
            resource,
            credentials,
            wanted_scopes: Vec::new(),
        };
        store::save(&self.path, &kept)?;
        Ok(granted)
    }

    /// Where the tokens are kept.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// `url` with `prompt=consent` when it asks for `offline_access` (a refresh token): OpenID
/// Connect servers grant that scope only when consent is asked for by name.
fn with_consent(url: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let mut params = oauth2::url::form_urlencoded::parse(query.as_bytes());
    let offline = params
        .clone()
        .any(|(k, v)| k == "scope" && v.split(' ').any(|s| s == "offline_access"));
    if offline && !params.any(|(k, _)| k == "prompt") {
        return format!("{url}&prompt=consent");
    }
    url.to_string()
}

/// The `resource` parameter of an authorization URL.
fn resource_of(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    oauth2::url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "resource")
        .map(|(_, v)| v.into_owned())
}

/// The first request to `/callback` on `listener`: its connection and request target. Other
/// requests (a browser's `/favicon.ico`) are answered 404 and the wait goes on.
async fn callback(listener: &TcpListener) -> Result<(TcpStream, String), String> {
    loop {
        let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let Some(target) = request_target(&mut stream).await else {
            continue;
        };
        if target.starts_with("/callback?") {
            return Ok((stream, target));
        }
        let _ = respond(&mut stream, "404 Not Found", "Not the sign-in's redirect.").await;
    }
}

/// The target of a `GET` request read from `stream` (headers at most [`MOST_REQUEST`] bytes,
/// within 10 s).
async fn request_target(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MOST_REQUEST {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.ok()??;
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().next()?;
    let mut parts = line.split(' ');
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_string)
}

async fn respond(stream: &mut TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let body = format!("<!doctype html><meta charset=utf-8><title>flux-tools</title><p>{text}</p>\n");
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
