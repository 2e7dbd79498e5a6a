//! The gateway as an OAuth 2.1 resource server (`[serve.auth]`): a bearer JWT access token is
//! checked against its issuer's published keys — found from the issuer's metadata (RFC 8414,
//! else OpenID discovery), kept, and fetched again when a token names a key not seen yet, at
//! most once per `jwks_refresh` — and then for its issuer, its audience (this resource, RFC
//! 8707), its time (`exp`, `nbf`, with `leeway`) and its scopes. Only asymmetric signatures
//! are accepted: `alg: none` and HMAC (which a forger would sign with the public key) are
//! refused by name. The cryptography is `jsonwebtoken`'s. A token is never printed; a refusal
//! says why, for the caller and for the audit trail.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use base64::Engine;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::manifest::Auth;

/// How long a fetch of an issuer's metadata or keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Who a valid token says the caller is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Identity {
    pub subject: String,
    /// The tenant claim's value (`None`: the token has none, or none is configured).
    pub tenant: Option<String>,
    pub roles: Vec<String>,
}

/// Why a request was not let in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    /// No bearer token at all (RFC 6750: a 401 with no error code).
    Missing,
    /// A token that is not valid here (401 `invalid_token`): why.
    Invalid(String),
    /// A valid token without these scopes (403 `insufficient_scope`).
    Scope(Vec<String>),
    /// The issuer's keys could not be fetched (503: try again).
    Unavailable(String),
}

impl Rejection {
    /// The reason, as the audit trail and the 401's `error_description` give it.
    pub(crate) fn reason(&self) -> String {
        match self {
            Rejection::Missing => "no bearer token".into(),
            Rejection::Invalid(why) => why.clone(),
            Rejection::Scope(missing) => format!("the token lacks scope {}", missing.join(" ")),
            Rejection::Unavailable(why) => why.clone(),
        }
    }
}

/// One issuer's keys, by `kid`.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    /// Keys published without a `kid`.
    unnamed: Vec<(DecodingKey, Option<Algorithm>)>,
}

struct Issuer {
    id: String,
    keys: RwLock<Keys>,
    /// When its keys were last asked for, and why that failed if it did (bounds how often a
    /// token with an unknown `kid` makes the gateway fetch them again).
    fetched: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

/// How soon keys that could not be fetched are asked for again: until they are, a token is
/// answered 503 (try again), never 401.
const AFTER_FAILURE: Duration = Duration::from_secs(2);

/// Checks bearer tokens for `[serve.auth]`.
pub(crate) struct Verifier {
    spec: Auth,
    issuers: Vec<Issuer>,
    client: reqwest::Client,
    /// Tokens already checked (by SHA-256 digest) with who they name, until they expire:
    /// a client sends the same token with every request, and a signature is checked once.
    /// Emptied when an issuer's keys are fetched again; at most [`CHECKED`] entries.
    checked: std::sync::Mutex<HashMap<[u8; 32], (Identity, u64)>>,
}

/// The most checked tokens kept (past it, the expired go, and if none has, all go).
const CHECKED: usize = 10_000;

impl Verifier {
    pub(crate) fn new(spec: Auth) -> Verifier {
        let issuers = (spec.issuers.iter())
            .map(|id| Issuer {
                id: id.clone(),
                keys: RwLock::default(),
                fetched: tokio::sync::Mutex::new(None),
            })
            .collect();
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Verifier {
            spec,
            issuers,
            client,
            checked: std::sync::Mutex::default(),
        }
    }

    pub(crate) fn spec(&self) -> &Auth {
        &self.spec
    }

    /// Fetch every issuer's keys now (at start); `Err` names those that could not be.
    pub(crate) async fn prime(&self) -> Result<(), Vec<String>> {
        let mut failed = Vec::new();
        for i in &self.issuers {
            if let Err(e) = self.refresh(i, true).await {
                failed.push(format!("{}: {}", i.id, e.reason()));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed)
        }
    }

    /// Check `token`: the caller it names, or why it is refused.
    pub(crate) async fn check(&self, token: &str) -> Result<Identity, Rejection> {
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        if let Some((id, _)) = self.known().get(&digest).filter(|(_, exp)| now < *exp) {
            return Ok(id.clone());
        }
        let (id, exp) = self.verify(token).await?;
        let mut known = self.known();
        if known.len() >= CHECKED {
            known.retain(|_, (_, e)| now < *e);
            if known.len() >= CHECKED {
                known.clear();
            }
        }
        known.insert(digest, (id.clone(), exp));
        Ok(id)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Identity, u64)>> {
        self.checked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Check `token`'s signature and claims: who it names, and when it expires.
    async fn verify(&self, token: &str) -> Result<(Identity, u64), Rejection> {
        let alg = header_alg(token)?;
        let claims = unverified_claims(token)?;
        let iss = claims["iss"].as_str().unwrap_or_default();
        let Some(issuer) = self.issuers.iter().find(|i| i.id == iss) else {
            return Err(invalid(format!(
                "its issuer `{iss}` is not one this gateway accepts"
            )));
        };
        let kid = jsonwebtoken::decode_header(token)
            .map_err(|e| invalid(format!("its header does not parse: {e}")))?
            .kid;
        let (key, refreshed) = match self.key(issuer, kid.as_deref(), alg) {
            Some(k) => (k, false),
            None => {
                // A key not seen yet: the issuer may have rotated its keys.
                self.refresh(issuer, false).await?;
                let k = self.key(issuer, kid.as_deref(), alg).ok_or_else(|| {
                    invalid(format!(
                        "it is signed by a key `{}` its issuer does not publish",
                        kid.as_deref().unwrap_or("(no kid)")
                    ))
                })?;
                (k, true)
            }
        };
        let v = self.validation(issuer, alg);
        let data = match jsonwebtoken::decode::<Value>(token, &key, &v) {
            Ok(d) => d,
            // A known `kid` whose signature fails: the issuer may have put a new key under the
            // same `kid`. Its keys are fetched again (as often as for an unknown one), once.
            Err(e)
                if !refreshed && *e.kind() == jsonwebtoken::errors::ErrorKind::InvalidSignature =>
            {
                self.refresh(issuer, false).await?;
                let key = self
                    .key(issuer, kid.as_deref(), alg)
                    .ok_or_else(|| why_invalid(e))?;
                jsonwebtoken::decode::<Value>(token, &key, &v).map_err(why_invalid)?
            }
            Err(e) => return Err(why_invalid(e)),
        };
        let exp = data.claims["exp"].as_u64().unwrap_or(0);
        Ok((self.identity(&data.claims)?, exp))
    }

    /// What a token of `issuer` signed with `alg` must hold.
    fn validation(&self, issuer: &Issuer, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.set_issuer(&[&issuer.id]);
        v.set_audience(&[&self.spec.resource]);
        v.leeway = self.spec.leeway.as_secs();
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v
    }

    /// The caller the (verified) claims name, once its scopes are checked.
    fn identity(&self, claims: &Value) -> Result<Identity, Rejection> {
        let has = words(claims.get("scope").or_else(|| claims.get("scp")));
        let missing: Vec<String> = (self.spec.scopes.iter())
            .filter(|s| !has.contains(s))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(Rejection::Scope(missing));
        }
        let Some(subject) = claims[&self.spec.subject_claim].as_str() else {
            let c = &self.spec.subject_claim;
            return Err(invalid(format!("it has no `{c}` claim naming the caller")));
        };
        let tenant = match &self.spec.tenant_claim {
            None => None,
            Some(c) => match &claims[c] {
                Value::Null => None,
                Value::String(t) => {
                    crate::ids::check_id("tenant", t)
                        .map_err(|e| invalid(format!("its `{c}` claim: {e}")))?;
                    Some(t.clone())
                }
                _ => return Err(invalid(format!("its `{c}` claim is not a string"))),
            },
        };
        Ok(Identity {
            subject: subject.to_string(),
            tenant,
            roles: words(claims.get(&self.spec.roles_claim)),
        })
    }

    /// The key that verifies a token of `kid` and `alg`, when it is known.
    fn key(&self, issuer: &Issuer, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let keys = issuer.keys.read().unwrap_or_else(|e| e.into_inner());
        let fits = |(k, a): &(DecodingKey, Option<Algorithm>)| {
            k.family() == alg.family() && a.is_none_or(|a| a == alg)
        };
        match kid {
            Some(kid) => keys
                .by_kid
                .get(kid)
                .filter(|k| fits(k))
                .map(|k| k.0.clone()),
            None => {
                let mut found = keys
                    .unnamed
                    .iter()
                    .chain(keys.by_kid.values())
                    .filter(|k| fits(k));
                // Without a kid, only a single key of the family is unambiguous.
                match (found.next(), found.next()) {
                    (Some(k), None) => Some(k.0.clone()),
                    _ => None,
                }
            }
        }
    }

    /// Fetch `issuer`'s keys again — unless (`force` aside) they were fetched within
    /// `jwks_refresh`, or asked for in vain within [`AFTER_FAILURE`] (then: unavailable).
    async fn refresh(&self, issuer: &Issuer, force: bool) -> Result<(), Rejection> {
        let mut last = issuer.fetched.lock().await;
        match &*last {
            Some((at, Ok(()))) if !force && at.elapsed() < self.spec.jwks_refresh => return Ok(()),
            Some((at, Err(why)))
                if !force && at.elapsed() < AFTER_FAILURE.min(self.spec.jwks_refresh) =>
            {
                return Err(Rejection::Unavailable(why.clone()))
            }
            _ => {}
        }
        let fetched = self.fetch(&issuer.id).await;
        *last = Some((
            Instant::now(),
            fetched.as_ref().map(|_| ()).map_err(Clone::clone),
        ));
        let keys = fetched.map_err(Rejection::Unavailable)?;
        *issuer.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        // A key the issuer no longer publishes vouches for no token from now on.
        self.known().clear();
        Ok(())
    }

    /// The issuer's metadata, then its JWKS.
    async fn fetch(&self, issuer: &str) -> Result<Keys, String> {
        let meta = self.metadata(issuer).await?;
        let Some(uri) = meta["jwks_uri"].as_str() else {
            return Err(format!("the metadata of issuer `{issuer}` has no jwks_uri"));
        };
        let set = self.json(uri).await?;
        let mut keys = Keys::default();
        for k in set["keys"].as_array().into_iter().flatten() {
            // Encryption keys, and key types this gateway cannot verify with, are skipped.
            if k["use"].as_str().is_some_and(|u| u != "sig") {
                continue;
            }
            let Ok(jwk) = serde_json::from_value::<Jwk>(k.clone()) else {
                continue;
            };
            let Ok(key) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            let alg =
                (jwk.common.key_algorithm).and_then(|a| a.to_string().parse::<Algorithm>().ok());
            if key.family() == jsonwebtoken::AlgorithmFamily::Hmac {
                continue;
            }
            match jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid, (key, alg));
                }
                None => keys.unnamed.push((key, alg)),
            }
        }
        Ok(keys)
    }

    /// RFC 8414's `/.well-known/oauth-authorization-server` (inserted before the issuer's
    /// path), else OpenID's `/.well-known/openid-configuration` (after it); its `issuer` must
    /// be the one asked about.
    async fn metadata(&self, issuer: &str) -> Result<Value, String> {
        let trimmed = issuer.trim_end_matches('/');
        let (origin, path) = origin_and_path(trimmed);
        let tries = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{trimmed}/.well-known/openid-configuration"),
        ];
        let mut last = String::new();
        for url in &tries {
            match self.json(url).await {
                Ok(meta) if meta["issuer"].as_str() == Some(issuer) => return Ok(meta),
                Ok(meta) => {
                    last = format!(
                        "{url} names issuer `{}`, not `{issuer}`",
                        meta["issuer"].as_str().unwrap_or("")
                    );
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn json(&self, url: &str) -> Result<Value, String> {
        let shown = crate::run::redact_url(url);
        let r = (self.client.get(url).send().await)
            .map_err(|e| format!("cannot fetch {shown}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("{shown} answered {}", r.status()));
        }
        // Metadata and key sets are small: a huge answer is refused, not read.
        let body = r.bytes().await.map_err(|e| format!("{shown}: {e}"))?;
        if body.len() > 1 << 20 {
            return Err(format!("{shown} answered more than 1 MiB"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("{shown} is not JSON: {e}"))
    }
}

fn invalid(why: String) -> Rejection {
    Rejection::Invalid(why)
}

/// The header's `alg`, refusing `none` and HMAC by name (before any key is looked at).
fn header_alg(token: &str) -> Result<Algorithm, Rejection> {
    let head = token.split('.').next().unwrap_or_default();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .ok_or_else(|| invalid("it is not a JWT (its header does not decode)".into()))?;
    let alg = raw["alg"].as_str().unwrap_or_default();
    if alg.eq_ignore_ascii_case("none") || alg.is_empty() {
        return Err(invalid("it is unsigned (alg none)".into()));
    }
    if alg.starts_with("HS") {
        return Err(invalid(format!(
            "it is signed with {alg} (a shared secret); only asymmetric signatures are accepted"
        )));
    }
    alg.parse::<Algorithm>()
        .map_err(|_| invalid(format!("its algorithm `{alg}` is not supported")))
}

/// The claims, read before the signature is checked — only to choose the issuer whose keys
/// check it.
fn unverified_claims(token: &str) -> Result<Value, Rejection> {
    jsonwebtoken::dangerous::insecure_decode::<Value>(token)
        .map(|d| d.claims)
        .map_err(|e| invalid(format!("its claims do not parse: {e}")))
}

fn why_invalid(e: jsonwebtoken::errors::Error) -> Rejection {
    use jsonwebtoken::errors::ErrorKind as K;
    invalid(match e.kind() {
        K::ExpiredSignature => "it has expired".into(),
        K::ImmatureSignature => "it is not valid yet (nbf)".into(),
        K::InvalidAudience => "its audience is not this resource".into(),
        K::InvalidIssuer => "its issuer does not match".into(),
        K::InvalidSignature => "its signature does not verify".into(),
        K::InvalidAlgorithm => "its algorithm does not match its key".into(),
        K::MissingRequiredClaim(c) => format!("it has no `{c}` claim"),
        other => format!("it does not verify: {other:?}"),
    })
}

/// A claim that is a space-separated string or an array of strings, as words.
fn words(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// A URL's `scheme://authority` and the path after it (`""` when it has none).
fn origin_and_path(url: &str) -> (&str, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find('/') {
        Some(p) => url.split_at(start + p),
        None => (url, ""),
    }
}

/// This resource's metadata document (RFC 9728).
pub(crate) fn resource_metadata(spec: &Auth) -> Value {
    serde_json::json!({
        "resource": spec.resource,
        "authorization_servers": spec.issuers,
        "scopes_supported": spec.scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "flux-tools",
    })
}

/// The path of the metadata document for `resource` (RFC 9728 §3.1: the well-known name
/// inserted before the resource's path), and the URL a 401 names.
pub(crate) fn metadata_location(resource: &str) -> (String, String) {
    let (origin, path) = origin_and_path(resource);
    let path = path.trim_end_matches('/');
    let at = format!("/.well-known/oauth-protected-resource{path}");
    (at.clone(), format!("{origin}{at}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn the_metadata_document_sits_before_the_resources_path() {
        let (path, url) = metadata_location("https://gw.example.com/mcp");
        assert_eq!(path, "/.well-known/oauth-protected-resource/mcp");
        assert_eq!(
            url,
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let (path, url) = metadata_location("http://127.0.0.1:8808");
        assert_eq!(path, "/.well-known/oauth-protected-resource");
        assert_eq!(
            url,
            "http://127.0.0.1:8808/.well-known/oauth-protected-resource"
        );
    }

    fn token_with_header(header: &str) -> String {
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.{}.", e.encode(header), e.encode("{\"sub\":\"x\"}"))
    }

    #[test]
    fn unsigned_and_hmac_tokens_are_refused_by_name() {
        let none = header_alg(&token_with_header(r#"{"alg":"none"}"#));
        assert_eq!(none, Err(invalid("it is unsigned (alg none)".into())));
        let hs = header_alg(&token_with_header(r#"{"alg":"HS256"}"#)).unwrap_err();
        assert!(hs.reason().contains("HS256"), "{hs:?}");
        assert!(matches!(header_alg("garbage"), Err(Rejection::Invalid(_))));
        assert_eq!(
            header_alg(&token_with_header(r#"{"alg":"ES256"}"#)),
            Ok(Algorithm::ES256)
        );
    }

    /// A key for these tests only.
    const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgXBMUDUyqlIEkrdBM
7vRvXgBDWVQAYKb3yG3YhiJM7K6hRANCAATj/YrKs3aF9HmHaZcsOrD8PoUgx/F7
qtQM7VGSrS/AvMWxtLd5Ff1i+mSpfWGOXQaJg0xYmq28VePgLDZb89Q3
-----END PRIVATE KEY-----
";

    /// An issuer on loopback serving its metadata and `jwks`: its URL, how many times its
    /// keys were fetched, and its task (abort it to take the issuer away).
    async fn issuer(jwks: Value) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        issuer_on(listener, Arc::new(std::sync::Mutex::new(jwks)))
    }

    /// [`issuer`] on `listener`, serving whatever `jwks` holds when asked.
    fn issuer_on(
        listener: tokio::net::TcpListener,
        jwks: Arc<std::sync::Mutex<Value>>,
    ) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let url = format!("http://{}", listener.local_addr().unwrap());
        let meta = serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let fetched = Arc::new(AtomicUsize::new(0));
        let count = fetched.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let asked = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if asked.starts_with("GET /jwks") {
                    count.fetch_add(1, Ordering::SeqCst);
                    jwks.lock().unwrap().to_string()
                } else {
                    meta.to_string()
                };
                let reply = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        (url, fetched, task)
    }

    fn mint(key: &jsonwebtoken::EncodingKey, kid: &str, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(Algorithm::ES256);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, claims, key).unwrap()
    }

    /// A flood of tokens naming keys nobody published costs the issuer nothing more within
    /// `jwks_refresh`; a token once checked is kept, so it is let in with the issuer gone.
    #[tokio::test]
    async fn unknown_kids_fetch_the_keys_at_most_once_per_interval_and_a_checked_token_is_kept() {
        let key = jsonwebtoken::EncodingKey::from_ec_pem(TEST_KEY.as_bytes()).unwrap();
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some("k1".into());
        let (url, fetched, task) = issuer(serde_json::json!({"keys": [jwk]})).await;
        let verifier = Verifier::new(Auth {
            issuers: vec![url.clone()],
            resource: "https://gw.example.com/mcp".into(),
            scopes: vec!["mcp:tools".into()],
            tenant_claim: Some("org".into()),
            roles_claim: "roles".into(),
            subject_claim: "sub".into(),
            leeway: Duration::from_secs(60),
            jwks_refresh: Duration::from_secs(30),
        });
        verifier.prime().await.unwrap();
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let claims = serde_json::json!({"iss": url, "aud": "https://gw.example.com/mcp", "sub": "alice",
            "exp": exp, "scope": "mcp:tools", "org": "acme", "roles": "reader writer"});
        let good = mint(&key, "k1", &claims);
        let id = verifier.check(&good).await.unwrap();
        assert_eq!(
            id,
            Identity {
                subject: "alice".into(),
                tenant: Some("acme".into()),
                roles: vec!["reader".into(), "writer".into()]
            }
        );
        for i in 0..50 {
            let forged = mint(&key, &format!("x{i}"), &claims);
            let refused = verifier.check(&forged).await.unwrap_err();
            assert!(refused.reason().contains("does not publish"), "{refused:?}");
        }
        assert_eq!(
            fetched.load(Ordering::SeqCst),
            1,
            "no fetch within jwks_refresh"
        );
        task.abort();
        let _ = task.await;
        assert_eq!(verifier.check(&good).await.unwrap().subject, "alice");
    }

    /// A second key for these tests (a rotation).
    const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRb1uRzb1Vt7EaBKu
Y40doXrWCJubde+QLNdgu9KiaQ2hRANCAATUbVg+4rJLPwQMC/YLD5F+VZRs1cts
7pI2FQUzo9ozXfSdsKC9Dd4QP/B1dadJGPnqjMCoMvDFFAHhKMxiPSpa
-----END PRIVATE KEY-----
";

    fn verifier_of(url: &str, jwks_refresh: Duration) -> Verifier {
        Verifier::new(Auth {
            issuers: vec![url.to_string()],
            resource: "https://gw.example.com/mcp".into(),
            scopes: vec![],
            tenant_claim: None,
            roles_claim: "roles".into(),
            subject_claim: "sub".into(),
            leeway: Duration::from_secs(60),
            jwks_refresh,
        })
    }

    fn jwks_of(key: &jsonwebtoken::EncodingKey, kid: &str) -> Value {
        let mut jwk = Jwk::from_encoding_key(key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.into());
        serde_json::json!({"keys": [jwk]})
    }

    fn claims_of(url: &str) -> Value {
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        serde_json::json!({"iss": url, "aud": "https://gw.example.com/mcp", "sub": "alice", "exp": exp})
    }

    /// The issuer away when the gateway starts: a valid token is "try again" (503), never
    /// "invalid" (401), and is let in once the issuer is back — within seconds, not a
    /// `jwks_refresh` later.
    #[tokio::test]
    async fn an_issuer_down_at_start_is_unavailable_until_its_keys_are_fetched() {
        let key = jsonwebtoken::EncodingKey::from_ec_pem(TEST_KEY.as_bytes()).unwrap();
        let place = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = place.local_addr().unwrap();
        drop(place);
        let url = format!("http://{addr}");
        let verifier = verifier_of(&url, Duration::from_secs(30));
        assert!(verifier.prime().await.is_err());
        let token = mint(&key, "k1", &claims_of(&url));
        let refused = verifier.check(&token).await.unwrap_err();
        assert!(matches!(refused, Rejection::Unavailable(_)), "{refused:?}");
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let jwks = Arc::new(std::sync::Mutex::new(jwks_of(&key, "k1")));
        let (_, fetched, task) = issuer_on(listener, jwks);
        // Within AFTER_FAILURE the issuer is not asked again: still 503.
        let refused = verifier.check(&token).await.unwrap_err();
        assert!(matches!(refused, Rejection::Unavailable(_)), "{refused:?}");
        assert_eq!(fetched.load(Ordering::SeqCst), 0);
        tokio::time::sleep(AFTER_FAILURE + Duration::from_millis(200)).await;
        assert_eq!(verifier.check(&token).await.unwrap().subject, "alice");
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        task.abort();
    }

    /// A key replaced under the same `kid`: a token signed with the new key makes the keys be
    /// fetched again once, and is let in; a forged one is still refused.
    #[tokio::test]
    async fn a_key_rotated_under_the_same_kid_is_fetched_again_on_a_failed_signature() {
        let old = jsonwebtoken::EncodingKey::from_ec_pem(TEST_KEY.as_bytes()).unwrap();
        let new = jsonwebtoken::EncodingKey::from_ec_pem(OTHER_KEY.as_bytes()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let jwks = Arc::new(std::sync::Mutex::new(jwks_of(&old, "k1")));
        let (url, fetched, task) = issuer_on(listener, jwks.clone());
        let verifier = verifier_of(&url, Duration::ZERO);
        verifier.prime().await.unwrap();
        let claims = claims_of(&url);
        assert!(verifier.check(&mint(&old, "k1", &claims)).await.is_ok());
        *jwks.lock().unwrap() = jwks_of(&new, "k1");
        assert_eq!(
            verifier
                .check(&mint(&new, "k1", &claims))
                .await
                .unwrap()
                .subject,
            "alice"
        );
        assert_eq!(fetched.load(Ordering::SeqCst), 2, "fetched again once");
        // The old key is gone: its token is refused (after one more look).
        let refused = verifier
            .check(&mint(&old, "k1", &claims))
            .await
            .unwrap_err();
        assert!(refused.reason().contains("signature"), "{refused:?}");
        task.abort();
    }

    #[test]
    fn scopes_and_roles_are_words_of_a_string_or_an_array() {
        assert_eq!(words(Some(&serde_json::json!("a b  c"))), ["a", "b", "c"]);
        assert_eq!(words(Some(&serde_json::json!(["x", 1, "y"]))), ["x", "y"]);
        assert!(words(None).is_empty());
    }
}
