//! A management server written for the tests, on the real protocol with
//! the real protos (ADS, state of the world).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;

const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The management server's state: the config it serves and what it heard.
#[derive(Default)]
pub struct State {
    pub current: Option<DiscoveryResponse>,
    pub streams: Vec<mpsc::Sender<Result<DiscoveryResponse, tonic::Status>>>,
    pub heard: Vec<DiscoveryRequest>,
}

#[derive(Clone, Default)]
pub struct Ads(pub Arc<Mutex<State>>);

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        req: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, tonic::Status> {
        let (tx, rx) = mpsc::channel(1024);
        {
            let mut st = self.0.lock().unwrap();
            if let Some(cur) = st.current.clone() {
                let _ = tx.try_send(Ok(cur));
            }
            st.streams.push(tx);
        }
        let state = self.0.clone();
        let mut incoming = req.into_inner();
        tokio::spawn(async move {
            while let Ok(Some(r)) = incoming.message().await {
                state.lock().unwrap().heard.push(r);
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn delta_aggregated_resources(
        &self,
        _req: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("state of the world only"))
    }
}

impl Ads {
    /// Serves `config` as `version` to every stream, now and later.
    pub fn push(&self, version: &str, configs: &[RateLimitConfig]) {
        let resp = DiscoveryResponse {
            version_info: version.into(),
            type_url: TYPE_URL.into(),
            nonce: format!("nonce-{version}"),
            resources: configs
                .iter()
                .map(|c| Any {
                    type_url: TYPE_URL.into(),
                    value: c.encode_to_vec(),
                })
                .collect(),
            ..Default::default()
        };
        let mut st = self.0.lock().unwrap();
        st.current = Some(resp.clone());
        st.streams
            .retain(|tx| tx.try_send(Ok(resp.clone())).is_ok());
    }

    /// The ACK or NACK answering `version`'s nonce, if heard yet.
    pub fn answer(&self, version: &str) -> Option<DiscoveryRequest> {
        let nonce = format!("nonce-{version}");
        self.0
            .lock()
            .unwrap()
            .heard
            .iter()
            .find(|r| r.response_nonce == nonce)
            .cloned()
    }
}

/// Serves `ads` on `addr` until the token is cancelled.
pub fn serve(ads: Ads, addr: SocketAddr) -> CancellationToken {
    serve_tls(ads, addr, None)
}

/// As [`serve`], with (mutual) TLS when `tls` is given.
pub fn serve_tls(
    ads: Ads,
    addr: SocketAddr,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> CancellationToken {
    let token = CancellationToken::new();
    let stop = token.clone();
    tokio::spawn(async move {
        let listener = loop {
            // The port may take a moment to be free again after a restart.
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).expect("server TLS");
        }
        let _ = builder
            .add_service(AggregatedDiscoveryServiceServer::new(ads))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                stop.cancelled_owned(),
            )
            .await;
    });
    token
}

pub fn config(unit: i32, limit: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: "xds-rules".into(),
        domain: "xds".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "k".into(),
            rate_limit: Some(RateLimitPolicy {
                unit,
                requests_per_unit: limit,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}
