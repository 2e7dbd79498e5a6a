//! `auth` on an `[mcp_servers.NAME]` with a `url`: how flux-tools gets the OAuth 2.1 access
//! token the server wants. `auth = "oauth"`: a person signs in once (`flux-tools mcp login
//! NAME`), and the tokens are kept and refreshed; `auth = "client_credentials"`: no person, the
//! client's own secret or private key (the MCP client-credentials extension).
//!
//! The optional fields: `client_id` (a client registered with the authorization server ahead
//! of time; without it the client registers itself, or names its `client_metadata_url`),
//! `client_secret` and `private_key` (from `${env:…}` only), `signing_alg`, `scopes`,
//! `redirect_port` (the loopback port of the sign-in's redirect; any free one by default) and
//! `authorization_server` (an issuer on another origin than the server's, which is refused
//! unless named here).

use std::ops::Range;

use toml::de::DeTable;

use super::reader::Reader;
use crate::template::Template;

/// The keys `auth` brings to `[mcp_servers.NAME]`.
pub(super) const KEYS: &[&str] = &[
    "auth",
    "client_id",
    "client_secret",
    "private_key",
    "signing_alg",
    "client_metadata_url",
    "scopes",
    "redirect_port",
    "authorization_server",
    "identity",
];

/// How the token is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A person signs in (authorization code with PKCE); the tokens are refreshed.
    Code,
    /// The client's own credentials, no person (`client_credentials`).
    Machine,
}

/// The JWS algorithms a `private_key` may sign with.
pub(super) const SIGNING_ALGS: &[&str] = &["RS256", "RS384", "RS512", "ES256", "ES384"];

/// `auth = …` of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamAuth {
    pub grant: Grant,
    pub client_id: Option<String>,
    pub client_secret: Option<Template>,
    /// A PEM private key for `private_key_jwt` (client credentials).
    pub private_key: Option<Template>,
    pub signing_alg: String,
    pub client_metadata_url: Option<String>,
    pub scopes: Vec<String>,
    pub redirect_port: u16,
    /// An issuer allowed although it is not on the server's origin.
    pub authorization_server: Option<String>,
    /// `identity = "caller"`: in the gateway, each caller's calls carry a token of the
    /// caller's own, exchanged (RFC 8693) for the JWT it presented; else (`"gateway"`) every
    /// call carries the gateway's own sign-in.
    pub on_behalf: bool,
}

impl Reader<'_> {
    /// `auth` and its fields of `[mcp_servers.NAME]` (`ctx`), `http` when it has a `url`.
    pub(super) fn upstream_auth(
        &mut self,
        st: &DeTable<'_>,
        ctx: &str,
        http: bool,
        key: Range<usize>,
    ) -> Option<UpstreamAuth> {
        let Some((grant, span)) = self.string(st, "auth", ctx) else {
            if let Some((k, _)) = KEYS[1..].iter().find_map(|k| Reader::entry(st, k)) {
                let hint =
                    "add `auth = \"oauth\"` (a person signs in) or `auth = \"client_credentials\"`";
                let why = format!("`{}` in {ctx} is for a server with `auth`", k.get_ref());
                self.error(k.span(), why, Some(hint.into()));
            }
            return None;
        };
        let grant = match grant.as_str() {
            "oauth" => Grant::Code,
            "client_credentials" => Grant::Machine,
            other => {
                let why = format!("`auth` in {ctx} is `{other}`");
                let hint = "`oauth` (a person signs in with `flux-tools mcp login`) or `client_credentials`";
                self.error(span, why, Some(hint.into()));
                return None;
            }
        };
        if !http {
            let why = format!("`auth` in {ctx} is for a server reached by `url`");
            let hint = "a stdio server takes its credentials from `env`";
            self.error(span, why, Some(hint.into()));
            return None;
        }
        let auth = UpstreamAuth {
            grant,
            client_id: self.string(st, "client_id", ctx).map(|(s, _)| s),
            client_secret: self.secret(st, "client_secret", ctx),
            private_key: self.secret(st, "private_key", ctx),
            signing_alg: self.signing_alg(st, ctx),
            client_metadata_url: self.https_url(st, "client_metadata_url", ctx),
            scopes: self.scope_list(st, ctx),
            redirect_port: self.redirect_port(st, ctx),
            authorization_server: self.https_url(st, "authorization_server", ctx),
            on_behalf: self.identity(st, ctx),
        };
        self.auth_fits(&auth, ctx, key);
        Some(auth)
    }

    /// The fields a grant needs, and none it cannot use.
    fn auth_fits(&mut self, auth: &UpstreamAuth, ctx: &str, key: Range<usize>) {
        if auth.client_secret.is_some() && auth.client_id.is_none() {
            let why = format!("`client_secret` in {ctx} needs the `client_id` it belongs to");
            self.error(key.clone(), why, None);
        }
        if auth.grant == Grant::Machine {
            let has_key = auth.client_secret.is_some() || auth.private_key.is_some();
            if auth.client_id.is_none() || !has_key {
                let why = format!("`auth = \"client_credentials\"` in {ctx} needs `client_id` and `client_secret` or `private_key`");
                let hint =
                    "client_secret = \"${env:NAME}\" (or private_key = \"${env:NAME}\", a PEM key)";
                self.error(key, why, Some(hint.into()));
            }
        } else if auth.on_behalf && (auth.client_id.is_none() || auth.client_secret.is_none()) {
            let why = format!("`identity = \"caller\"` in {ctx} needs the `client_id` and `client_secret` the gateway exchanges tokens with");
            self.error(key, why, None);
        } else if auth.private_key.is_some() {
            let why = format!("`private_key` in {ctx} is for `auth = \"client_credentials\"`");
            self.error(key, why, None);
        }
    }

    /// `identity = "gateway" | "caller"`: whether calls carry the caller's identity.
    fn identity(&mut self, st: &DeTable<'_>, ctx: &str) -> bool {
        let Some((who, span)) = self.string(st, "identity", ctx) else {
            return false;
        };
        match who.as_str() {
            "gateway" => false,
            "caller" => true,
            other => {
                let why = format!("`identity` in {ctx} is `{other}`");
                let hint = "`gateway` (every call carries the gateway's sign-in) or `caller` (each caller's own token, by token exchange)";
                self.error(span, why, Some(hint.into()));
                false
            }
        }
    }

    /// A secret field: `${env:…}` only, never a literal in the manifest.
    fn secret(&mut self, st: &DeTable<'_>, key: &str, ctx: &str) -> Option<Template> {
        let (s, span) = self.string(st, key, ctx)?;
        let t = self.template(&s, span.clone(), false);
        if !t.has_secret() {
            let why = format!("`{key}` in {ctx} is written in the manifest");
            let hint = format!("read it from the environment: {key} = \"${{env:NAME}}\"");
            self.error(span, why, Some(hint));
            return None;
        }
        Some(t)
    }

    fn signing_alg(&mut self, st: &DeTable<'_>, ctx: &str) -> String {
        let Some((alg, span)) = self.string(st, "signing_alg", ctx) else {
            return "RS256".into();
        };
        if !SIGNING_ALGS.contains(&alg.as_str()) {
            let why = format!("`signing_alg` in {ctx} is `{alg}`");
            self.error(
                span,
                why,
                Some(format!("one of {}", SIGNING_ALGS.join(", "))),
            );
        }
        alg
    }

    /// An `https://` URL (or `http://` on a loopback host).
    fn https_url(&mut self, st: &DeTable<'_>, key: &str, ctx: &str) -> Option<String> {
        let (s, span) = self.string(st, key, ctx)?;
        if !secure_url(&s) {
            let why = format!("`{key}` in {ctx} is `{s}`");
            let hint = "an https:// URL (http:// only on localhost or 127.0.0.1)";
            self.error(span, why, Some(hint.into()));
            return None;
        }
        Some(s)
    }

    fn scope_list(&mut self, st: &DeTable<'_>, ctx: &str) -> Vec<String> {
        let scopes = self.strings(st, "scopes", ctx).unwrap_or_default();
        let mut out = Vec::new();
        for (s, span) in scopes {
            if s.is_empty() || s.contains(char::is_whitespace) {
                let why = format!("scope `{s}` in {ctx} is not one scope");
                self.error(span, why, Some("one scope a string, no spaces".into()));
            } else {
                out.push(s);
            }
        }
        out
    }

    fn redirect_port(&mut self, st: &DeTable<'_>, ctx: &str) -> u16 {
        let Some((_, v)) = Reader::entry(st, "redirect_port") else {
            return 0;
        };
        let what = format!("`redirect_port` in {ctx}");
        match self.int(v, &what).map(u16::try_from) {
            Some(Ok(p)) if p > 0 => p,
            Some(_) => {
                self.error(v.span(), format!("{what} must be 1 to 65535"), None);
                0
            }
            None => 0,
        }
    }
}

/// `https://…`, or `http://` on a loopback host: where tokens and secrets may be sent.
pub(crate) fn secure_url(url: &str) -> bool {
    let Ok(u) = fluent_uri::Uri::parse(url) else {
        return false;
    };
    let host = u.authority().map(|a| a.host().to_ascii_lowercase());
    match u.scheme().as_str().to_ascii_lowercase().as_str() {
        "https" => host.is_some_and(|h| !h.is_empty()),
        "http" => host.is_some_and(|h| loopback_host(&h)),
        _ => false,
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`.
pub(crate) fn loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost"
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_a_secure_url() {
        assert!(secure_url("https://auth.example.com/x"));
        assert!(secure_url("http://127.0.0.1:9000/"));
        assert!(secure_url("http://localhost/"));
        assert!(secure_url("http://[::1]:80/"));
        assert!(!secure_url("http://auth.example.com/"));
        assert!(!secure_url("http://127.0.0.1.example.com/"));
        assert!(!secure_url("ftp://localhost/"));
        assert!(!secure_url("not a url"));
    }
}
