//! The ceiling for `make bench`: an Envoy rate-limit service that answers
//! every request OK without looking at it, as fast as tonic serves: built
//! with the release profile sluice uses (fat LTO, one codegen unit) and
//! served by tonic's own incoming with `TCP_NODELAY`.
//!
//!     cargo run --release --example noop_rls -- 127.0.0.1:0

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

// The same allocator as sluice's binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A subscriber that wants nothing: without one, `tracing` hands every
    // span of h2, hyper and tower to the `log` crate (its `log` feature is on
    // in this dependency tree), about a tenth of a request's instructions.
    tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default())?;
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Noop))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}
