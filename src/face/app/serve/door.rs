//! The HTTP face's front door: who a request is. A bearer token is one of `[serve.tokens]`
//! (compared by SHA-256 digest; the tenant it names, and its roles), else — with
//! `[serve.auth]` — a JWT access token checked by [`Verifier`]. Neither configured: every
//! request is the gateway's own tenant's, bound by no role. A request that is refused gets
//! 401 (no token, or one not valid: `WWW-Authenticate: Bearer resource_metadata="…"`,
//! `error="invalid_token"` as RFC 6750 and RFC 9728 say), 403 (`insufficient_scope`) or 503
//! (the issuer's keys cannot be fetched now), and the audit trail says why — never the token.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use sha2::{Digest, Sha256};

use super::audit::{Audit, Event};
use super::auth::{Rejection, Verifier};
use super::caller::{Caller, Via};

/// Token digest → tenant.
pub(super) type Tokens = HashMap<[u8; 32], String>;

/// The digest a token is looked up by.
pub(super) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// Who may come in, and how they prove it.
pub(super) struct Door {
    pub tokens: Tokens,
    /// `[serve.tokens] T = { roles }`: each tenant's token's roles.
    pub token_roles: HashMap<String, Arc<[String]>>,
    /// `[serve] admin_token`'s digest.
    pub admin: Option<[u8; 32]>,
    pub auth: Option<Arc<Verifier>>,
    /// The tenant of callers whose credentials name none (`--tenant`).
    pub tenant: String,
    pub audit: Arc<Audit>,
}

impl Door {
    /// Whether requests must carry a token.
    pub(super) fn closed(&self) -> bool {
        !self.tokens.is_empty() || self.auth.is_some()
    }

    /// The caller a request's credentials name, or the refusal to answer it with.
    pub(super) async fn identify(&self, headers: &HeaderMap) -> Result<Caller, Response<Body>> {
        if !self.closed() {
            return Ok(Caller::local(self.tenant.clone()));
        }
        let Some(token) = bearer(headers) else {
            return Err(self.refuse(&Rejection::Missing));
        };
        if let Some(tenant) = self.tokens.get(&digest(token)) {
            return Ok(Caller {
                tenant: tenant.clone(),
                subject: None,
                roles: Some(
                    self.token_roles
                        .get(tenant)
                        .cloned()
                        .unwrap_or_else(|| Arc::from([])),
                ),
                via: Via::Token,
                behalf: None,
            });
        }
        let Some(v) = &self.auth else {
            return Err(self.refuse(&Rejection::Invalid(
                "it is not a token of [serve.tokens]".into(),
            )));
        };
        match v.check(token).await {
            Ok(id) => {
                let tenant = id.tenant.unwrap_or_else(|| self.tenant.clone());
                let behalf = crate::tools::Behalf {
                    // `["TENANT","SUBJECT"]`: one caller's, whatever either name holds.
                    subject: serde_json::json!([tenant, id.subject]).to_string(),
                    token: token.into(),
                };
                Ok(Caller {
                    tenant,
                    subject: Some(id.subject),
                    roles: Some(id.roles.into()),
                    via: Via::Jwt,
                    behalf: Some(Arc::new(behalf)),
                })
            }
            Err(r) => Err(self.refuse(&r)),
        }
    }

    /// Whether `headers` carry the admin token.
    pub(super) fn is_admin(&self, headers: &HeaderMap) -> bool {
        let given = bearer(headers).map(digest);
        self.admin.is_some() && given == self.admin
    }

    /// The answer to a refused request; the audit trail is told why (a request with no token
    /// at all is only answered: a client's first try, before it has one).
    fn refuse(&self, r: &Rejection) -> Response<Body> {
        let (status, error) = match r {
            Rejection::Missing => (StatusCode::UNAUTHORIZED, None),
            Rejection::Invalid(_) => (StatusCode::UNAUTHORIZED, Some("invalid_token")),
            Rejection::Scope(_) => (StatusCode::FORBIDDEN, Some("insufficient_scope")),
            Rejection::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, None),
        };
        if !matches!(r, Rejection::Missing) {
            let why = serde_json::json!({"reason": r.reason(), "status": status.as_u16()});
            self.audit.record(Event::TokenRejected, None, why);
        }
        let mut challenge = String::from("Bearer");
        let mut params = Vec::new();
        if let Some(v) = &self.auth {
            let (_, url) = super::auth::metadata_location(&v.spec().resource);
            params.push(format!("resource_metadata=\"{url}\""));
            if !v.spec().scopes.is_empty() {
                params.push(format!("scope=\"{}\"", v.spec().scopes.join(" ")));
            }
        }
        if let Some(e) = error {
            params.push(format!("error=\"{e}\""));
            params.push(format!("error_description=\"{}\"", quoted(&r.reason())));
        }
        if !params.is_empty() {
            challenge = format!("{challenge} {}", params.join(", "));
        }
        let body = serde_json::json!({"error": error.unwrap_or("unauthorized"), "error_description": match r {
            Rejection::Missing => "a valid bearer token is required (Authorization: Bearer TOKEN)".to_string(),
            other => other.reason(),
        }});
        let mut resp = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            h.insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        // The request's body was not read: the connection is not used again, and the client is
        // told so (else it may send its retry, with the token, on a connection being closed).
        h.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        resp
    }

    /// The protected resource metadata (RFC 9728) when `path` asks for it: at the well-known
    /// name, and at it with the resource's path after it.
    pub(super) fn metadata(&self, path: &str) -> Option<Response<Body>> {
        let v = self.auth.as_ref()?;
        let (suffixed, _) = super::auth::metadata_location(&v.spec().resource);
        if path != suffixed && path != "/.well-known/oauth-protected-resource" {
            return None;
        }
        let doc = super::auth::resource_metadata(v.spec()).to_string();
        let mut r = Response::new(Full::new(Bytes::from(doc)).boxed());
        let h = r.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Public facts, read by browser-based clients from other origins.
        h.insert(
            hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        Some(r)
    }
}

/// The bearer token of `Authorization`, trimmed.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let header = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = header.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// `text` inside a quoted-string of a header: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '\''
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            hyper::header::AUTHORIZATION,
            HeaderValue::from_str(auth).unwrap(),
        );
        h
    }

    #[test]
    fn a_bearer_token_is_read_in_any_case_of_the_scheme() {
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn a_reason_in_a_header_cannot_break_out_of_its_quotes() {
        assert_eq!(quoted("a \"b\" \\ c\r\n"), "a 'b' ' c''");
    }
}
