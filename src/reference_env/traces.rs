//! The reference's `TRACING_*` settings as the OpenTelemetry variables and
//! flags sluice's exporter reads.

use super::{Env, EnvError, Translation};

/// `TRACING_*` as the OpenTelemetry variables sluice's exporter reads.
pub(super) fn traces(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    if !env.flag("TRACING_ENABLED", false)? {
        return Ok(());
    }
    // The reference's default is OTLP over HTTP (Envoy Gateway's tracing
    // Deployment sets no protocol and points at port 4318).
    let protocol = match env.or("TRACING_EXPORTER_PROTOCOL", "http") {
        "http" => "http/protobuf",
        "grpc" => "grpc",
        other => {
            return Err(EnvError::Unsupported {
                var: "TRACING_EXPORTER_PROTOCOL",
                value: other.to_owned(),
                why: "the reference exports OTLP over http or grpc",
            });
        }
    };
    t.flag("otlp-protocol", protocol);
    let mut set = |k: &str, v: String| t.env.push((k.to_owned(), v));
    set(
        "OTEL_SERVICE_NAME",
        env.or("TRACING_SERVICE_NAME", "RateLimit").to_owned(),
    );
    let mut attrs = Vec::new();
    if let Some(ns) = env.set("TRACING_SERVICE_NAMESPACE") {
        attrs.push(format!("service.namespace={ns}"));
    }
    if let Some(id) = env.set("TRACING_SERVICE_INSTANCE_ID") {
        attrs.push(format!("service.instance.id={id}"));
    }
    if !attrs.is_empty() {
        set("OTEL_RESOURCE_ATTRIBUTES", attrs.join(","));
    }
    set("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".into());
    set(
        "OTEL_TRACES_SAMPLER_ARG",
        env.or("TRACING_SAMPLING_RATE", "1").to_owned(),
    );
    Ok(())
}
