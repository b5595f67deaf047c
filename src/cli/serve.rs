//! `serve`'s flags: rules, xDS, listeners, behaviour, telemetry; the bounds
//! and the store have rooms of their own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::heading;

use super::{
    BoundArgs, ConfigArgs, ConnArgs, LogFormat, Span, StoreArgs, pairs, parse_duration, parse_mode,
    parse_ratio,
};
use crate::admin::HealthcheckPolicy;
use crate::config::xds::{XdsConfig, XdsTls};
use crate::privacy::Privacy;
use crate::quota::QuotaOptions;
use crate::service::{Knobs, ResponseHeaders, Settings};

/// `--response-headers`' values, as clap names them: the service's
/// [`ResponseHeaders`] (the server knows no command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ResponseHeadersArg {
    /// None: Envoy's own `enable_x_ratelimit_headers` builds them from the statuses.
    None,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` (draft 03).
    Draft03,
    /// `RateLimit-Policy` and `RateLimit` (IETF httpapi draft).
    Ietf,
}

impl From<ResponseHeadersArg> for ResponseHeaders {
    fn from(a: ResponseHeadersArg) -> ResponseHeaders {
        match a {
            ResponseHeadersArg::None => ResponseHeaders::None,
            ResponseHeadersArg::Draft03 => ResponseHeaders::Draft03,
            ResponseHeadersArg::Ietf => ResponseHeaders::Ietf,
        }
    }
}
use crate::tls::TlsFiles;

/// Quota mode (Envoy's rate_limit_quota filter) on the gRPC listener.
#[derive(Args, Clone)]
pub struct QuotaArgs {
    /// Quota streams (one per Envoy) open at once; more are refused.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_MAX_STREAMS", default_value_t = QuotaOptions::default().max_streams)]
    pub(crate) quota_max_streams: usize,
    /// Buckets one quota stream may report; more are skipped and counted.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_MAX_BUCKETS", default_value_t = QuotaOptions::default().max_buckets)]
    pub(crate) quota_max_buckets: usize,
    /// Buckets all quota streams of this instance may hold together (each
    /// costs about 1 KiB and a little of every rebalance); more are skipped
    /// and counted. Keep it at most --quota-store-rate x a third of the TTL.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_MAX_TOTAL_BUCKETS", default_value_t = QuotaOptions::default().max_total_buckets)]
    pub(crate) quota_max_total_buckets: usize,
    /// How long an assignment holds unless renewed (whole seconds, at least 1).
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_ASSIGNMENT_TTL", default_value_t = Span(QuotaOptions::default().assignment_ttl))]
    pub(crate) quota_assignment_ttl: Span,
    /// How often each stream re-reads its fleets and pushes shares that moved.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_REBALANCE_INTERVAL", default_value_t = Span(QuotaOptions::default().rebalance))]
    pub(crate) quota_rebalance_interval: Span,
    /// A bucket reported with no requests for this long is abandoned.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_ABANDON_AFTER", default_value_t = Span(QuotaOptions::default().abandon_after))]
    pub(crate) quota_abandon_after: Span,
    /// Store calls (demand writes and fleet reads) one quota stream may make
    /// per second; more wait for the rebalance timer.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_STREAM_STORE_RATE", default_value_t = QuotaOptions::default().stream_store_rate)]
    pub(crate) quota_stream_store_rate: u32,
    /// Store calls all quota streams of this instance may make per second,
    /// so quota mode never crowds out ShouldRateLimit's counters.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_STORE_RATE", default_value_t = QuotaOptions::default().store_rate)]
    pub(crate) quota_store_rate: u32,
    /// Quota streams one peer (IPv4 address, IPv6 /64) may hold; more are
    /// refused RESOURCE_EXHAUSTED.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_MAX_STREAMS_PER_PEER", default_value_t = QuotaOptions::default().max_streams_per_peer)]
    pub(crate) quota_max_streams_per_peer: usize,
    /// Buckets one peer's quota streams may hold together; more are skipped
    /// and counted.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_MAX_BUCKETS_PER_PEER", default_value_t = QuotaOptions::default().max_buckets_per_peer)]
    pub(crate) quota_max_buckets_per_peer: usize,
    /// After start, learn what the fleet holds for this long before assigning
    /// (reports counted, nothing pushed; two reports by default).
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_LEARNING", default_value_t = Span(QuotaOptions::default().learning))]
    pub(crate) quota_learning: Span,
    /// End a quota stream whose first report has not come within this.
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_FIRST_REPORT_TIMEOUT", default_value_t = Span(QuotaOptions::default().first_report))]
    pub(crate) quota_first_report_timeout: Span,
    /// End a quota stream that sends nothing for this long (Envoy reports
    /// every 5 s).
    #[arg(help_heading = heading::QUOTA, long, env = "SLUICE_QUOTA_STREAM_IDLE", default_value_t = Span(QuotaOptions::default().stream_idle))]
    pub(crate) quota_stream_idle: Span,
}

impl QuotaArgs {
    pub(crate) fn options(&self) -> QuotaOptions {
        QuotaOptions {
            max_streams: self.quota_max_streams,
            max_buckets: self.quota_max_buckets,
            max_total_buckets: self.quota_max_total_buckets,
            assignment_ttl: self.quota_assignment_ttl.0.max(Duration::from_secs(1)),
            rebalance: self
                .quota_rebalance_interval
                .0
                .max(Duration::from_millis(100)),
            abandon_after: self.quota_abandon_after.0,
            stream_store_rate: self.quota_stream_store_rate,
            store_rate: self.quota_store_rate,
            max_streams_per_peer: self.quota_max_streams_per_peer,
            max_buckets_per_peer: self.quota_max_buckets_per_peer,
            first_report: self.quota_first_report_timeout.0,
            stream_idle: self.quota_stream_idle.0,
            learning: self.quota_learning.0,
        }
    }
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Directory of rule files (*.yaml, *.yml; dot-files skipped).
    #[arg(help_heading = heading::START, long, env = "SLUICE_CONFIG", default_value = "descriptors")]
    pub(crate) config: PathBuf,
    /// Do not watch the rule directory (SIGHUP and POST /reload still reload).
    #[arg(help_heading = heading::RULES, long, env = "SLUICE_NO_WATCH")]
    pub(crate) no_watch: bool,
    /// Take the rules from this xDS management server (host:port, ADS, state of
    /// the world) instead of --config: the reference's CONFIG_TYPE=GRPC_XDS_SOTW.
    #[arg(help_heading = heading::START, long, env = "SLUICE_CONFIG_XDS")]
    pub(crate) config_xds: Option<String>,
    /// Shapes for the rules --config-xds brings: a directory of files written
    /// as rule files whose rate_limit blocks give only window, algorithm,
    /// burst, overdraft, on_store_failure, refundable and leased_allowance,
    /// found by domain and descriptor path; reloaded as rule files are.
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_OVERLAY", requires = "config_xds")]
    pub(crate) xds_overlay: Option<PathBuf>,
    /// The node id sluice gives the xDS server (CONFIG_GRPC_XDS_NODE_ID).
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_NODE_ID", default_value = "default")]
    pub(crate) xds_node_id: String,
    /// Extra headers on the xDS stream, comma list of name=value (CONFIG_GRPC_XDS_HEADERS).
    #[arg(
        help_heading = heading::XDS,
        long,
        env = "SLUICE_XDS_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub(crate) xds_headers: Vec<String>,
    /// The node's metadata, comma list of key=value (CONFIG_GRPC_XDS_NODE_METADATA).
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_NODE_METADATA", value_delimiter = ',')]
    pub(crate) xds_node_metadata: Vec<String>,
    /// Speak TLS to the xDS server, trusting this CA (PEM).
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_TLS_CA")]
    pub(crate) xds_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS to the xDS server.
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_TLS_CERT", requires_all = ["xds_tls_key", "xds_tls_ca"])]
    pub(crate) xds_tls_cert: Option<PathBuf>,
    /// The key of --xds-tls-cert (PEM).
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_TLS_KEY", requires = "xds_tls_cert")]
    pub(crate) xds_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry (default: its host).
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_TLS_SERVER_NAME")]
    pub(crate) xds_tls_server_name: Option<String>,
    /// HTTP/2 PING interval on the xDS stream; a stream whose PING is not
    /// answered within --xds-keepalive-timeout is replaced.
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_KEEPALIVE_INTERVAL", default_value_t = Span(XdsConfig::DEFAULT_KEEPALIVE))]
    pub(crate) xds_keepalive_interval: Span,
    /// How long an xDS PING may go unanswered before the stream is replaced.
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_KEEPALIVE_TIMEOUT", default_value_t = Span(XdsConfig::DEFAULT_KEEPALIVE_TIMEOUT))]
    pub(crate) xds_keepalive_timeout: Span,
    /// xDS versions closer together than this are coalesced: the newest is
    /// applied, the ones it supersedes are not.
    #[arg(help_heading = heading::XDS, long, env = "SLUICE_XDS_MIN_APPLY_INTERVAL", default_value_t = Span(XdsConfig::DEFAULT_MIN_APPLY_INTERVAL))]
    pub(crate) xds_min_apply_interval: Span,
    /// Address of the gRPC server (RateLimitService and grpc.health.v1).
    #[arg(help_heading = heading::START, long, env = "SLUICE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub(crate) grpc_addr: SocketAddr,
    /// Address of the admin HTTP server; a comma list (or the flag again)
    /// serves the same routes on each.
    #[arg(
        help_heading = heading::START,
        long,
        env = "SLUICE_ADMIN_ADDR",
        default_value = "127.0.0.1:8080",
        value_delimiter = ','
    )]
    pub(crate) admin_addr: Vec<SocketAddr>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Decisions that may wait for the store at once; past it a request is
    /// shed at once (its rule's own on_store_failure deny or allow decides,
    /// else UNAVAILABLE, which Envoy's failure mode decides), except from a
    /// connection under its even share.
    #[arg(help_heading = heading::FAILURE, long, env = "SLUICE_MAX_PENDING", default_value_t = Settings::default().max_pending)]
    pub(crate) max_pending: usize,
    /// Answer OK to every request while still counting and reporting.
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_SHADOW_MODE")]
    pub(crate) shadow_mode: bool,
    /// Treat every descriptor as a quota descriptor (the reference's QUOTA_MODE):
    /// a request is over only when all its descriptors are.
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_QUOTA_MODE")]
    pub(crate) quota_mode: bool,
    /// A request that one descriptor rejects spends nothing of its other
    /// descriptors' budgets (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; one more
    /// store round trip for requests with several limits).
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_STOP_INCREMENT_WHEN_OVER_LIMIT")]
    pub(crate) stop_increment_when_over_limit: bool,
    /// Counters of per-request limit overrides may be given back
    /// (is_negative_hits): never answered from the local over-limit cache,
    /// on any instance, as a rule marked refundable.
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_REFUNDABLE_OVERRIDES")]
    pub(crate) refundable_overrides: bool,
    /// Share of a limit above which hits count as near_limit (NEAR_LIMIT_RATIO).
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = parse_ratio)]
    pub(crate) near_limit_ratio: f32,
    /// Rate-limit headers sluice adds to every answer itself: none (Envoy's
    /// enable_x_ratelimit_headers builds draft-03 from the statuses), draft03
    /// (X-RateLimit-*, the reference's LIMIT_RESPONSE_HEADERS_ENABLED) or ietf
    /// (RateLimit-Policy and RateLimit).
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_RESPONSE_HEADERS", value_enum, default_value_t = ResponseHeadersArg::None)]
    pub(crate) response_headers: ResponseHeadersArg,
    /// Fill dynamic_metadata in responses (the reference's RESPONSE_DYNAMIC_METADATA).
    #[arg(help_heading = heading::DECISIONS, long, env = "SLUICE_RESPONSE_DYNAMIC_METADATA")]
    pub(crate) response_dynamic_metadata: bool,
    #[command(flatten)]
    pub(crate) quota: QuotaArgs,
    /// Serve gRPC on this Unix socket instead of --grpc-addr (the reference's
    /// GRPC_UDS), for an Envoy on the same host; a stale socket file is replaced.
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_GRPC_UDS", conflicts_with = "grpc_tls_cert")]
    pub(crate) grpc_uds: Option<PathBuf>,
    /// Permissions of the --grpc-uds socket (octal), whatever the umask: by
    /// default its owner and group may connect, nobody else.
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_GRPC_UDS_MODE", default_value = "660", value_parser = parse_mode)]
    pub(crate) grpc_uds_mode: u32,
    /// GET /healthcheck fails until at least one domain is loaded (the
    /// reference's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_HEALTHCHECK_NEEDS_RULES")]
    pub(crate) healthcheck_needs_rules: bool,
    /// GET /healthcheck fails while the store is down, not only until it
    /// first answers (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_HEALTHCHECK_NEEDS_STORE")]
    pub(crate) healthcheck_needs_store: bool,
    /// After SIGTERM/SIGINT, how long to stay not-ready but keep serving
    /// every connection before sending GOAWAY (time for the endpoint's
    /// removal to reach every client; the Helm chart sets 5s).
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub(crate) shutdown_delay: Duration,
    /// Longest wait for in-flight requests after GOAWAY, e.g. 10s or 500ms.
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub(crate) shutdown_grace: Duration,
    /// Threads that serve requests (default: one per CPU core).
    #[arg(help_heading = heading::LISTENERS, long, env = "SLUICE_WORKER_THREADS")]
    pub(crate) worker_threads: Option<usize>,
    /// Serve gRPC over TLS with this certificate chain (PEM); reloaded on change.
    #[arg(help_heading = heading::TLS, long, env = "SLUICE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub(crate) grpc_tls_cert: Option<PathBuf>,
    /// The private key of --grpc-tls-cert (PEM).
    #[arg(help_heading = heading::TLS, long, env = "SLUICE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub(crate) grpc_tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(help_heading = heading::TLS, long, env = "SLUICE_GRPC_TLS_CLIENT_CA", requires = "grpc_tls_cert")]
    pub(crate) grpc_tls_client_ca: Option<PathBuf>,
    /// With --grpc-tls-client-ca: the client certificate must also carry this
    /// DNS name or IP address as a subject alternative name (GRPC_CLIENT_TLS_SAN).
    #[arg(
        help_heading = heading::TLS,
        long,
        env = "SLUICE_GRPC_TLS_CLIENT_SAN",
        requires = "grpc_tls_client_ca"
    )]
    pub(crate) grpc_tls_client_san: Option<String>,
    #[command(flatten)]
    pub(crate) config_args: ConfigArgs,
    #[command(flatten)]
    pub(crate) limits: BoundArgs,
    #[command(flatten)]
    pub(crate) conns: ConnArgs,
    /// Export OpenTelemetry traces to this OTLP endpoint (e.g.
    /// http://collector:4317 for gRPC, http://collector:4318/v1/traces for
    /// HTTP); OTEL_EXPORTER_OTLP_ENDPOINT works too. Off by default.
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
    /// How traces are exported: grpc, or http/protobuf (OTLP over HTTP).
    /// Unset: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
    /// else grpc.
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_OTLP_PROTOCOL", value_parser = ["grpc", "http/protobuf"])]
    pub(crate) otlp_protocol: Option<String>,
    /// Serve the reference's stats as Prometheus on this address (GET
    /// /metrics), named by --reference-metrics-mapper (ratelimit mode's
    /// USE_PROMETHEUS with PROMETHEUS_ADDR). Off by default.
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_REFERENCE_METRICS_ADDR")]
    pub(crate) reference_metrics_addr: Option<std::net::SocketAddr>,
    /// A statsd_exporter mapping file naming the reference's stats on
    /// --reference-metrics-addr (PROMETHEUS_MAPPER_YAML); without one, the
    /// stat names with dots as underscores.
    #[arg(
        help_heading = heading::OBSERVABILITY,
        long,
        env = "SLUICE_REFERENCE_METRICS_MAPPER",
        requires = "reference_metrics_addr"
    )]
    pub(crate) reference_metrics_mapper: Option<std::path::PathBuf>,
    /// Send the reference's stats to this statsd (host:port, UDP).
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_STATSD_ADDR")]
    pub(crate) statsd_addr: Option<String>,
    /// How often stats are sent to --statsd-addr.
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_STATSD_FLUSH_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub(crate) statsd_flush_interval: Duration,
    /// DogStatsD tags sent with every stat (comma list of key:value).
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_STATSD_TAGS", value_delimiter = ',')]
    pub(crate) statsd_tags: Vec<String>,
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Log filter: a level (info, debug, ...) or a tracing directive.
    #[arg(help_heading = heading::OBSERVABILITY, long, env = "SLUICE_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,
    /// Descriptor keys whose values are email addresses: normalised (trimmed,
    /// lowercased, +tag removed) and hashed before use (comma list).
    #[arg(
        help_heading = heading::PRIVACY,
        long,
        env = "SLUICE_EMAIL_KEYS",
        value_delimiter = ',',
        default_value = "email"
    )]
    pub(crate) email_keys: Vec<String>,
    /// Hash email values with HMAC-SHA-256 under this secret instead of SHA-256.
    #[arg(help_heading = heading::PRIVACY, long, env = "SLUICE_KEY_HASH_SECRET", hide_env_values = true)]
    pub(crate) key_hash_secret: Option<String>,
}

impl ServeArgs {
    /// How the limiter decides.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            global_shadow: self.shadow_mode,
            dynamic_metadata: self.response_dynamic_metadata,
            privacy: Privacy::new(
                self.email_keys.clone(),
                self.key_hash_secret.clone().map(String::into_bytes),
            ),
            limits: self.limits.limits(),
            response_headers: self.response_headers.into(),
            knobs: Knobs {
                quota_mode: self.quota_mode,
                near_ratio: self.near_limit_ratio,
                stop_when_over: self.stop_increment_when_over_limit,
                refundable_overrides: self.refundable_overrides,
                leases: self.store.leases(),
                shared: self.store.shared(),
            },
            max_pending: self.max_pending,
        }
    }

    /// The gRPC listener's certificate files, when it speaks TLS.
    pub(crate) fn tls_files(&self) -> Option<TlsFiles> {
        let (cert, key) = self.grpc_tls_cert.clone().zip(self.grpc_tls_key.clone())?;
        Some(TlsFiles {
            cert,
            key,
            client_ca: self.grpc_tls_client_ca.clone(),
            client_san: self.grpc_tls_client_san.clone(),
        })
    }

    /// What `GET /healthcheck` requires.
    pub(crate) fn healthcheck(&self) -> HealthcheckPolicy {
        HealthcheckPolicy {
            needs_rules: self.healthcheck_needs_rules,
            needs_store_now: self.healthcheck_needs_store,
        }
    }

    /// The xDS client, when the rules come from a management server.
    pub(crate) fn xds(&self) -> Option<XdsConfig> {
        let server = self.config_xds.as_deref()?;
        Some(XdsConfig {
            headers: pairs(&self.xds_headers)
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            node_metadata: pairs(&self.xds_node_metadata).collect(),
            tls: self.xds_tls_ca.clone().map(|ca| XdsTls {
                ca,
                cert: self.xds_tls_cert.clone().zip(self.xds_tls_key.clone()),
                server_name: self.xds_tls_server_name.clone(),
            }),
            keepalive: self.xds_keepalive_interval.0,
            keepalive_timeout: self.xds_keepalive_timeout.0,
            min_apply_interval: self.xds_min_apply_interval.0,
            ..XdsConfig::new(server.to_owned(), self.xds_node_id.clone())
        })
    }
}
