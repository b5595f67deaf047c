//! Rules over xDS, as envoyproxy/ratelimit's `CONFIG_TYPE=GRPC_XDS_SOTW`
//! (Envoy Gateway's way): an ADS stream (`AggregatedDiscoveryService/
//! StreamAggregatedResources`) subscribed to `RateLimitConfig` resources,
//! state of the world. Every response is the whole rule set: it is compiled
//! like a directory of files and swapped in whole, then ACKed with its
//! version; one that does not compile is NACKed with the error while the last
//! good rules stay in force. A broken stream is reopened with backoff.
//! Files and xDS are exclusive: `--config-xds` replaces `--config`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node as XdsNode;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod convert;

use convert::domain_file;

use super::{ConfigError, LiveRules, LoadError};

/// The resource type sluice subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Where the rules come from.
#[derive(Debug, Clone)]
pub struct XdsConfig {
    /// `host:port` of the management server (plain HTTP/2).
    pub server: String,
    /// `--xds-node-id`, the reference's `CONFIG_GRPC_XDS_NODE_ID`.
    pub node_id: String,
    /// Extra request headers (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// String fields of the node's metadata (`CONFIG_GRPC_XDS_NODE_METADATA`).
    pub node_metadata: Vec<(String, String)>,
    /// TLS, or mutual TLS, to the server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`).
    pub tls: Option<XdsTls>,
    /// HTTP/2 PING interval on the stream, and how long an answer may take
    /// before the stream is given up and replaced (`--xds-keepalive-*`): a
    /// stream that stops carrying anything is found within their sum.
    pub keepalive: Duration,
    pub keepalive_timeout: Duration,
    /// Responses closer together than this are coalesced: the newest is
    /// applied, the ones it supersedes are not (`--xds-min-apply-interval`).
    pub min_apply_interval: Duration,
}

impl XdsConfig {
    /// HTTP/2 PING interval on the stream (`--xds-keepalive-interval`).
    pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);
    /// How long a PING may go unanswered (`--xds-keepalive-timeout`).
    pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Versions closer together are coalesced (`--xds-min-apply-interval`).
    pub const DEFAULT_MIN_APPLY_INTERVAL: Duration = Duration::from_secs(1);

    /// A config for `server` with the default timings.
    pub fn new(server: String, node_id: String) -> XdsConfig {
        XdsConfig {
            server,
            node_id,
            headers: Vec::new(),
            node_metadata: Vec::new(),
            tls: None,
            keepalive: XdsConfig::DEFAULT_KEEPALIVE,
            keepalive_timeout: XdsConfig::DEFAULT_KEEPALIVE_TIMEOUT,
            min_apply_interval: XdsConfig::DEFAULT_MIN_APPLY_INTERVAL,
        }
    }
}

/// PEM files for TLS to the management server, read on every connect so a
/// rotated certificate is picked up by the next reconnect.
#[derive(Debug, Clone)]
pub struct XdsTls {
    /// The CA that signs the server (`CONFIG_GRPC_XDS_SERVER_TLS_CACERT`).
    pub ca: PathBuf,
    /// A client certificate and key, for mutual TLS
    /// (`CONFIG_GRPC_XDS_CLIENT_TLS_CERT`, `..._KEY`).
    pub cert: Option<(PathBuf, PathBuf)>,
    /// The name to verify the server as (`CONFIG_GRPC_XDS_SERVER_TLS_SAN`);
    /// the host of `server` by default.
    pub server_name: Option<String>,
}

/// Follows the management server until `token` is cancelled.
pub async fn run(cfg: XdsConfig, rules: Arc<LiveRules>, token: CancellationToken) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let outcome = tokio::select! {
            () = token.cancelled() => return,
            r = stream(&cfg, &rules) => r,
        };
        match outcome {
            Ok(()) => {
                warn!(server = %cfg.server, "xDS stream ended; reconnecting");
                backoff = BACKOFF_FIRST;
            }
            Err(e) => {
                warn!(server = %cfg.server, error = %e, "xDS stream failed; reconnecting");
                rules.xds_failed(&e);
                rules.observer().xds_failed();
            }
        }
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One stream: subscribe, then apply and answer every response.
async fn stream(cfg: &XdsConfig, rules: &Arc<LiveRules>) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel(cfg).await?);
    let (tx, rx) = mpsc::channel(4);
    let node = node(cfg);
    // A reconnect resubscribes with the version in force, as the reference.
    let version = rules.status().version.unwrap_or_default();
    let first = DiscoveryRequest {
        version_info: version.clone(),
        node: Some(node.clone()),
        type_url: TYPE_URL.into(),
        ..Default::default()
    };
    tx.send(first).await.map_err(|e| e.to_string())?;
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    for (k, v) in &cfg.headers {
        if let (Ok(k), Ok(v)) = (
            k.parse::<tonic::metadata::MetadataKey<_>>(),
            v.parse::<tonic::metadata::MetadataValue<_>>(),
        ) {
            req.metadata_mut().insert(k, v);
        }
    }
    let responses = client
        .stream_aggregated_resources(req)
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    info!(server = %cfg.server, node = %cfg.node_id, "xDS stream open");
    follow(cfg, rules, responses, &tx, &node, version).await
}

/// This sluice as the server knows it: its id and metadata.
fn node(cfg: &XdsConfig) -> XdsNode {
    XdsNode {
        id: cfg.node_id.clone(),
        metadata: (!cfg.node_metadata.is_empty()).then(|| Struct {
            fields: cfg
                .node_metadata
                .iter()
                .map(|(k, v)| {
                    let value = Value {
                        kind: Some(Kind::StringValue(v.clone())),
                    };
                    (k.clone(), value)
                })
                .collect(),
        }),
        ..Default::default()
    }
}

/// Applies responses as they come, the newest of any that arrive closer
/// together than `--xds-min-apply-interval`, and answers each applied one.
async fn follow(
    cfg: &XdsConfig,
    rules: &Arc<LiveRules>,
    mut responses: tonic::Streaming<DiscoveryResponse>,
    tx: &mpsc::Sender<DiscoveryRequest>,
    node: &XdsNode,
    mut applied: String,
) -> Result<(), String> {
    // The newest response not yet applied, and when the next may be.
    let mut pending: Option<DiscoveryResponse> = None;
    let mut next_apply = tokio::time::Instant::now();
    loop {
        tokio::select! {
            msg = responses.message() => {
                let Some(resp) = msg.map_err(|e| e.to_string())? else {
                    return Ok(());
                };
                if pending.replace(resp).is_some()
                    && rules.observer().xds_coalesced()
                {
                    info!("xDS versions arrive faster than --xds-min-apply-interval; applying the newest (logged once per 10 s)");
                }
            }
            () = tokio::time::sleep_until(next_apply), if pending.is_some() => {
                let Some(resp) = pending.take() else { continue };
                // Compiled off the runtime, behind requests (see `behind`).
                let (rules, node, last) = (rules.clone(), node.clone(), applied.clone());
                let nice = rules.options().reload_nice;
                let done = super::watch::behind(nice, move || {
                    let mut applied = last;
                    let ack = answer(&resp, &rules, &mut applied, &node);
                    (ack, applied)
                });
                let Some((ack, now)) = done.await else {
                    return Err("the thread that compiles pushed rules could not run".into());
                };
                applied = now;
                tx.send(ack).await.map_err(|e| e.to_string())?;
                next_apply = tokio::time::Instant::now() + cfg.min_apply_interval;
            }
        }
    }
}

/// A connection to the server, over TLS when configured.
async fn channel(cfg: &XdsConfig) -> Result<tonic::transport::Channel, String> {
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let mut endpoint =
        tonic::transport::Endpoint::from_shared(format!("{scheme}://{}", cfg.server))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(cfg.keepalive)
            .keep_alive_timeout(cfg.keepalive_timeout)
            .keep_alive_while_idle(true);
    if let Some(tls) = &cfg.tls {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(&tls.ca)?));
        if let Some((cert, key)) = &tls.cert {
            config = config.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        let host = cfg
            .server
            .rsplit_once(':')
            .map_or(cfg.server.as_str(), |(h, _)| h);
        config = config.domain_name(tls.server_name.clone().unwrap_or_else(|| host.to_owned()));
        endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
    }
    endpoint.connect().await.map_err(|e| e.to_string())
}

/// Applies one response and builds its ACK, or its NACK with the error.
fn answer(
    resp: &DiscoveryResponse,
    rules: &LiveRules,
    applied: &mut String,
    node: &XdsNode,
) -> DiscoveryRequest {
    let error_detail = match rules.apply_xds(decode(resp), &resp.version_info) {
        Ok(_) => {
            applied.clone_from(&resp.version_info);
            None
        }
        Err(e) => {
            warn!(version = %resp.version_info, error = %e, "xDS rules rejected (NACK); the rules in force stay");
            Some(RpcStatus {
                code: 3,
                message: e.to_string(),
                details: Vec::new(),
            })
        }
    };
    DiscoveryRequest {
        version_info: applied.clone(),
        node: Some(node.clone()),
        type_url: TYPE_URL.into(),
        response_nonce: resp.nonce.clone(),
        error_detail,
        ..Default::default()
    }
}

/// The response's resources as the model of rule files, with their fingerprint.
fn decode(resp: &DiscoveryResponse) -> Result<super::Parsed, LoadError> {
    let mut hasher = DefaultHasher::new();
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for (i, any) in resp.resources.iter().enumerate() {
        any.value.hash(&mut hasher);
        if any.type_url != TYPE_URL {
            errors.push(error(
                &format!("resources[{i}]"),
                format!("unexpected resource type {}", any.type_url),
            ));
            continue;
        }
        match RateLimitConfig::decode(any.value.as_slice()) {
            Ok(config) => {
                let file = PathBuf::from(format!("xds:{}", config.name));
                match domain_file(&config) {
                    Ok(df) => files.push((file, df)),
                    Err(mut e) => errors.append(&mut e),
                }
            }
            Err(e) => errors.push(error(
                &format!("resources[{i}]"),
                format!("not a RateLimitConfig: {e}"),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(LoadError::Invalid(errors));
    }
    Ok((files, hasher.finish()))
}

fn error(field: &str, message: String) -> ConfigError {
    ConfigError {
        file: PathBuf::from("xds"),
        position: None,
        field: field.to_owned(),
        message,
    }
}
