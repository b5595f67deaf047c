//! OpenTelemetry: sluice exports a span per decision (and per store call) to
//! an OTLP receiver written for this test on the real protos, continuing the
//! `traceparent` it was called with; through a real Envoy with tracing on,
//! sluice's span carries Envoy's trace id.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::stack::{Stack, room_in_window};
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// One exported span: service, name, trace id and parent span id (hex).
#[derive(Debug, Clone)]
struct Seen {
    service: String,
    name: String,
    trace: String,
    parent: String,
}

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Seen>>>);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Receiver {
    fn record(&self, req: ExportTraceServiceRequest) {
        let mut seen = self.0.lock().unwrap();
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .map(|v| format!("{:?}", v.value))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    seen.push(Seen {
                        service: service.clone(),
                        name: span.name,
                        trace: hex(&span.trace_id),
                        parent: hex(&span.parent_span_id),
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/HTTP receiver on the real protos: `POST /v1/traces` with a
/// protobuf `ExportTraceServiceRequest`, answered 200 (one request per
/// connection is enough for an exporter that reconnects).
async fn http_receiver() -> (Receiver, SocketAddr) {
    use prost::Message as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let r = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let rec = r.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let rec = rec.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + len {
                        continue;
                    }
                    let ok = head.starts_with("post /v1/traces ");
                    if let (true, Ok(req)) = (
                        ok,
                        ExportTraceServiceRequest::decode(&buf[end + 4..end + 4 + len]),
                    ) {
                        rec.record(req);
                    }
                    let status = if ok { "200 OK" } else { "404 Not Found" };
                    let _ = sock
                        .write_all(format!("HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n").as_bytes())
                        .await;
                    buf.drain(..end + 4 + len);
                }
            });
        }
    });
    (r, addr)
}

/// Traces over OTLP/HTTP, the reference's default and Envoy Gateway's
/// tracing Deployment's (an endpoint on port 4318, `/v1/traces` added to
/// it as the OpenTelemetry variables say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_exported_over_otlp_http() {
    let (seen, addr) = http_receiver().await;
    let dir = config_dir(&[("web.yaml", RULES)]);
    let endpoint = format!("http://{addr}");
    let s = Sluice::start_at_env(
        dir.path(),
        "127.0.0.1:0",
        &["--otlp-protocol", "http/protobuf"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut c = s.client().await;
    assert_eq!(ask(&mut c, "web", &[("k", "v")]).await.overall_code, OK);
    assert!(
        eventually(Duration::from_secs(15), || seen
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == "ShouldRateLimit")),
        "no span over OTLP/HTTP: {:#?}",
        seen.0.lock().unwrap()
    );
}

async fn receiver() -> (Receiver, SocketAddr) {
    let r = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = TraceServiceServer::new(r.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    (r, addr)
}

const RULES: &str =
    "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_continues_the_callers_trace() {
    let (seen, addr) = receiver().await;
    let dir = config_dir(&[("web.yaml", RULES)]);
    let s = Sluice::start_at_env(
        dir.path(),
        "127.0.0.1:0",
        &["--otlp-endpoint", &format!("http://{addr}")],
        // The SDK's own settings are honoured: export every 100 ms.
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "sluice-test"),
        ],
    );
    let mut c = s.client().await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let mut req = tonic::Request::new(request("web", vec![descriptor(&[("k", "v")])]));
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{parent}-01").parse().unwrap(),
    );
    assert_eq!(
        c.should_rate_limit(req)
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        OK
    );
    let found = || {
        let seen = seen.0.lock().unwrap();
        let decision = seen
            .iter()
            .any(|s| s.name == "ShouldRateLimit" && s.trace == trace && s.parent == parent);
        let store = seen
            .iter()
            .any(|s| s.name == "store.increment" && s.trace == trace);
        decision && store
    };
    assert!(
        eventually(Duration::from_secs(15), found),
        "{:#?}",
        seen.0.lock().unwrap()
    );
    assert!(
        seen.0
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.service.contains("sluice-test"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_envoy_sluices_span_has_envoys_trace_id() {
    let (seen, addr) = receiver().await;
    let port = addr.port();
    let with_tracing = move |c: &str| {
        let tracing = "          tracing:\n            random_sampling: {value: 100}\n            provider:\n              name: envoy.tracers.opentelemetry\n              typed_config:\n                '@type': type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig\n                grpc_service: {envoy_grpc: {cluster_name: otlp}, timeout: 1s}\n                service_name: envoy\n";
        let cluster = format!(
            "  clusters:\n  - name: otlp\n    type: STATIC\n    connect_timeout: 1s\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        '@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config: {{http2_protocol_options: {{}}}}\n    load_assignment:\n      cluster_name: otlp\n      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]\n"
        );
        c.replacen(
            "          stat_prefix: api\n",
            &format!("          stat_prefix: api\n{tracing}"),
            1,
        )
        .replacen("  clusters:\n", &cluster, 1)
    };
    let endpoint = format!("http://{addr}");
    let stack = Stack::start_with(&["--otlp-endpoint", &endpoint], with_tracing);
    room_in_window(60, 10);
    let r = stack.post_json("/api/auth/login", "203.0.113.80", "{}");
    assert_eq!(r.status, 200, "{r:?}");
    let shared = || {
        let seen = seen.0.lock().unwrap();
        seen.iter()
            .filter(|s| s.name == "ShouldRateLimit" && s.service.contains("sluice"))
            .any(|mine| {
                seen.iter()
                    .any(|e| e.service.contains("envoy") && e.trace == mine.trace)
            })
    };
    assert!(
        eventually(Duration::from_secs(30), shared),
        "{:#?}",
        seen.0.lock().unwrap()
    );
}
