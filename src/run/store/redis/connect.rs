//! Reaching Redis: connecting (a TLS refusal said in our words), loading the scripts, and
//! the URL as any message shows it (a password as `***`).

use super::*;

pub(super) fn store_error(url: &str, e: impl std::fmt::Display) -> LaneError {
    let e = e.to_string();
    match tls_cause(&e) {
        Some(why) => LaneError(format!(
            "{url} is unreachable: {why} ({e})\nhint: make a CA, sign the server's certificate with it (its subjectAltName naming the host of the URL), and trust the CA: SSL_CERT_FILE=ca.pem (docs/src/semantics.md, \"Redis over TLS\")"
        )),
        None => LaneError(format!("{url} is unreachable: {e}")),
    }
}

/// A TLS certificate refusal, in rustls' words, said in ours.
fn tls_cause(e: &str) -> Option<&'static str> {
    [
        ("CaUsedAsEndEntity", "the server presents a CA certificate as its own (a self-signed certificate, as `openssl req -x509` makes one), which TLS refuses even when it is trusted"),
        ("UnknownIssuer", "the server's certificate is signed by a CA this machine does not trust"),
        ("NotValidForName", "the server's certificate does not name the host of the URL"),
        ("Expired", "the server's certificate has expired"),
    ]
    .into_iter()
    .find(|(word, _)| e.contains(word))
    .map(|(_, why)| why)
}

/// The URL as shown in any message: a password (`redis://user:secret@host`) as `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let user = rest[..at].split(':').next().unwrap_or("");
    format!("{scheme}://{user}:***@{}", &rest[at + 1..])
}

impl RedisLanes {
    /// Connect; `namespace` (the manifest's canonical path) separates manifests sharing a Redis.
    pub(crate) async fn connect(
        url: &str,
        specs: &[LaneSpec],
        namespace: &str,
    ) -> Result<RedisLanes, LaneError> {
        let client = redis::Client::open(url)
            .map_err(|e| LaneError(format!("--lane-store {}: {e}", redact_url(url))))?;
        // Short timeouts and one retry a request: the store's own loop retries for
        // `UNREACHABLE_FOR`, and a Redis that is gone must not stretch each attempt.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = tokio::time::timeout(
            UNREACHABLE_FOR,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| store_error(&redact_url(url), "no answer"))?
        .map_err(|e| store_error(&redact_url(url), e))?;
        load_scripts(&mut conn.clone()).await;
        let lease = std::env::var("FLUX_TOOLS_LEASE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(DEFAULT_LEASE, Duration::from_millis)
            .max(Duration::from_millis(300));
        let ns = format!("{:016x}", crate::hash::fnv(namespace.as_bytes()));
        let mem = MemoryLanes::sharing(specs, true);
        let lanes = redis_lanes(specs, &ns, &mem, &conn);
        Ok(RedisLanes {
            // Only ever shown, so only ever kept redacted.
            url: redact_url(url),
            conn,
            mem: Arc::new(mem),
            paused: specs.iter().map(|_| std::sync::Mutex::new(None)).collect(),
            lanes,
            bells: bell::Bells::new(client.clone(), &ns),
            pending: Arc::default(),
            ns,
            lease,
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            release_along: Script::new(RELEASE_ALONG),
            leave: Script::new(LEAVE),
            renew: Script::new(RENEW),
            tokens: Script::new(TOKENS),
            down_since: std::sync::Mutex::new(None),
            flow: (format!("run-{:016x}", fastrand::u64(..)).into(), 1),
        })
    }
}

/// Load every script up front (best effort). A script Redis does not know yet costs its first
/// run a `NOSCRIPT` answer and a second round trip: a release would then reach Redis after the
/// waiter it freed in this process had asked, and queue it behind its own permits. (A Redis
/// that restarts later forgets them; each is loaded again as it is first run.)
async fn load_scripts(conn: &mut ConnectionManager) {
    let mut pipe = redis::pipe();
    for code in [ACQUIRE, RELEASE, RELEASE_ALONG, LEAVE, RENEW, TOKENS, SPEND] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
    }
    let _: Result<(), _> = pipe.query_async(conn).await;
}
