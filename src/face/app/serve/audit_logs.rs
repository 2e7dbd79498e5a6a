//! The audit trail as OpenTelemetry log records: each line's fields become a record's
//! attributes (its `event` also the record's event name and body), sent in batches over
//! OTLP/HTTP to the collector spans go to (`--otlp`, else `OTEL_EXPORTER_OTLP_*`), by one
//! task. A collector that is away costs a warning, said once, never a call.

use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, SdkLoggerProvider};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

/// Records waiting for the collector, at most (more are dropped).
const QUEUE: usize = 8192;
/// The most records one export carries.
const BATCH: usize = 512;

/// Start the exporting task; its queue's sending end.
pub(super) fn start(endpoint: Option<String>) -> mpsc::Sender<Map<String, Value>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(export(endpoint, rx));
    tx
}

/// The OTLP/HTTP logs endpoint for `--otlp URL`.
fn logs_url(url: &str) -> String {
    let base = url.trim_end_matches('/');
    let base = base.strip_suffix("/v1/traces").unwrap_or(base);
    if base.ends_with("/v1/logs") {
        base.to_string()
    } else {
        format!("{base}/v1/logs")
    }
}

async fn export(endpoint: Option<String>, mut rx: mpsc::Receiver<Map<String, Value>>) {
    let mut builder = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(crate::report::otlp::EXPORT_TIMEOUT);
    if let Some(url) = &endpoint {
        builder = builder.with_endpoint(logs_url(url));
    }
    let Ok(mut exporter) = builder.build() else {
        super::say::line("warning: mcp serve: the audit trail cannot be sent as OTLP logs".into());
        return;
    };
    exporter.set_resource(&crate::report::otlp::resource());
    // The provider only makes records here: they are sent by this task, not its processors.
    let provider = SdkLoggerProvider::builder().build();
    let logger = provider.logger("flux-tools");
    let scope = InstrumentationScope::builder("flux-tools.audit")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut warned = false;
    let mut lines = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut lines, BATCH).await > 0 {
        let records: Vec<_> = lines.drain(..).map(|l| record(&logger, l)).collect();
        let pairs: Vec<_> = records.iter().map(|r| (r, &scope)).collect();
        let sent = tokio::time::timeout(
            crate::report::otlp::EXPORT_TIMEOUT + Duration::from_secs(1),
            exporter.export(LogBatch::new(&pairs)),
        )
        .await;
        if !matches!(sent, Ok(Ok(()))) && !std::mem::replace(&mut warned, true) {
            let to = endpoint.as_deref().map_or_else(
                || "the OTEL_EXPORTER_OTLP endpoint".to_string(),
                crate::run::redact_url,
            );
            super::say::line(format!(
                "warning: mcp serve: audit records could not be exported to {to} (said once)"
            ));
        }
    }
}

/// One audit line as a log record.
fn record(
    logger: &opentelemetry_sdk::logs::SdkLogger,
    line: Map<String, Value>,
) -> opentelemetry_sdk::logs::SdkLogRecord {
    let mut r = logger.create_log_record();
    let now = SystemTime::now();
    r.set_timestamp(now);
    r.set_observed_timestamp(now);
    let refused = line["event"]
        .as_str()
        .is_some_and(|e| e.ends_with("refused") || e.ends_with("rejected"));
    r.set_severity_number(if refused {
        Severity::Warn
    } else {
        Severity::Info
    });
    r.set_severity_text(if refused { "WARN" } else { "INFO" });
    r.set_event_name("flux_tools.audit");
    if let Some(e) = line["event"].as_str() {
        r.set_body(AnyValue::from(e.to_string()));
    }
    for (k, v) in line {
        if k == "time" {
            continue;
        }
        let key = format!("flux_tools.{k}");
        match v {
            Value::String(s) => r.add_attribute(key, s),
            Value::Number(n) => r.add_attribute(key, n.as_i64().unwrap_or_default()),
            Value::Bool(b) => r.add_attribute(key, b),
            other => r.add_attribute(key, other.to_string()),
        }
    }
    r
}
