//! OAuth 2.1 access tokens for the upstream MCP servers that want them (`auth = "oauth"` or
//! `"client_credentials"` on `[mcp_servers.NAME]`).
//!
//! rmcp's `AuthorizationManager` speaks the protocol — discovery (RFC 9728, RFC 8414),
//! registration, PKCE, the resource indicator, refresh and client credentials. What is ours:
//! where tokens are kept ([`store`]), that a token is refreshed **once per expiry** — one
//! refresh for every call of this process waiting on it (an async lock, and a second look
//! once it is held) and one for every process sharing the token folder (the file lock beside
//! the token, and a second look at the file once it is held) — and which authorization server
//! a token may be sent to ([`check_issuer`]). A token is never printed: errors name the
//! server and what to do, never a token.

pub(crate) mod bearer;
mod exchange;
pub(crate) mod signin;
pub(crate) mod store;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, ClientCredentialsConfig,
    CredentialStore, InMemoryCredentialStore, JwtSigningAlgorithm, OAuthClientConfig,
    StoredCredentials,
};

use crate::manifest::{loopback_host, secure_url, Grant, McpServer, UpstreamAuth};
use store::{Kept, RefreshLock};

/// A token is renewed this long before it expires (at most half its life).
pub(super) const MARGIN_SECS: u64 = 30;

/// The access token of one upstream server, kept fresh.
pub(crate) struct Tokens {
    name: String,
    url: String,
    auth: UpstreamAuth,
    path: PathBuf,
    /// The token in use, and until when; held while it is renewed, so calls that find it
    /// stale wait for the one renewal instead of each making their own.
    current: tokio::sync::Mutex<Option<Current>>,
    /// Why the server last refused a request (the transport then closes): the call's error.
    refused: std::sync::Mutex<Option<String>>,
    /// For one caller (`identity = "caller"`): the latest token it presented, exchanged for
    /// ours; nothing of it is kept on disk.
    caller: Option<std::sync::Mutex<std::sync::Arc<str>>>,
    /// The authorization server (its metadata and the resource), learnt once per caller.
    found: tokio::sync::OnceCell<(AuthorizationMetadata, String)>,
}

#[derive(Clone)]
pub(super) struct Current {
    token: String,
    /// Renew it after this (seconds since the epoch); `None`: until the server refuses it.
    until: Option<u64>,
}

impl Tokens {
    /// The tokens of `decl` (which has `auth`), its URL rendered as `url`.
    pub(crate) fn new(decl: &McpServer, url: &str) -> Result<Tokens, String> {
        let auth = decl.auth.clone().ok_or("the server has no `auth`")?;
        Ok(Tokens {
            name: decl.name.clone(),
            url: url.to_string(),
            path: store::path_of(decl, url)?,
            auth,
            current: tokio::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
            caller: None,
            found: tokio::sync::OnceCell::new(),
        })
    }

    /// The tokens of one caller of `decl` (`identity = "caller"`), who presented `token`.
    pub(crate) fn for_caller(decl: &McpServer, url: &str, token: std::sync::Arc<str>) -> Result<Tokens, String> {
        let mut t = Tokens::new(decl, url)?;
        t.caller = Some(std::sync::Mutex::new(token));
        Ok(t)
    }

    /// The caller's latest token (a caller's token expires too: the next exchange uses the
    /// one its latest call came with).
    pub(crate) fn present(&self, token: &std::sync::Arc<str>) {
        if let Some(Ok(mut t)) = self.caller.as_ref().map(|c| c.lock()) {
            if **t != **token {
                *t = token.clone();
            }
        }
    }

    /// A token that is not about to expire.
    pub(crate) async fn token(&self) -> Result<String, String> {
        self.renew(None).await
    }

    /// A token other than `refused`, which the server answered 401 (`invalid_token`): the
    /// token another call renewed meanwhile, or a renewed one.
    pub(crate) async fn refused(&self, refused: &str) -> Result<String, String> {
        self.renew(Some(refused)).await
    }

    async fn renew(&self, refused: Option<&str>) -> Result<String, String> {
        let usable = |c: &Current| c.until.is_none_or(|t| now() < t) && Some(c.token.as_str()) != refused;
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref().filter(|c| usable(c)) {
            return Ok(c.token.clone());
        }
        if let Some(subject) = self.caller.as_ref().and_then(|c| c.lock().ok().map(|t| t.clone())) {
            let (metadata, resource) = self
                .found
                .get_or_try_init(|| discover(&self.name, &self.url, &self.auth, None))
                .await?;
            let c = exchange::exchange(&self.name, metadata, resource, &self.auth, &subject).await?;
            *current = Some(c.clone());
            return Ok(c.token);
        }
        let path = self.path.clone();
        let (lock, kept) = tokio::task::spawn_blocking(move || {
            let lock = RefreshLock::take(&path)?;
            Ok::<_, String>((lock, store::load(&path)?))
        })
        .await
        .map_err(|e| e.to_string())??;
        // Another process may have renewed it while this one waited for the lock.
        if let Some(c) = kept.as_ref().and_then(|k| self.current_of(k)).filter(|c| usable(c)) {
            *current = Some(c.clone());
            return Ok(c.token);
        }
        let kept = match (self.auth.grant, kept) {
            (Grant::Machine, kept) => self.machine_token(kept).await?,
            (Grant::Code, Some(kept)) => self.refreshed(kept).await?,
            (Grant::Code, None) => return Err(self.sign_in("is not signed in")),
        };
        store::save(&self.path, &kept)?;
        drop(lock);
        let c = self.current_of(&kept).ok_or_else(|| self.sign_in("gave no usable token"))?;
        *current = Some(c.clone());
        Ok(c.token)
    }

    /// The token kept in `kept`, if it is this server's and this client's.
    fn current_of(&self, kept: &Kept) -> Option<Current> {
        if kept.url != self.url || self.auth.client_id.as_ref().is_some_and(|c| *c != kept.client_id) {
            return None;
        }
        let response = kept.credentials.token_response.as_ref()?;
        let until = match (response.expires_in(), kept.credentials.token_received_at) {
            (Some(life), Some(at)) => {
                let life = life.as_secs();
                Some(at + life - MARGIN_SECS.min(life / 2))
            }
            _ => None,
        };
        Some(Current {
            token: response.access_token().secret().clone(),
            until,
        })
    }

    /// `kept`'s token refreshed with its refresh token.
    async fn refreshed(&self, mut kept: Kept) -> Result<Kept, String> {
        let has_refresh = kept.credentials.token_response.as_ref().is_some_and(|t| t.refresh_token().is_some());
        if !has_refresh {
            return Err(self.sign_in("has an expired sign-in and no refresh token"));
        }
        let mut manager = self.manager(&kept.resource, kept.metadata.clone()).await?;
        let redirect = kept.redirect_uri.clone().unwrap_or_else(|| "http://127.0.0.1/callback".into());
        let mut config = OAuthClientConfig::new(kept.client_id.clone(), redirect);
        if let Some(secret) = &kept.client_secret {
            config = config.with_client_secret(secret.clone());
        }
        manager.configure_client(config).map_err(|e| self.failed(&e))?;
        let memory = InMemoryCredentialStore::new();
        memory.save(kept.credentials.clone()).await.map_err(|e| self.failed(&e))?;
        manager.set_credential_store(memory.clone());
        match manager.refresh_token().await {
            Ok(_) => {}
            Err(AuthError::TokenRefreshRejected(_) | AuthError::AuthorizationRequired) => {
                return Err(self.sign_in("refused its refresh token (the sign-in has ended)"));
            }
            // The client registered at sign-in is gone from the authorization server.
            Err(AuthError::TokenRefreshFailed(e)) if e.contains("invalid_client") => {
                return Err(self.sign_in("no longer knows the client it signed in with (the sign-in has ended)"));
            }
            Err(e) => return Err(self.failed(&e)),
        }
        let fresh = memory.load().await.map_err(|e| self.failed(&e))?;
        kept.credentials = fresh.ok_or_else(|| self.sign_in("gave no token"))?;
        Ok(kept)
    }

    /// A token by the client-credentials grant (the server's metadata learnt once and kept).
    async fn machine_token(&self, kept: Option<Kept>) -> Result<Kept, String> {
        let (metadata, resource) = match kept {
            Some(k) if k.url == self.url => (k.metadata, k.resource),
            _ => {
                let (metadata, resource) = discover(&self.name, &self.url, &self.auth, None).await?;
                (metadata, resource)
            }
        };
        let config = self.machine_config(&resource)?;
        let (at, meta) = (resource.clone(), metadata.clone());
        // rmcp's exchange is not `Send` (its private-key JWT path): it runs on a thread of
        // the blocking pool, driven there by this runtime.
        let handle = tokio::runtime::Handle::current();
        let exchanged = tokio::task::spawn_blocking(move || {
            handle.block_on(async move {
                let mut m = AuthorizationManager::new_allowing_private_addresses(at.as_str()).await?;
                m.set_metadata(meta);
                m.configure_client_credentials(&config)?;
                m.exchange_client_credentials(&config).await
            })
        })
        .await
        .map_err(|e| e.to_string())?;
        let response = exchanged.map_err(|e| self.failed(&e))?;
        let scopes = response.scopes().map(|s| s.iter().map(|s| s.to_string()).collect()).unwrap_or_default();
        let client_id = self.auth.client_id.clone().unwrap_or_default();
        let credentials = StoredCredentials::new(client_id.clone(), Some(response), scopes, Some(now()));
        Ok(Kept {
            url: self.url.clone(),
            client_id,
            client_secret: None,
            redirect_uri: None,
            metadata,
            resource,
            credentials,
            wanted_scopes: Vec::new(),
        })
    }

    fn machine_config(&self, resource: &str) -> Result<ClientCredentialsConfig, String> {
        let client_id = self.auth.client_id.clone().unwrap_or_default();
        let scopes = self.auth.scopes.clone();
        let resource = Some(resource.to_string());
        let secret = |t: &crate::template::Template| {
            t.render(&serde_json::Map::new(), &|s| s.to_string())
                .map_err(|e| format!("MCP server `{}`: {e}", self.name))
        };
        if let Some(key) = &self.auth.private_key {
            return Ok(ClientCredentialsConfig::PrivateKeyJwt {
                client_id,
                signing_key: secret(key)?.into_bytes(),
                signing_algorithm: algorithm(&self.auth.signing_alg),
                token_endpoint_audience: None,
                scopes,
                resource,
            });
        }
        let client_secret = match &self.auth.client_secret {
            Some(t) => secret(t)?,
            None => return Err(format!("MCP server `{}` has no `client_secret`", self.name)),
        };
        Ok(ClientCredentialsConfig::ClientSecret { client_id, client_secret, scopes, resource })
    }

    async fn manager(&self, resource: &str, metadata: AuthorizationMetadata) -> Result<AuthorizationManager, String> {
        let mut m = AuthorizationManager::new_allowing_private_addresses(resource)
            .await
            .map_err(|e| self.failed(&e))?;
        m.set_metadata(metadata);
        Ok(m)
    }

    /// Why the server last refused a request, if it did.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }

    pub(super) fn note_refusal(&self, why: &str) {
        if let Ok(mut r) = self.refused.lock() {
            *r = Some(why.to_string());
        }
    }

    /// Whether these are one caller's tokens (`identity = "caller"`).
    pub(crate) fn for_a_caller(&self) -> bool {
        self.caller.is_some()
    }

    /// What to say when a caller's exchanged token lacks `scope`.
    pub(crate) fn wants_scopes(&self, scope: &str) -> String {
        format!(
            "MCP server `{}` needs the scope `{scope}`, which the caller's exchanged token does not have: add it to `scopes` of [mcp_servers.{}]",
            self.name, self.name
        )
    }

    /// Keep `scope` for the next sign-in to ask for (a server's `insufficient_scope`).
    pub(crate) fn want_scopes(&self, scope: &str) -> Result<(), String> {
        let Some(mut kept) = store::load(&self.path)? else {
            return Ok(());
        };
        for s in scope.split_whitespace() {
            if !kept.wanted_scopes.iter().any(|w| w == s) {
                kept.wanted_scopes.push(s.to_string());
            }
        }
        store::save(&self.path, &kept)
    }

    /// "sign in again" for `what` happened.
    pub(crate) fn sign_in(&self, what: &str) -> String {
        format!(
            "MCP server `{}` {what}: run `flux-tools mcp login {}`",
            self.name, self.name
        )
    }

    fn failed(&self, e: &AuthError) -> String {
        format!("MCP server `{}`: cannot get an access token: {e}", self.name)
    }
}

/// The JWS algorithm of `signing_alg` (checked by the manifest).
fn algorithm(alg: &str) -> JwtSigningAlgorithm {
    match alg {
        "RS384" => JwtSigningAlgorithm::RS384,
        "RS512" => JwtSigningAlgorithm::RS512,
        "ES256" => JwtSigningAlgorithm::ES256,
        "ES384" => JwtSigningAlgorithm::ES384,
        _ => JwtSigningAlgorithm::RS256,
    }
}

/// Seconds since the epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Learn server `url`'s authorization server (from `challenge`, its 401's
/// `WWW-Authenticate`, when there is one): its metadata and the resource a token is for.
pub(crate) async fn discover(
    name: &str,
    url: &str,
    auth: &UpstreamAuth,
    challenge: Option<&str>,
) -> Result<(AuthorizationMetadata, String), String> {
    let manager = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(|e| format!("MCP server `{name}`: {e}"))?;
    let found = manager
        .resolve_metadata_from_challenge(challenge)
        .await
        .map_err(|e| format!("MCP server `{name}`: cannot find its authorization server: {e}"))?;
    check_issuer(name, url, auth, &found.metadata)?;
    Ok((found.metadata, url.to_string()))
}

/// Refuse an authorization server a token or secret should not be sent to: one not on
/// `https://` (but for loopback), or one on another origin than the MCP server's that the
/// manifest does not name in `authorization_server`.
pub(crate) fn check_issuer(
    name: &str,
    url: &str,
    auth: &UpstreamAuth,
    metadata: &AuthorizationMetadata,
) -> Result<(), String> {
    let endpoints = [Some(&metadata.token_endpoint), Some(&metadata.authorization_endpoint), metadata.registration_endpoint.as_ref()];
    for e in endpoints.into_iter().flatten() {
        if !secure_url(e) {
            return Err(format!(
                "MCP server `{name}`: its authorization server's endpoint {e} is not https://: no token or secret is sent there"
            ));
        }
    }
    let issuer = metadata.issuer.clone().unwrap_or_else(|| metadata.token_endpoint.clone());
    let named = auth.authorization_server.as_deref().map(|a| a.trim_end_matches('/'));
    if origin(&issuer) == origin(url) || named == Some(issuer.trim_end_matches('/')) {
        return Ok(());
    }
    Err(format!(
        "MCP server `{name}` sends its sign-in to {issuer}, another origin than {}: refused; if you trust it, add `authorization_server = \"{issuer}\"` to [mcp_servers.{name}]",
        origin(url).unwrap_or_default()
    ))
}

/// `scheme://host:port` of `url`, the port made explicit.
fn origin(url: &str) -> Option<String> {
    let u = fluent_uri::Uri::parse(url).ok()?;
    let scheme = u.scheme().as_str().to_ascii_lowercase();
    let a = u.authority()?;
    let host = a.host().to_ascii_lowercase();
    // Loopback is one origin whatever its port: an authorization server beside a local MCP
    // server (a test, a sidecar) is as trusted as the server itself.
    if loopback_host(&host) {
        return Some(format!("{scheme}://loopback"));
    }
    let port = match a.port().map(|p| p.as_str()).filter(|p| !p.is_empty()) {
        Some(p) => p.to_string(),
        None if scheme == "https" => "443".into(),
        None => "80".into(),
    };
    Some(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(named: Option<&str>) -> UpstreamAuth {
        UpstreamAuth {
            grant: Grant::Code,
            client_id: None,
            client_secret: None,
            private_key: None,
            signing_alg: "RS256".into(),
            client_metadata_url: None,
            scopes: vec![],
            redirect_port: 0,
            authorization_server: named.map(str::to_string),
            on_behalf: false,
        }
    }

    fn metadata(issuer: &str) -> AuthorizationMetadata {
        let mut m = AuthorizationMetadata::default();
        m.issuer = Some(issuer.into());
        m.authorization_endpoint = format!("{issuer}/authorize");
        m.token_endpoint = format!("{issuer}/token");
        m
    }

    /// A token endpoint on loopback that counts its requests and answers each with `answer`.
    async fn token_endpoint(answer: &'static str, status: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let url = format!("http://127.0.0.1:{}/token", listener.local_addr().expect("addr").port());
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                // A slow authorization server: every waiting call piles up behind it.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let reply = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}", answer.len());
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        (url, count)
    }

    /// Tokens whose kept token has expired (refresh token `r1`), kept at `path`.
    fn expired(path: &std::path::Path, token_endpoint: &str) -> Tokens {
        let mut metadata = metadata("http://127.0.0.1");
        metadata.token_endpoint = token_endpoint.to_string();
        let response: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(serde_json::json!({
            "access_token": "old", "token_type": "Bearer", "expires_in": 60, "refresh_token": "r1"
        }))
        .expect("a token response");
        let kept = Kept {
            url: "http://127.0.0.1:1/mcp".into(),
            client_id: "c".into(),
            client_secret: None,
            redirect_uri: None,
            metadata,
            resource: "http://127.0.0.1:1/mcp".into(),
            credentials: StoredCredentials::new("c".into(), Some(response), vec![], Some(now() - 3600)),
            wanted_scopes: vec![],
        };
        store::save(path, &kept).expect("kept");
        Tokens {
            name: "s".into(),
            url: "http://127.0.0.1:1/mcp".into(),
            auth: auth(None),
            path: path.to_path_buf(),
            current: tokio::sync::Mutex::new(None),
            refused: std::sync::Mutex::new(None),
            caller: None,
            found: tokio::sync::OnceCell::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifty_calls_around_an_expiry_in_two_processes_make_one_refresh() {
        let (endpoint, count) = token_endpoint(r#"{"access_token":"new","token_type":"Bearer","expires_in":3600,"refresh_token":"r2"}"#, "200 OK").await;
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("s.json");
        // Two `Tokens` over one file: two processes sharing the token folder.
        let (a, b) = (std::sync::Arc::new(expired(&path, &endpoint)), std::sync::Arc::new(expired(&path, &endpoint)));
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let t = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { t.token().await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.expect("joined").expect("a token"), "new");
        }
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The refreshed token is kept, with its new refresh token.
        let kept = store::load(&path).expect("loaded").expect("kept");
        let response = kept.credentials.token_response.expect("a token");
        assert_eq!(response.refresh_token().map(|r| r.secret().as_str()), Some("r2"));
        // A 401 for the token in use renews it once more; one for an older token does not.
        assert_eq!(a.refused("old").await.expect("a token"), "new");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(a.refused("new").await.expect("a token"), "new");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_revoked_refresh_token_says_to_sign_in_again_and_never_shows_a_token() {
        let (endpoint, _) = token_endpoint(r#"{"error":"invalid_grant","error_description":"revoked"}"#, "400 Bad Request").await;
        let dir = tempfile::tempdir().expect("a folder");
        let tokens = expired(&dir.path().join("s.json"), &endpoint);
        let e = tokens.token().await.expect_err("refused");
        assert!(e.contains("run `flux-tools mcp login s`"), "{e}");
        assert!(!e.contains("old") && !e.contains("r1"), "{e}");
    }

    #[test]
    fn an_issuer_on_another_origin_is_refused_unless_named_and_plain_http_only_on_loopback() {
        let url = "https://mcp.example.com/mcp";
        assert!(check_issuer("s", url, &auth(None), &metadata("https://mcp.example.com")).is_ok());
        let e = check_issuer("s", url, &auth(None), &metadata("https://evil.example.net")).unwrap_err();
        assert!(e.contains("another origin") && e.contains("authorization_server = \"https://evil.example.net\""), "{e}");
        assert!(check_issuer("s", url, &auth(Some("https://evil.example.net/")), &metadata("https://evil.example.net")).is_ok());
        let e = check_issuer("s", "http://mcp.corp/mcp", &auth(None), &metadata("http://mcp.corp")).unwrap_err();
        assert!(e.contains("not https://"), "{e}");
        assert!(check_issuer("s", "http://127.0.0.1:9/mcp", &auth(None), &metadata("http://localhost:9")).is_ok());
    }
}
