//! OpenTelemetry: a finished run as spans over OTLP/HTTP (protobuf), with the official
//! `opentelemetry` crates — one span for the run (a child of the agent's span when
//! `TRACEPARENT` came with it) and one per call, named and attributed after the GenAI
//! semantic conventions for tool execution (`execute_tool NAME`, `gen_ai.operation.name`,
//! `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `error.type`), plus the
//! call's status, attempts, lane waited on and cache hit. A call's span id is the one its tool
//! was handed in its `traceparent` (see [`crate::trace_context`]), so the tool's own spans
//! nest under it. Spans are built from the results once the run is over: nothing is added to
//! the run's hot path, and a collector that is away costs a warning, never the run.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use opentelemetry_sdk::Resource;

use crate::events::{CallResult, Outcome, Status as CallStatus};
use crate::run::{Ended, RunEnd};
use crate::trace_context::TraceContext;

/// How long an export may take before it is given up (with a warning).
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The OTLP/HTTP traces endpoint for `--otlp URL`: the URL as given when it names
/// `/v1/traces`, else with it appended (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
pub(crate) fn traces_url(url: &str) -> String {
    if url.trim_end_matches('/').ends_with("/v1/traces") {
        url.to_string()
    } else {
        format!("{}/v1/traces", url.trim_end_matches('/'))
    }
}

/// Export the run's spans to `endpoint` (`None`: wherever `OTEL_EXPORTER_OTLP_*` say).
/// Returns how many spans were sent; `Err` says "could not be exported to WHERE: why", the
/// endpoint's password never shown.
pub(crate) async fn export(endpoint: Option<&str>, run: &RunEnd<'_>) -> Result<usize, String> {
    send(endpoint, run).await.map_err(|e| {
        let to = endpoint.map_or_else(
            || "the OTEL_EXPORTER_OTLP endpoint".to_string(),
            crate::run::redact_url,
        );
        format!("could not be exported to {to}: {e}")
    })
}

async fn send(endpoint: Option<&str>, run: &RunEnd<'_>) -> Result<usize, String> {
    send_spans(endpoint, spans(run)).await
}

/// A gateway's decision on its catalog as a span of its own trace (`catalog.changed TOOL`,
/// `catalog.approved TOOL`, …): a point in time, with `attributes`.
pub(crate) async fn export_event(
    endpoint: Option<&str>,
    name: String,
    attributes: Vec<KeyValue>,
) -> Result<usize, String> {
    let scope = InstrumentationScope::builder("flux-tools")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let at = SystemTime::now();
    let span = SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(fastrand::u128(1..).to_be_bytes()),
            SpanId::from_bytes(fastrand::u64(1..).to_be_bytes()),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time: at,
        end_time: at,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: scope,
    };
    send_spans(endpoint, vec![span]).await.map_err(|e| {
        let to = endpoint.map_or_else(
            || "the OTEL_EXPORTER_OTLP endpoint".to_string(),
            crate::run::redact_url,
        );
        format!("could not be exported to {to}: {e}")
    })
}

async fn send_spans(endpoint: Option<&str>, spans: Vec<SpanData>) -> Result<usize, String> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT);
    if let Some(url) = endpoint {
        builder = builder.with_endpoint(traces_url(url));
    }
    let mut exporter = builder.build().map_err(|e| e.to_string())?;
    exporter.set_resource(&resource());
    let n = spans.len();
    let sent = tokio::time::timeout(
        EXPORT_TIMEOUT + Duration::from_secs(1),
        exporter.export(spans),
    )
    .await
    .map_err(|_| {
        format!(
            "no answer within {}",
            crate::duration::format(EXPORT_TIMEOUT)
        )
    })?;
    let _ = exporter.shutdown();
    sent.map(|()| n).map_err(|e| e.to_string())
}

/// `service.name` is `flux-tools` unless `OTEL_SERVICE_NAME` says otherwise.
pub(crate) fn resource() -> Resource {
    let builder = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name("flux-tools").build()
    }
}

fn context(trace: &TraceContext, span: u64) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(trace.trace_id.to_be_bytes()),
        SpanId::from_bytes(span.to_be_bytes()),
        TraceFlags::new(trace.flags),
        false,
        TraceState::default(),
    )
}

/// The run's span and one per call.
pub(crate) fn spans(run: &RunEnd<'_>) -> Vec<SpanData> {
    let scope = InstrumentationScope::builder("flux-tools")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let (Some(t), Some(results), true) = (run.trace, run.results, run.has_spans()) else {
        return Vec::new();
    };
    let end = run.started + run.wall;
    let mut out = Vec::with_capacity(results.len() + 1);
    let failed = results.iter().filter(|r| !r.is_ok()).count();
    if run.ended == Ended::ServedCall {
        for r in results {
            out.push(call_span(run, t, r, end, &scope));
        }
        return out;
    }
    out.push(SpanData {
        span_context: context(t, t.run_span),
        parent_span_id: SpanId::from_bytes(t.parent.unwrap_or(0).to_be_bytes()),
        parent_span_is_remote: t.parent.is_some(),
        span_kind: SpanKind::Internal,
        name: Cow::Borrowed("flux-tools run"),
        start_time: run.started,
        end_time: end,
        attributes: vec![
            KeyValue::new("flux_tools.run_id", run.run_id.to_string()),
            KeyValue::new("flux_tools.tenant", run.tenant.to_string()),
            KeyValue::new("flux_tools.outcome", run.outcome.as_str()),
            KeyValue::new("flux_tools.calls", results.len() as i64),
            KeyValue::new("flux_tools.failed", failed as i64),
        ],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if run.outcome == Outcome::Completed {
            Status::Unset
        } else {
            Status::error(format!("run {}", run.outcome.as_str()))
        },
        instrumentation_scope: scope.clone(),
    });
    for r in results {
        out.push(call_span(run, t, r, end, &scope));
    }
    out
}

/// One call's `execute_tool` span. A call never dispatched is a point at the run's end.
fn call_span(
    run: &RunEnd<'_>,
    t: &TraceContext,
    r: &CallResult,
    run_end: SystemTime,
    scope: &InstrumentationScope,
) -> SpanData {
    let served = run.ended == Ended::ServedCall;
    let parent = if served {
        t.parent.unwrap_or(0)
    } else {
        t.run_span
    };
    let (start, end) = match (r.started_ms, r.duration_ms) {
        (Some(s), Some(d)) => {
            let start = run.started + Duration::from_millis(s);
            (start, start + Duration::from_millis(d))
        }
        _ => (run_end, run_end),
    };
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", r.tool.clone()),
        KeyValue::new("gen_ai.tool.call.id", r.id.clone()),
        KeyValue::new("gen_ai.tool.type", "function"),
        KeyValue::new("flux_tools.call.index", r.index as i64),
        KeyValue::new("flux_tools.status", r.status.as_str()),
        KeyValue::new("flux_tools.attempts", i64::from(r.attempts)),
    ];
    if served {
        // Who asked (a gateway's caller): its tenant, and its subject when a token named one.
        attributes.push(KeyValue::new("flux_tools.tenant", run.tenant.to_string()));
        if let Some(who) = run.subject {
            attributes.push(KeyValue::new("enduser.id", who.to_string()));
        }
    }
    if let Some(lane) = &r.waited_on {
        attributes.push(KeyValue::new("flux_tools.waited_on", lane.clone()));
    }
    if let Some(q) = r.queued_ms {
        attributes.push(KeyValue::new("flux_tools.queued_ms", q as i64));
    }
    if r.cached {
        attributes.push(KeyValue::new("flux_tools.cached", true));
    }
    if let Some(s) = r.settled {
        attributes.push(KeyValue::new("flux_tools.settled", s.as_str()));
    }
    if let Some(key) = &r.idempotency_key {
        attributes.push(KeyValue::new("flux_tools.idempotency_key", key.clone()));
    }
    let status = match (&r.error, r.status) {
        (Some(e), _) => {
            attributes.push(KeyValue::new("error.type", e.kind.as_str()));
            Status::error(e.message.clone())
        }
        (None, CallStatus::Ok) => Status::Unset,
        (None, s) => Status::error(s.as_str()),
    };
    SpanData {
        span_context: context(t, t.call_span(&r.id)),
        parent_span_id: SpanId::from_bytes(parent.to_be_bytes()),
        parent_span_is_remote: served && t.parent.is_some(),
        span_kind: SpanKind::Internal,
        name: Cow::Owned(format!("execute_tool {}", r.tool)),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}
