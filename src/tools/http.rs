//! The `http` kind: one request per call through the run's shared `reqwest::Client`.
//!
//! The URL's placeholders are percent-encoded (every byte but the unreserved ones), so a value
//! can never add a path segment, a query or a fragment, and the manifest check keeps them out
//! of the host. Arguments named in `query` go to the query string; with `body = "json"` the
//! rest are the JSON body. Header values may hold `${env:…}` secrets: they are marked
//! sensitive, and every message names the URL as the manifest wrote it (secrets as `***`),
//! never the URL that was sent. 2xx is success (JSON when the content type says so); 429 is
//! `rate_limited` and 502/503/504 `http_status`, both transient with their `Retry-After`.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use serde_json::{Map, Value};

use std::collections::BTreeMap;

use serde_json::json;
use toml::de::DeTable;

use super::{Failure, Invocation, Kind, Site, Stop, ToolContext};
use crate::events::ErrorKind;
use crate::manifest::reader::Reader;
use crate::manifest::Tool;
use crate::template::{redacted_map, value_text, RenderError, Template};

/// `kind = "http"`: one request per call.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    pub method: String,
    /// Placeholders only in the path and query: an argument can never choose the host.
    pub url: Template,
    pub max_output: u64,
    pub headers: BTreeMap<String, Template>,
    pub body_json: bool,
    pub query: Vec<String>,
}

impl Kind for HttpSpec {
    const NAME: &'static str = "http";
    const KEYS: &'static [&'static str] =
        &["method", "url", "headers", "body", "query", "max_output"];
    type Runner = HttpTool;

    fn parse(r: &mut Reader<'_>, t: &DeTable<'_>, site: &Site<'_>) -> HttpSpec {
        let (ctx, span) = (site.ctx, site.span.clone());
        let method = r
            .string(t, "method", ctx)
            .map_or_else(|| "GET".to_string(), |(s, _)| s.to_ascii_uppercase());
        let url = match r.string(t, "url", ctx) {
            Some((s, us)) => {
                let tpl = r.template(&s, us.clone(), true);
                if let Err(e) = check_url_template(&tpl) {
                    r.error(us, format!("`url` in {ctx}: {e}"), None);
                }
                tpl
            }
            None => {
                r.error(span, format!("{ctx} needs `url`"), None);
                Template {
                    segments: Vec::new(),
                }
            }
        };
        let body_json = match r.string(t, "body", ctx) {
            Some((s, _)) if s == "json" => true,
            Some((s, _)) if s == "none" => false,
            Some((s, bs)) => {
                r.error(
                    bs,
                    format!("`body` in {ctx} is `{s}`; use \"json\" or \"none\""),
                    None,
                );
                false
            }
            None => !matches!(method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS"),
        };
        let max_output = r.max_output(t, ctx);
        HttpSpec {
            method,
            url,
            max_output,
            headers: r.template_map(t, "headers", ctx),
            body_json,
            query: r
                .strings(t, "query", ctx)
                .unwrap_or_default()
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
        }
    }

    fn placeholders(&self) -> Vec<&str> {
        self.url.placeholders().collect()
    }

    fn target(&self) -> String {
        format!("{} {}", self.method, self.url.redacted())
    }

    fn settings(&self) -> Value {
        json!({
            "method": self.method,
            "url": self.url.redacted(),
            "headers": redacted_map(&self.headers),
            "body": if self.body_json { "json" } else { "none" },
            "query": self.query,
        })
    }

    fn runner(&self, tool: &Tool, ctx: &ToolContext) -> Result<HttpTool, String> {
        match &ctx.http {
            Some(Ok(client)) => Ok(HttpTool::new(tool, self.clone(), client.clone())),
            Some(Err(e)) => Err(e.clone()),
            None => Err("the HTTP client was not set up".into()),
        }
    }
}

super::kind::invoke_boxed!(HttpTool);

/// An http tool's URL must be `http(s)://host…`, and every `{placeholder}` must come after the
/// host (in the path or query), so an argument can never choose where a request goes.
fn check_url_template(t: &Template) -> Result<(), String> {
    use crate::template::Segment;
    let mut prefix = String::new();
    for seg in &t.segments {
        match seg {
            Segment::Lit(l) => prefix.push_str(l),
            Segment::Env(_) => prefix.push_str("env"),
            Segment::Arg(a) => {
                let after_scheme = prefix.split_once("://").map(|(_, rest)| rest);
                if !after_scheme.is_some_and(|r| r.contains(['/', '?'])) {
                    return Err(format!("placeholder `{{{a}}}` is in the scheme or host; put arguments in the path or query"));
                }
                break;
            }
        }
    }
    let lower = t.redacted().to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("***"))
    {
        return Err("the URL must start with http:// or https://".into());
    }
    Ok(())
}

/// How much of an error response's body a message keeps.
const EXCERPT: usize = 200;

pub struct HttpTool {
    name: String,
    spec: HttpSpec,
    client: reqwest::Client,
    /// The URL as the manifest wrote it, secrets as `***`: the only form messages show.
    shown_url: String,
}

/// Percent-encode everything but RFC 3986's unreserved characters.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(3600)));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_secs(3600)),
    )
}

impl HttpTool {
    pub fn new(tool: &Tool, spec: HttpSpec, client: reqwest::Client) -> HttpTool {
        HttpTool {
            name: tool.name.clone(),
            shown_url: spec.url.redacted(),
            spec,
            client,
        }
    }

    fn failed(&self, kind: ErrorKind, what: impl std::fmt::Display) -> Failure {
        Failure::failed(
            kind,
            format!(
                "tool `{}` ({} {}): {what}",
                self.name, self.spec.method, self.shown_url
            ),
        )
    }

    fn request(&self, inv: &Invocation) -> Result<reqwest::RequestBuilder, Failure> {
        let args = inv.args();
        let url = self.spec.url.render(args, &encode).map_err(|e| match e {
            RenderError::MissingArg(_) => self.failed(ErrorKind::Guardrail, &e),
            RenderError::Env(m) => self.failed(ErrorKind::SpawnFailed, m),
        })?;
        let mut url = reqwest::Url::parse(&url)
            .map_err(|e| self.failed(ErrorKind::SpawnFailed, format!("invalid URL: {e}")))?;
        if !self.spec.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for q in &self.spec.query {
                if let Some(v) = args.get(q) {
                    pairs.append_pair(q, &value_text(v));
                }
            }
        }
        let method = reqwest::Method::from_bytes(self.spec.method.as_bytes()).map_err(|_| {
            self.failed(
                ErrorKind::SpawnFailed,
                format!("`{}` is not an HTTP method", self.spec.method),
            )
        })?;
        let mut headers = HeaderMap::new();
        for (k, t) in &self.spec.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                self.failed(
                    ErrorKind::SpawnFailed,
                    format!("`{k}` is not a header name"),
                )
            })?;
            let text = t
                .render(args, &|s| s.to_string())
                .map_err(|e| self.failed(ErrorKind::SpawnFailed, e))?;
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                self.failed(
                    ErrorKind::SpawnFailed,
                    format!("header `{k}` has a value that cannot be sent"),
                )
            })?;
            value.set_sensitive(t.has_secret());
            headers.insert(name, value);
        }
        if let Some(key) = &inv.idempotency_key {
            if let Ok(v) = HeaderValue::from_str(key) {
                headers.insert(HeaderName::from_static("idempotency-key"), v);
            }
        }
        if let Some(tp) = inv.traceparent() {
            if let Ok(v) = HeaderValue::from_str(&tp) {
                headers.insert(HeaderName::from_static("traceparent"), v);
            }
        }
        let mut req = self.client.request(method, url).headers(headers);
        if self.spec.body_json {
            let body: Map<String, Value> = args
                .iter()
                .filter(|(k, _)| !self.spec.query.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let bytes =
                serde_json::to_vec(&body).map_err(|e| self.failed(ErrorKind::SpawnFailed, e))?;
            req = req.header(CONTENT_TYPE, "application/json").body(bytes);
        }
        Ok(req)
    }

    async fn call(&self, inv: &Invocation, stop: &mut Stop) -> Result<Value, Failure> {
        let req = self.request(inv)?;
        let mut quota = None;
        let r = tokio::select! {
            r = self.send(req, &mut quota) => r,
            _ = stop.stopped() => Err(Failure::Stopped),
        };
        if let Some(q) = quota {
            stop.tell_quota(q);
        }
        r
    }

    /// Send the request and read its answer (and the quota its headers state into `quota`).
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        quota: &mut Option<super::quota::Quota>,
    ) -> Result<Value, Failure> {
        let mut resp = req.send().await.map_err(|e| self.transport_error(e))?;
        *quota = super::quota::of(resp.headers());
        let status = resp.status();
        let json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("json"));
        let wait = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let limit = usize::try_from(self.spec.max_output).unwrap_or(usize::MAX);
        let keep = if status.is_success() {
            limit
        } else {
            EXCERPT * 4
        };
        let mut body: Vec<u8> = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport_error(e))? {
            if body.len() + chunk.len() > keep {
                if status.is_success() {
                    return Err(self.failed(
                        ErrorKind::OutputTooLarge,
                        format!(
                            "the response is larger than its max_output of {} bytes",
                            self.spec.max_output
                        ),
                    ));
                }
                body.extend_from_slice(&chunk[..keep - body.len()]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            if json {
                return serde_json::from_slice(&body).map_err(|e| {
                    self.failed(
                        ErrorKind::InvalidOutput,
                        format!("the response says JSON but is not: {e}"),
                    )
                });
            }
            return match String::from_utf8(body) {
                Ok(text) => Ok(Value::String(text)),
                Err(_) => {
                    Err(self.failed(ErrorKind::InvalidOutput, "the response is not UTF-8 text"))
                }
            };
        }
        let text = String::from_utf8_lossy(&body);
        let mut excerpt: String = text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(EXCERPT)
            .collect();
        if truncated || text.chars().count() > EXCERPT {
            excerpt.push('…');
        }
        let code = status.as_u16();
        let reason = status.canonical_reason().unwrap_or("");
        let kind = if code == 429 {
            ErrorKind::RateLimited
        } else {
            ErrorKind::HttpStatus
        };
        let mut message = format!(
            "tool `{}` ({} {}): HTTP {code} {reason}",
            self.name, self.spec.method, self.shown_url
        );
        if !excerpt.is_empty() {
            message.push_str(&format!(": {excerpt}"));
        }
        if code == 404 {
            return Err(Failure::Absent(message));
        }
        Err(Failure::Failed {
            kind,
            message,
            transient: matches!(code, 429 | 502 | 503 | 504),
            retry_after: wait,
        })
    }

    /// A connection, TLS or protocol error: the cause chain without the URL that was sent.
    fn transport_error(&self, e: reqwest::Error) -> Failure {
        let transient = e.is_connect();
        let e = e.without_url();
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let t = s.to_string();
            if !chain.contains(&t) {
                chain.push_str(": ");
                chain.push_str(&t);
            }
            source = s.source();
        }
        Failure::Failed {
            kind: ErrorKind::HttpError,
            message: format!(
                "tool `{}` ({} {}): {chain}",
                self.name, self.spec.method, self.shown_url
            ),
            transient,
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_values_inside_their_segment() {
        assert_eq!(encode("a b/../c?d#e@f"), "a%20b%2F..%2Fc%3Fd%23e%40f");
        assert_eq!(encode("é"), "%C3%A9");
        assert_eq!(encode("safe-._~"), "safe-._~");
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        let soon = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let d = retry_after(&soon).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }
}
