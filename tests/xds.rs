//! Rules over xDS against a management server written for this test, on the
//! real protocol with the real protos (ADS, state of the world): the first
//! config, an update, a bad update NACKed while the last good rules keep
//! deciding, and a server restart.

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
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
struct State {
    current: Option<DiscoveryResponse>,
    streams: Vec<mpsc::Sender<Result<DiscoveryResponse, tonic::Status>>>,
    heard: Vec<DiscoveryRequest>,
}

#[derive(Clone, Default)]
struct Ads(Arc<Mutex<State>>);

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Out<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Out<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        req: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, tonic::Status> {
        let (tx, rx) = mpsc::channel(16);
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
    fn push(&self, version: &str, configs: &[RateLimitConfig]) {
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
    fn answer(&self, version: &str) -> Option<DiscoveryRequest> {
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
fn serve(ads: Ads, addr: SocketAddr) -> CancellationToken {
    serve_tls(ads, addr, None)
}

/// As [`serve`], with (mutual) TLS when `tls` is given.
fn serve_tls(
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

fn config(unit: i32, limit: u32) -> RateLimitConfig {
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

fn version(s: &Sluice) -> String {
    s.readyz()["config"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn admitted_of(c: &mut Client, value: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(ask(c, "xds", &[("k", value)]).await.overall_code == OK);
    }
    ok
}

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_follow_the_management_server() {
    let addr: SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap();
    let ads = Ads::default();
    ads.push("v1", &[config(3, 2)]);
    let server = serve(ads.clone(), addr);
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-node-id",
            "sluice-test",
            "--xds-node-metadata",
            "cluster=edge,zone=a",
        ],
    );
    assert!(
        eventually(Duration::from_secs(10), || version(&s) == "v1"),
        "{}",
        s.readyz()
    );
    let r = s.readyz();
    assert_eq!(r["config"]["source"], "xds");
    let mut c = s.client().await;
    assert_eq!(admitted_of(&mut c, "a", 3).await, 2, "v1: 2 per hour");
    let ack = ads.answer("v1").expect("an ACK for v1");
    assert_eq!(ack.version_info, "v1");
    assert!(ack.error_detail.is_none());
    let node = ack.node.as_ref().unwrap();
    assert_eq!(node.id, "sluice-test");
    let zone = &node.metadata.as_ref().expect("node metadata").fields["zone"];
    assert_eq!(format!("{:?}", zone.kind), "Some(StringValue(\"a\"))");
    let (_, rl) = s.get("/rlconfig");
    assert!(rl.contains("xds.k: unit=HOUR requests_per_unit=2"), "{rl}");

    // An update: 5 per hour.
    ads.push("v2", &[config(3, 5)]);
    assert!(eventually(Duration::from_secs(10), || version(&s) == "v2"));
    assert_eq!(admitted_of(&mut c, "b", 6).await, 5, "v2: 5 per hour");
    assert!(ads.answer("v2").is_some_and(|a| a.version_info == "v2"));

    // A bad update (no unit): NACKed, and v2 keeps deciding.
    ads.push("v3", &[config(0, 7)]);
    assert!(eventually(Duration::from_secs(10), || ads
        .answer("v3")
        .is_some()));
    let nack = ads.answer("v3").unwrap();
    assert_eq!(nack.version_info, "v2", "a NACK names the version in force");
    let detail = nack.error_detail.expect("NACK with the error");
    assert!(
        detail.message.contains("invalid rate limit unit"),
        "{}",
        detail.message
    );
    assert_eq!(version(&s), "v2");
    assert!(
        s.readyz()["config"]["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid rate limit unit")
    );
    assert_eq!(admitted_of(&mut c, "c", 6).await, 5, "still v2");

    // The management server restarts with new rules: sluice reconnects.
    // (Ending the streams lets the old server's graceful shutdown finish,
    // as a process exit would.)
    ads.0.lock().unwrap().streams.clear();
    server.cancel();
    let ads = Ads::default();
    ads.push("v4", &[config(3, 1)]);
    let _server = serve(ads.clone(), addr);
    assert!(
        eventually(Duration::from_secs(20), || version(&s) == "v4"),
        "{}",
        s.readyz()
    );
    assert_eq!(admitted_of(&mut c, "d", 3).await, 1, "v4: 1 per hour");
    let resub = ads
        .0
        .lock()
        .unwrap()
        .heard
        .first()
        .cloned()
        .expect("a subscription");
    assert_eq!(
        resub.version_info, "v2",
        "resubscribed with the version in force"
    );
}

/// Envoy Gateway speaks mutual TLS to its rate-limit service's xDS client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_come_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(
            read("server.pem"),
            read("server.key"),
        ))
        .client_ca_root(tonic::transport::Certificate::from_pem(read("ca.pem")));
    let addr: SocketAddr = format!("127.0.0.1:{}", common::redis::free_port())
        .parse()
        .unwrap();
    let ads = Ads::default();
    ads.push("t1", &[config(3, 2)]);
    let _server = serve_tls(ads.clone(), addr, Some(tls));
    let path = |f: &str| dir.path().join(f).display().to_string();
    let s = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-tls-ca",
            &path("ca.pem"),
            "--xds-tls-cert",
            &path("client.pem"),
            "--xds-tls-key",
            &path("client.key"),
        ],
    );
    assert!(
        eventually(Duration::from_secs(10), || version(&s) == "t1"),
        "{}",
        s.readyz()
    );
    assert!(ads.answer("t1").is_some_and(|a| a.error_detail.is_none()));
    // A stranger (no client certificate) is refused by the server.
    let stranger = Sluice::start(
        &[("unused.yaml", "domain: files\n")],
        &[
            "--config-xds",
            &addr.to_string(),
            "--xds-tls-ca",
            &path("ca.pem"),
        ],
    );
    assert!(eventually(Duration::from_secs(10), || stranger
        .logs_contain("xDS stream failed")));
    assert_eq!(
        version(&stranger),
        "",
        "no rules without a client certificate"
    );
}
