//! The gRPC server: RateLimitService, the quota service and grpc.health.v1
//! behind the guards, on a TCP listener (plain or TLS) or a Unix socket.

use std::future::Future;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;
use tonic_health::pb::health_server::{Health, HealthServer};
use tracing::info;

use super::edge::Edge;
use super::rls::RlsServer;
use super::{GrpcListener, ServeOptions};
use crate::application::App;
use crate::conn::{self, BodyBudget, BodyWatch, ConnBounds, Guarded, IdleBy};
use crate::metrics::{Listener, Metrics};
use crate::quota::QuotaService;
use crate::tls;

/// The gRPC server, plain or TLS, as one type.
type GrpcFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// The services, each behind its guard, with the HTTP/2 bounds.
pub(super) fn router(
    app: &App,
    health: HealthServer<impl Health>,
    opts: &ServeOptions,
    token: &CancellationToken,
) -> Router {
    let quota = QuotaService::new(
        app.rules.clone(),
        app.store.clone(),
        app.metrics.clone(),
        opts.quota,
        app.limiter.global_shadow(),
        token.clone(),
    );
    let g = &opts.grpc;
    let metrics = &app.metrics;
    tonic::transport::Server::builder()
        .max_concurrent_streams(g.max_streams)
        .http2_keepalive_interval(Some(g.keepalive_interval))
        .http2_keepalive_timeout(Some(g.keepalive_timeout))
        // tonic switches hyper's guard off unless asked (RUSTSEC-2024-0003):
        // a client that keeps opening streams past the cap gets a GOAWAY
        // instead of one refusal each, forever.
        .http2_max_local_error_reset_streams(Some(g.max_reset_streams))
        .http2_max_pending_accept_reset_streams(Some(g.max_pending_resets))
        .add_service(health)
        .add_service(Edge {
            inner: RlsServer::new(app.limiter.clone(), opts.max_request_bytes),
            metrics: metrics.clone(),
            watch: BodyWatch::Unary(BodyBudget::new(
                g.body.per_connection,
                g.body.per_process,
                g.body.timeout,
                metrics.clone(),
            )),
        })
        .add_service(Edge {
            inner: RateLimitQuotaServiceServer::new(quota)
                .max_decoding_message_size(opts.max_request_bytes),
            metrics: metrics.clone(),
            watch: BodyWatch::Stream {
                first: opts.quota.first_report,
                idle: opts.quota.stream_idle,
                metrics: metrics.clone(),
            },
        })
}

/// Serves `router` on the listener until `token` is cancelled: TLS when the
/// options carry it (the rules' watcher keeps its certificates fresh).
pub(super) fn serve(
    listener: GrpcListener,
    router: Router,
    opts: &ServeOptions,
    metrics: &std::sync::Arc<Metrics>,
    token: &CancellationToken,
) -> GrpcFuture {
    let stop = token.clone().cancelled_owned();
    let (limits, metrics) = (opts.grpc.conn, metrics.clone());
    match (listener, opts.tls.clone()) {
        (GrpcListener::Tcp(listener), Some(tls)) => {
            info!(mutual = tls.mutual(), "gRPC listener speaks TLS");
            let admitted = conn::accept(listener, limits, Listener::Grpc, metrics, token.clone());
            let incoming = tls::incoming(admitted, tls.clone(), limits, token.clone());
            Box::pin(router.serve_with_incoming_shutdown(incoming, stop))
        }
        (GrpcListener::Tcp(listener), None) => {
            let admitted = conn::accept(listener, limits, Listener::Grpc, metrics, token.clone());
            Box::pin(router.serve_with_incoming_shutdown(guarded(admitted, limits), stop))
        }
        // main refuses TLS on a Unix socket: its peers are on this host.
        #[cfg(unix)]
        (GrpcListener::Unix(listener, _), _) => {
            let admitted = conn::accept(listener, limits, Listener::Grpc, metrics, token.clone());
            Box::pin(router.serve_with_incoming_shutdown(guarded(admitted, limits), stop))
        }
    }
}

/// Plain connections under the guards, as tonic's incoming stream.
fn guarded<S>(
    admitted: tokio::sync::mpsc::Receiver<conn::Admitted<S>>,
    limits: ConnBounds,
) -> impl tokio_stream::Stream<Item = Result<Guarded<S>, std::io::Error>> {
    tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(admitted),
        move |(stream, ticket)| {
            Ok::<_, std::io::Error>(Guarded::new(stream, ticket, limits, IdleBy::Requests))
        },
    )
}
