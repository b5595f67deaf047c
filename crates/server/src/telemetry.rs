//! OpenTelemetry traces (`--otlp-endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; off by default): a span for each
//! `ShouldRateLimit` decision and one for its store call, continuing the W3C
//! `traceparent` that Envoy sends with the gRPC call when its tracing is on,
//! exported over OTLP in batches, over gRPC or HTTP (`--otlp-protocol`, or
//! the standard `OTEL_EXPORTER_OTLP_PROTOCOL`). `OTEL_SERVICE_NAME` and the
//! other `OTEL_*` variables the SDK reads are honoured.
//!
//! Off, it costs a request one relaxed atomic load: no span is created.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static ON: AtomicBool = AtomicBool::new(false);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter: {0}")]
pub struct TelemetryError(String);

/// The tracer provider, to flush on shutdown.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Builds the exporter (to `endpoint`, or the `OTEL_*` environment) and
    /// the `tracing` layer that feeds it. Call inside the Tokio runtime.
    pub fn start<S>(
        endpoint: Option<&str>,
        protocol: Option<&str>,
    ) -> Result<(Telemetry, impl tracing_subscriber::Layer<S>), TelemetryError>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let exporter = exporter(
            endpoint,
            protocol.map_or_else(protocol_from_env, str::to_owned),
        )?;
        let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "sluice".into());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service)
                    .build(),
            )
            .build();
        let tracer = provider.tracer("sluice");
        ON.store(true, Relaxed);
        // Only sluice's own spans go to the exporter.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.target() == TARGET
            }));
        Ok((Telemetry { provider }, layer))
    }

    /// Exports what is buffered; call before exiting.
    pub fn shutdown(&self) {
        ON.store(false, Relaxed);
        let _ = self.provider.shutdown();
    }
}

/// The protocol the OpenTelemetry variables name, signal's first; gRPC
/// when none does (sluice's default before OTLP/HTTP, kept).
fn protocol_from_env() -> String {
    [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|p| !p.is_empty()))
    .unwrap_or_else(|| "grpc".into())
}

/// The span exporter for `protocol` (`grpc` or `http/protobuf`), to
/// `endpoint` or where the `OTEL_*` environment says.
fn exporter(
    endpoint: Option<&str>,
    protocol: String,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let built = match protocol.as_str() {
        "grpc" => {
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            b.build()
        }
        "http/protobuf" => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = endpoint {
                b = b.with_endpoint(e);
            }
            b.build()
        }
        other => {
            return Err(TelemetryError(format!(
                "OTLP protocol {other:?}: sluice exports over grpc or http/protobuf"
            )));
        }
    };
    built.map_err(|e| TelemetryError(e.to_string()))
}

/// The `tracing` target of the spans that are exported.
pub const TARGET: &str = "sluice::trace";

/// Whether spans are exported at all.
pub fn enabled() -> bool {
    ON.load(Relaxed)
}

/// Runs `fut` inside `span` when there is one. With tracing off callers pass
/// none, and no `Instrumented` wrapper runs: its enter and exit on every poll
/// and drop cost more than a decision's matching.
pub async fn within<F: std::future::Future>(span: Option<tracing::Span>, fut: F) -> F::Output {
    match span {
        Some(span) => tracing::Instrument::instrument(fut, span).await,
        None => fut.await,
    }
}

struct Metadata<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The span of one decision, continuing the caller's `traceparent`; a
/// disabled span when tracing is off.
pub fn decision_span(metadata: &tonic::metadata::MetadataMap) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "ShouldRateLimit", otel.kind = "server");
    let parent = TraceContextPropagator::new().extract(&Metadata(metadata));
    let _ = span.set_parent(parent);
    span
}

/// The span of one store call, inside the current decision.
pub fn store_span() -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: TARGET, "store.increment", otel.kind = "client")
}

use tracing_subscriber::Layer as _;
