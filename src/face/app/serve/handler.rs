//! The MCP side of the gateway, on `rmcp`'s server: `initialize`, `tools/list` and
//! `tools/call` of one client session, over stdio or Streamable HTTP — and, when the manifest
//! serves a server whole, its resources, prompts and completions ([`passthrough`]). A protocol fault (an
//! unknown tool, arguments that are not an object) is a JSON-RPC error; everything that
//! happens to a call is its answer.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CreateTaskResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
    GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::answer::{Outcome, Refusal};
use super::caller::Caller;
use super::followers::{Listener, Listing};
use super::gateway::{CallCx, Gateway, Session, Target};
use super::passthrough;
use super::progress::ProgressSink;
use super::shaped::Complete;
use super::tasks::TaskOr;
use crate::tools::Progress;

/// One client session's handler.
#[derive(Clone)]
pub(super) struct Handler {
    gateway: Arc<Gateway>,
    session: Arc<Session>,
    /// The caller of every request (stdio), or of requests whose front door named none.
    caller: Caller,
    /// Whether this session is told of changes to the list (after its first list).
    told: Arc<std::sync::atomic::AtomicBool>,
}

impl Handler {
    pub(super) fn new(gateway: Arc<Gateway>, tenant: String) -> Handler {
        let session = gateway.session();
        Handler {
            gateway,
            session,
            caller: Caller::local(tenant),
            told: Arc::default(),
        }
    }

    /// The client session this handler serves.
    pub(super) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The request's caller: its HTTP request's (the front door put it there), else the
    /// session's.
    pub(super) fn caller(&self, cx: &RequestContext<RoleServer>) -> Caller {
        cx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .map_or_else(|| self.caller.clone(), Caller::clone)
    }

    /// A session opened here again from what was kept of it (another replica opened it, or
    /// it was let go for idleness) is the same flow in the shared lanes as before — named
    /// before the request that opened it runs — and subscribes again, here, to the resources
    /// it subscribed to.
    fn restored(&self, context: &RequestContext<RoleServer>) {
        use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;
        let Some(marker) = context.extensions.get::<SessionRestoreMarker>() else {
            return;
        };
        self.session.share_as(&marker.id);
        let (id, me) = (marker.id.to_string(), self.clone());
        let (peer, caller) = (context.peer.clone(), self.caller(context));
        tokio::spawn(async move {
            for uri in me.gateway.http_sessions.subscriptions(&id).await {
                let who = (me.session.id, &Listener::Peer(peer.clone()), &caller);
                let _ = passthrough::subscribe(&me.gateway, who, (&uri, true), None).await;
            }
        });
    }

    /// The `Mcp-Session-Id` of the HTTP request being answered, if any.
    fn http_session(context: &RequestContext<RoleServer>) -> Option<String> {
        let parts = context.extensions.get::<http::request::Parts>()?;
        let id = parts.headers.get(super::sessions::SESSION_HEADER)?;
        id.to_str().ok().map(str::to_string)
    }

    /// From its first list on, tell the session when the list changes (until it is gone).
    fn tell_changes(&self, peer: &rmcp::service::Peer<RoleServer>) {
        if self.told.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut changes = self.gateway.catalog.changes();
        let peer = peer.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    c = changes.changed() => {
                        if c.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(std::time::Duration::from_secs(30)) => {
                        if peer.is_transport_closed() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

impl Handler {
    /// Subscribe (`on`) to `uri`, or stop: here, and for every replica in the shared store.
    async fn subscribe_to(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
        on: bool,
    ) -> Result<(), ErrorData> {
        let to = Listener::Peer(context.peer.clone());
        let at = self.at(context);
        let who = (self.session.id, &to, &self.caller(context));
        Box::pin(passthrough::subscribe(
            &self.gateway,
            who,
            (uri, on),
            Some(&at),
        ))
        .await?;
        if let Some(id) = Handler::http_session(context) {
            let sessions = &self.gateway.http_sessions;
            sessions.note_subscription(&id, uri, on).await;
        }
        Ok(())
    }
}

/// Progress notifications on the client's token, sent in order by one task.
fn progress_sink(cx: &RequestContext<RoleServer>) -> Option<ProgressSink> {
    let token = cx.meta.get_progress_token()?;
    let peer = cx.peer.clone();
    let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
    tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            let n = super::answer::progress(token.clone(), p);
            if peer.notify_progress(n).await.is_err() {
                return;
            }
        }
    });
    Some(Arc::new(move |p| {
        let _ = tx.send(p);
    }))
}

impl ServerHandler for Handler {
    // Logging (deprecated from 2026-07-28 on, SEP-2577): a 2025 client may ask for its calls'
    // upstream log messages.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        if passthrough::offered(&self.gateway.catalog.manifest()) {
            // A whole server's resources, templates, prompts and completions pass through.
            let more = serde_json::json!({
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
            });
            if let Ok(m) = serde_json::from_value::<ServerCapabilities>(more) {
                (caps.resources, caps.prompts, caps.completions) =
                    (m.resources, m.prompts, m.completions);
            }
        }
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("flux-tools", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools served by flux-tools: every call runs inside the lanes its manifest \
                 declares, shared with every other client of this gateway. A failure is an \
                 answer with isError, whose text begins with its kind (timeout, rate_limited, \
                 tool_error, …).",
            )
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        let caps = &request.capabilities;
        let answers = caps.elicitation.is_some() || caps.sampling.is_some();
        (self.session.answers).store(answers, std::sync::atomic::Ordering::Relaxed);
        context.peer.set_peer_info(request.clone());
        self.restored(&context);
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.tell_changes(&context.peer);
        let caller = self.caller(&context);
        // Boxed: listing may start upstream servers, a big future every request task would
        // otherwise reserve room for (a parked call included).
        let tools = Box::pin(self.gateway.catalog.list(&caller)).await;
        let tools = Vec::clone(&tools);
        Ok(ListToolsResult::with_all_items(tools).complete())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = request.request_state.as_deref();
        if let Some(state) = state.filter(|s| s.starts_with(super::rounds::STATE)) {
            // A follow-up that answers an upstream's questions: its call goes on.
            let (caller, said) = (self.caller(&context), request.input_responses.clone());
            let rounds = &self.gateway.rounds;
            let round = rounds.resume(state, &caller, &request.name, said)?;
            return Box::pin(self.turn(round, &context)).await;
        }
        // Cancelled by the client, or with its whole session when the client is gone.
        let (mut cx, watch) = self.call_cx(&context);
        cx.mrtr = mrtr(&context, &request);
        let args = request.arguments.unwrap_or_default();
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if let (false, Some(asking)) = (tasks, answers_in_follow_ups(&context)) {
            let name = request.name.to_string();
            return Box::pin(self.round(name, args, cx, asking, &context)).await;
        }
        let answer = if tasks {
            // A client that takes tasks: a call that parks or waits long goes on as one.
            let what = (request.name.to_string(), args);
            let t = &self.gateway.tasks;
            let mut call = Box::pin(t.call_or_task(&self.gateway, self.session.clone(), what, cx));
            let r = tokio::select! {
                biased;
                r = &mut call => r,
                () = watch => call.await,
            };
            match r.map_err(|f| f.error())? {
                TaskOr::Task(task) => {
                    return Ok(CallToolResponse::Task(CreateTaskResult::new(*task)));
                }
                TaskOr::Done(answer) => answer,
            }
        } else {
            // Boxed: rmcp's task for each request reserves room for its largest handler's
            // future.
            let name = Target::Tool(&request.name);
            let mut call = Box::pin(self.gateway.call(&self.session, name, args, cx));
            tokio::select! {
                biased;
                r = &mut call => r,
                () = watch => call.await,
            }
        };
        responded(answer)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let caller = self.caller(&context);
        let t = &self.gateway.tasks;
        match t.detail(&self.gateway, &caller, &request.task_id).await {
            Ok(task) => Ok(GetTaskResult::new(task)),
            Err(f) => Err(f.error()),
        }
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = self.caller(&context);
        let cancelled = self.gateway.tasks.cancel(&caller, &request.task_id).await;
        cancelled.map(|_| ()).map_err(|f| f.error())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let f = &self.gateway.followers;
        f.listed(
            Listing::Resources,
            self.session.id,
            Listener::Peer(context.peer.clone()),
        );
        Box::pin(passthrough::resources(
            &self.gateway,
            &self.caller(&context),
        ))
        .await
        .map(Complete::complete)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Box::pin(passthrough::templates(
            &self.gateway,
            &self.caller(&context),
        ))
        .await
        .map(Complete::complete)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (cx, watch) = self.call_cx(&context);
        let mut read = Box::pin(passthrough::read(
            &self.gateway,
            &self.session,
            &request.uri,
            cx,
        ));
        let answer = tokio::select! {
            biased;
            r = &mut read => r,
            () = watch => read.await,
        };
        answer.map(|r| ReadResourceResponse::Complete(r.complete()))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_to(&request.uri, &context, true).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribe_to(&request.uri, &context, false).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let f = &self.gateway.followers;
        f.listed(
            Listing::Prompts,
            self.session.id,
            Listener::Peer(context.peer.clone()),
        );
        Box::pin(passthrough::prompts(&self.gateway, &self.caller(&context)))
            .await
            .map(Complete::complete)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let (caller, at) = (self.caller(&context), self.at(&context));
        Box::pin(passthrough::prompt(&self.gateway, request, (&caller, &at)))
            .await
            .map(|r| GetPromptResponse::Complete(r.complete()))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let (caller, at) = (self.caller(&context), self.at(&context));
        Box::pin(passthrough::complete(
            &self.gateway,
            request,
            (&caller, &at),
        ))
        .await
        .map(Complete::complete)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(super::followers::accepted(requested))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let caller = self.caller(context.request_context());
        Box::pin(super::subscriptions::listen(
            &self.gateway,
            &caller,
            context,
        ))
        .await
    }

    /// A client asks to hear its calls' log messages from this level on (a `2025` session:
    /// `2026-07-28` deprecated the method).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = super::session::rank(request.level);
        (self.session.log_level).store(level, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        let Some(asked) = super::shaped::task_request(&request) else {
            let method = super::fault::Fault::Method(request.method.clone());
            return Err(method.error());
        };
        let (gateway, caller) = (&self.gateway, self.caller(&context));
        let tasks = Arc::clone(&gateway.tasks);
        match Box::pin(tasks.answer(gateway, &caller, asked)).await {
            Ok(v) => Ok(rmcp::model::CustomResult::new(v)),
            Err(f) => Err(f.error()),
        }
    }
}

/// The answer to a `tools/call`: its result, or (a 2026-07-28 client asked to approve it)
/// `input_required`; a protocol fault as invalid params.
fn responded(answer: Result<Outcome, super::fault::Fault>) -> Result<CallToolResponse, ErrorData> {
    let answer = answer.map_err(|f| f.error())?;
    if let Outcome::Ask(question, state) = answer {
        return Ok(CallToolResponse::InputRequired(input_required(
            question, state,
        )));
    }
    Ok(CallToolResponse::Complete(answer.result().complete()))
}

/// Whether this is a 2026-07-28 request whose client answers questions in its follow-up
/// requests (`_meta` declares elicitation, sampling): which of the two.
fn answers_in_follow_ups(context: &RequestContext<RoleServer>) -> Option<(bool, bool)> {
    use rmcp::model::ProtocolVersion;
    if context.meta.protocol_version()? < ProtocolVersion::V_2026_07_28 {
        return None;
    }
    let caps = context.meta.client_capabilities()?;
    let asking = (caps.elicitation.is_some(), caps.sampling.is_some());
    (asking.0 || asking.1).then_some(asking)
}

impl Handler {
    /// Where a request that reads a whole server stands (its place on the wire; cancelled by
    /// its client).
    fn at(&self, context: &RequestContext<RoleServer>) -> passthrough::At<'_> {
        passthrough::At {
            session: &self.session,
            arrival: arrival(context),
            cancel: context.ct.clone(),
        }
    }

    /// A 2026-07-28 client's call of `tool` whose upstream may ask it something: the call runs
    /// as a round (see `rounds`), ended with the session or when the round is dropped.
    async fn round(
        &self,
        tool: String,
        args: serde_json::Map<String, serde_json::Value>,
        mut cx: CallCx,
        asking: (bool, bool),
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let stop = self.session.gone.child_token();
        cx.cancel = stop.clone();
        let log = cx.asks.take().and_then(|a| a.log);
        let (asker, questions) = super::rounds::asker(self.session.id, asking, log);
        cx.asks = Some(asker);
        let caller = cx.caller.clone();
        let (gateway, session, name) = (self.gateway.clone(), self.session.clone(), tool.clone());
        let call = async move { gateway.call(&session, Target::Tool(&name), args, cx).await };
        let round = self
            .gateway
            .rounds
            .begin(&caller, &tool, questions, stop, call);
        self.turn(round, context).await
    }

    /// Run `round` until its call ends (its answer) or asks its client (`input_required`); a
    /// request the client cancels ends the call.
    async fn turn(
        &self,
        round: super::rounds::Round,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        use super::rounds::Turn;
        let rounds = &self.gateway.rounds;
        let turn = tokio::select! {
            t = rounds.turn(round) => t,
            () = context.ct.cancelled() => Turn::Done(Ok(Outcome::Refused(Refusal::Cancelled))),
        };
        match turn {
            Turn::Ask(asked) => Ok(CallToolResponse::InputRequired(asked)),
            Turn::Done(answer) => responded(answer),
            Turn::Refused(f) => Err(f.error()),
        }
    }

    /// The context of a request that runs as a call (a resource read): its caller, trace,
    /// cancellation (the client's, or its session's end) and progress.
    fn call_cx(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (CallCx, impl std::future::Future<Output = ()>) {
        let traceparent = context.meta.get("traceparent").and_then(|v| v.as_str());
        let cancel = CancellationToken::new();
        let (asked, gone, cancelling) = (
            context.ct.clone(),
            self.session.gone.clone(),
            cancel.clone(),
        );
        let watch = async move {
            tokio::select! {
                () = asked.cancelled() => {}
                () = gone.cancelled() => {}
            }
            cancelling.cancel();
        };
        let cx = CallCx {
            traceparent: traceparent.map(Box::from),
            progress: progress_sink(context),
            elicit: elicit(context),
            arrival: arrival(context),
            asks: asks(context, &self.session),
            key: super::keys::key_in(context.meta.get("idempotencyKey")),
            ..CallCx::new(self.caller(context), cancel)
        };
        (cx, watch)
    }
}

/// The call's place on its session's wire: stamped by the stdio wire, or by the HTTP face as
/// the request came.
fn arrival(cx: &RequestContext<RoleServer>) -> Option<Arc<super::order::Pass>> {
    use super::order::Arrival;
    let stamped = cx.extensions.get::<Arrival>().or_else(|| {
        cx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Arrival>())
    });
    stamped.map(|a| a.0.clone())
}

/// The client of this request, as an upstream's call sees it: its questions go to it (when
/// it declared elicitation), its sampling requests (when it declared sampling), and its log
/// messages at or above the level the session asked for.
#[allow(deprecated)]
fn asks(
    context: &RequestContext<RoleServer>,
    session: &Arc<Session>,
) -> Option<crate::tools::mcp::Asker> {
    let peer = context.peer.clone();
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let caps = caps.unwrap_or_default();
    let elicit = caps.elicitation.as_ref().map(|_| {
        let peer = peer.clone();
        Arc::new(move |params| {
            let peer = peer.clone();
            Box::pin(async move {
                let asked = peer.create_elicitation(params).await;
                asked.map_err(|e| format!("the client did not answer: {e}"))
            }) as futures_util::future::BoxFuture<'static, _>
        }) as crate::tools::mcp::Answerer<_, _>
    });
    let sample = caps.sampling.as_ref().map(|_| {
        let peer = peer.clone();
        Arc::new(move |params| {
            let peer = peer.clone();
            Box::pin(async move {
                let sampled = peer.create_message(params).await;
                sampled.map_err(|e| format!("the client did not sample: {e}"))
            }) as futures_util::future::BoxFuture<'static, _>
        }) as crate::tools::mcp::Answerer<_, _>
    });
    let level = session.log_level.load(std::sync::atomic::Ordering::Relaxed);
    let log = (level > 0).then(|| {
        // Told in the order they came, by one task, until the call's asker is gone.
        let (tx, mut rx) =
            mpsc::unbounded_channel::<rmcp::model::LoggingMessageNotificationParam>();
        let peer = peer.clone();
        tokio::spawn(async move {
            while let Some(params) = rx.recv().await {
                if peer.notify_logging_message(params).await.is_err() {
                    return;
                }
            }
        });
        Arc::new(
            move |params: rmcp::model::LoggingMessageNotificationParam| {
                if super::session::rank(params.level) >= level {
                    let _ = tx.send(params);
                }
            },
        ) as Arc<dyn Fn(_) + Send + Sync>
    });
    Some(crate::tools::mcp::Asker {
        client: session.id,
        elicit,
        sample,
        log,
    })
}

/// A 2026-07-28 request whose client declared form elicitation: it is asked to approve in
/// its follow-up request (`input_required`), and this may be that follow-up.
fn mrtr(
    context: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
) -> Option<super::approve::Mrtr> {
    use super::approve::{InBand, Mrtr, INPUT_KEY};
    use rmcp::model::ProtocolVersion;
    let modern = context.meta.protocol_version()? >= ProtocolVersion::V_2026_07_28;
    let caps = context.client_capabilities()?.elicitation?;
    if !modern || (caps.form.is_none() && caps.url.is_some()) {
        return None;
    }
    let said = request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(INPUT_KEY));
    let action = said.and_then(|v| v.get("action")).and_then(|a| a.as_str());
    let answer = match action {
        Some("accept") => Some(InBand::Accept),
        Some("decline") => Some(InBand::Decline),
        Some(_) => Some(InBand::Cancel),
        None => None,
    };
    Some(Mrtr {
        answer: answer
            .zip(request.request_state.clone())
            .map(|(a, s)| (s, a)),
    })
}

/// The `input_required` result that asks the client to approve a call (one form
/// elicitation, under [`super::approve::INPUT_KEY`]).
fn input_required(question: String, state: String) -> rmcp::model::InputRequiredResult {
    use rmcp::model::{
        ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequiredResult,
    };
    let ask = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question,
        requested_schema: ElicitationSchema::new(Default::default()),
    });
    let asks = [(
        super::approve::INPUT_KEY.to_string(),
        InputRequest::Elicitation(ask),
    )];
    InputRequiredResult::new(Some(asks.into_iter().collect()), Some(state))
}

/// How to ask this session's client to approve a call, if it supports form elicitation.
fn elicit(context: &RequestContext<RoleServer>) -> Option<super::approve::Elicit> {
    use super::approve::InBand;
    use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
    use rmcp::service::ElicitationMode;
    let peer = context.peer.clone();
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return None;
    }
    Some(Arc::new(move |message: String| {
        let peer = peer.clone();
        Box::pin(async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: ElicitationSchema::new(Default::default()),
            };
            let answer = peer
                .create_elicitation(params)
                .await
                .map_err(|e| e.to_string())?;
            Ok(match answer.action {
                ElicitationAction::Accept => InBand::Accept,
                ElicitationAction::Decline => InBand::Decline,
                // Cancel, and whatever a later revision adds: not an approval.
                _ => InBand::Cancel,
            })
        }) as super::approve::Asking
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, with no value made.
    fn output_size<F, A, B, C, Fut>(_: &F) -> usize
    where
        F: Fn(A, B, C) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// A call that waits (its turn, its place, its approval) holds its future and little
    /// else: the planning's and the run's big states are boxed only while they are needed
    /// (the run's alone is several KB, and ten thousand parked calls held it each).
    #[test]
    fn a_waiting_call_is_small() {
        let call = |g: Arc<Gateway>, s: Arc<Session>, cx: CallCx| async move {
            g.call(&s, Target::Tool("t"), serde_json::Map::new(), cx)
                .await
        };
        let size = output_size(&call);
        assert!(size < 4096, "a call's future: {size} bytes");
    }

    /// rmcp gives each request a task sized for its largest handler's future, a parked call's
    /// included: listing (which may start upstream servers) and the call are boxed, so that
    /// task stays small.
    #[test]
    fn every_request_task_is_small() {
        let list = |h: Arc<Handler>,
                    r: Option<PaginatedRequestParams>,
                    c: RequestContext<RoleServer>| async move {
            h.list_tools(r, c).await
        };
        let call = |h: Arc<Handler>, r: CallToolRequestParams, c: RequestContext<RoleServer>| async move {
            h.call_tool(r, c).await
        };
        let handle = |h: Arc<Handler>,
                      r: rmcp::model::ClientRequest,
                      c: RequestContext<RoleServer>| async move {
            use rmcp::Service;
            h.handle_request(r, c).await
        };
        let sizes = [output_size(&list), output_size(&call), output_size(&handle)];
        assert!(
            sizes[0] < 2048 && sizes[1] < 2048 && sizes[2] < 8192,
            "list_tools, call_tool, a request: {sizes:?} bytes"
        );
    }
}
