//! The HTTP client of an upstream server with `auth`: each request carries the server's
//! current access token; a 401 (`invalid_token`) renews it once — or takes the one another
//! call renewed meanwhile — and sends the request again; a 403 `insufficient_scope` keeps the
//! scope it names for the next sign-in and says so.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::Tokens;

type Error = StreamableHttpError<reqwest::Error>;

/// A `reqwest::Client` that signs each request with the server's token.
#[derive(Clone)]
pub(crate) struct Bearer {
    pub(crate) http: reqwest::Client,
    pub(crate) tokens: Arc<Tokens>,
}

impl Bearer {
    /// `send` with the current token, and once more with a renewed one after a 401.
    async fn signed<T, F, Fut>(&self, send: F) -> Result<T, Error>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let token = self.tokens.token().await.map_err(|w| self.refusal(w))?;
        match send(token.clone()).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let fresh = self.tokens.refused(&token).await.map_err(|w| self.refusal(w))?;
                match send(fresh).await {
                    Err(StreamableHttpError::AuthRequired(_)) => Err(self.refusal(
                        self.tokens.sign_in("refused a token it was just given"),
                    )),
                    other => other.map_err(|e| self.scope(e)),
                }
            }
            other => other.map_err(|e| self.scope(e)),
        }
    }

    /// The error of a request the server refused (or that had no token), noted for the call.
    fn refusal(&self, why: String) -> Error {
        self.tokens.note_refusal(&why);
        StreamableHttpError::Auth(AuthError::AuthorizationFailed(why))
    }

    /// A 403 `insufficient_scope`: the scope is kept for the next sign-in, and the error
    /// says so.
    fn scope(&self, e: Error) -> Error {
        let StreamableHttpError::InsufficientScope(s) = &e else {
            return e;
        };
        let scope = s.required_scope.clone().unwrap_or_default();
        if self.tokens.for_a_caller() {
            // A caller's token has the manifest's `scopes`: that is where more is asked for.
            let why = self.tokens.wants_scopes(&scope);
            return self.refusal(why);
        }
        match self.tokens.want_scopes(&scope) {
            Ok(()) => self.refusal(self.tokens.sign_in(&format!(
                "needs the scope `{scope}` this sign-in does not have (the next sign-in asks for it)"
            ))),
            Err(why) => self.refusal(why),
        }
    }
}

impl StreamableHttpClient for Bearer {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.signed(|t| {
            let (u, m, s, h) = (uri.clone(), message.clone(), session_id.clone(), headers.clone());
            async move { self.http.post_message(u, m, s, Some(t), h).await }
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.signed(|t| {
            let (u, m, s, h) = (uri.clone(), message.clone(), session_id.clone(), headers.clone());
            async move {
                let http = &self.http;
                http.post_message_with_max_sse_event_size(u, m, s, Some(t), h, max)
                    .await
            }
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.signed(|t| {
            let (u, m, s, h) = (uri.clone(), message.clone(), session_id.clone(), headers.clone());
            async move {
                let http = &self.http;
                http.post_message_with_response_limits(u, m, s, Some(t), h, limits)
                    .await
            }
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.signed(|t| {
            let (u, s, h) = (uri.clone(), session_id.clone(), headers.clone());
            async move { self.http.delete_session(u, s, Some(t), h).await }
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.signed(|t| {
            let (u, s, l, h) = (uri.clone(), session_id.clone(), last_event_id.clone(), headers.clone());
            async move { self.http.get_stream(u, s, l, Some(t), h).await }
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.signed(|t| {
            let (u, s, l, h) = (uri.clone(), session_id.clone(), last_event_id.clone(), headers.clone());
            async move {
                let http = &self.http;
                http.get_stream_with_max_sse_event_size(u, s, l, Some(t), h, max)
                    .await
            }
        })
        .await
    }
}
