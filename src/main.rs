//! The `sluice` command line: `serve` (the default) and `check`.

use std::ffi::OsStr;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use sluice::admin::{AdminAccess, AdminLimits, HealthcheckPolicy};
use sluice::config::xds::{XdsConfig, XdsTls};
use sluice::config::{LiveRules, LoadOptions, load_dir};
use sluice::conn::ConnLimits;
use sluice::metrics::{MetricLimits, Metrics};
use sluice::privacy::Privacy;
use sluice::quota::QuotaOptions;
use sluice::request::Limits;
use sluice::server::{self, BodyLimits, GrpcLimits, GrpcListener, Listeners, ServeOptions};
use sluice::service::{Knobs, RateLimiter, ResponseHeaders, Settings};
use sluice::statsd::{Mogrifier, StatsdConfig};
use sluice::store::memcache::{MemcacheConfig, MemcacheStore};
use sluice::store::redis::{KeyFormat, RedisConfig, RedisStore, RedisTls, Sentinel, Target};
use sluice::store::{
    DEFAULT_MAX_COUNTERS, FailurePolicy, MemoryStore, Resilient, ResilientOptions, Store,
};
use sluice::telemetry::Telemetry;
use sluice::tls::{Tls, TlsFiles};
use sluice::{health_probe, reference_env};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

// mimalloc: a request makes a few dozen small allocations in h2, hyper and
// tonic; see the README's Performance section for what it gained.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A rate-limit service for Envoy, compatible with envoyproxy/ratelimit configs.
#[derive(Parser)]
#[command(name = "sluice", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the rules (the default when no command is given).
    Serve(Box<ServeArgs>),
    /// Validate a config directory: one line per domain, or the errors and exit 1.
    Check(CheckArgs),
    /// Load-test any Envoy rate-limit service (sluice, envoyproxy/ratelimit, ...).
    Bench(BenchArgs),
    /// Exit 0 if the admin port's /healthcheck answers 200 (a container
    /// health check that needs no curl and no shell).
    Health(HealthArgs),
    /// Serve as envoyproxy/ratelimit is configured: from its environment
    /// variables only (what `/bin/ratelimit` in the image runs).
    Ratelimit,
}

#[derive(Args)]
struct HealthArgs {
    /// The admin address (the first of --admin-addr's list); an unspecified
    /// address is reached on loopback.
    #[arg(long, env = "SLUICE_ADMIN_ADDR", default_value = "127.0.0.1:8080", value_delimiter = ',', num_args = 1..)]
    admin_addr: Vec<SocketAddr>,
    /// Longest wait for the answer.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Args)]
struct BenchArgs {
    /// host:port of the rate-limit service's gRPC listener.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: String,
    #[arg(long, default_value = "api")]
    domain: String,
    /// A descriptor as key=value[,key=value...]; `{n}` in a value becomes one of
    /// --keys distinct values. Repeat for several descriptors per request.
    #[arg(long = "descriptor", required = true)]
    descriptors: Vec<sluice::bench::Template>,
    /// Distinct values of {n}, taken in turn.
    #[arg(long, default_value_t = 1)]
    keys: u64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections to spread them over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// How long to run, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Stop after this many requests (if sooner than --duration).
    #[arg(long)]
    requests: Option<u64>,
    /// Send at this fixed rate (requests/s) instead of as fast as possible.
    #[arg(long)]
    rate: Option<f64>,
    /// Print one line of JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct ConfigArgs {
    /// Allow one domain to be spread across several files.
    #[arg(long, env = "SLUICE_MERGE_DOMAINS")]
    merge_domains: bool,
    /// Rule files one load may read; more is a load error.
    #[arg(long, env = "SLUICE_MAX_RULE_FILES", default_value_t = LoadOptions::default().max_files)]
    max_rule_files: usize,
}

/// Quota mode (Envoy's rate_limit_quota filter) on the gRPC listener.
#[derive(Args, Clone)]
struct QuotaArgs {
    /// Quota streams (one per Envoy) open at once; more are refused.
    #[arg(long, env = "SLUICE_QUOTA_MAX_STREAMS", default_value_t = QuotaOptions::default().max_streams)]
    quota_max_streams: usize,
    /// Buckets one quota stream may report; more are skipped and counted.
    #[arg(long, env = "SLUICE_QUOTA_MAX_BUCKETS", default_value_t = QuotaOptions::default().max_buckets)]
    quota_max_buckets: usize,
    /// Buckets all quota streams of this instance may hold together (each
    /// costs about 1 KiB and a little of every rebalance); more are skipped
    /// and counted. Keep it at most --quota-store-rate x a third of the TTL.
    #[arg(long, env = "SLUICE_QUOTA_MAX_TOTAL_BUCKETS", default_value_t = QuotaOptions::default().max_total_buckets)]
    quota_max_total_buckets: usize,
    /// How long an assignment holds unless renewed (whole seconds, at least 1).
    #[arg(long, env = "SLUICE_QUOTA_ASSIGNMENT_TTL", default_value = "15s", value_parser = parse_duration)]
    quota_assignment_ttl: Duration,
    /// How often each stream re-reads its fleets and pushes shares that moved.
    #[arg(long, env = "SLUICE_QUOTA_REBALANCE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    quota_rebalance_interval: Duration,
    /// A bucket reported with no requests for this long is abandoned.
    #[arg(long, env = "SLUICE_QUOTA_ABANDON_AFTER", default_value = "300s", value_parser = parse_duration)]
    quota_abandon_after: Duration,
    /// Store calls (demand writes and fleet reads) one quota stream may make
    /// per second; more wait for the rebalance timer.
    #[arg(long, env = "SLUICE_QUOTA_STREAM_STORE_RATE", default_value_t = QuotaOptions::default().stream_store_rate)]
    quota_stream_store_rate: u32,
    /// Store calls all quota streams of this instance may make per second,
    /// so quota mode never crowds out ShouldRateLimit's counters.
    #[arg(long, env = "SLUICE_QUOTA_STORE_RATE", default_value_t = QuotaOptions::default().store_rate)]
    quota_store_rate: u32,
    /// Quota streams one peer (IPv4 address, IPv6 /64) may hold; more are
    /// refused RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_QUOTA_MAX_STREAMS_PER_PEER", default_value_t = QuotaOptions::default().max_streams_per_peer)]
    quota_max_streams_per_peer: usize,
    /// Buckets one peer's quota streams may hold together; more are skipped
    /// and counted.
    #[arg(long, env = "SLUICE_QUOTA_MAX_BUCKETS_PER_PEER", default_value_t = QuotaOptions::default().max_buckets_per_peer)]
    quota_max_buckets_per_peer: usize,
    /// End a quota stream whose first report has not come within this.
    #[arg(long, env = "SLUICE_QUOTA_FIRST_REPORT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    quota_first_report_timeout: Duration,
    /// End a quota stream that sends nothing for this long (Envoy reports
    /// every 5 s).
    #[arg(long, env = "SLUICE_QUOTA_STREAM_IDLE", default_value = "60s", value_parser = parse_duration)]
    quota_stream_idle: Duration,
}

impl QuotaArgs {
    fn options(&self) -> QuotaOptions {
        QuotaOptions {
            max_streams: self.quota_max_streams,
            max_buckets: self.quota_max_buckets,
            max_total_buckets: self.quota_max_total_buckets,
            assignment_ttl: self.quota_assignment_ttl.max(Duration::from_secs(1)),
            rebalance: self
                .quota_rebalance_interval
                .max(Duration::from_millis(100)),
            abandon_after: self.quota_abandon_after,
            stream_store_rate: self.quota_stream_store_rate,
            store_rate: self.quota_store_rate,
            max_streams_per_peer: self.quota_max_streams_per_peer,
            max_buckets_per_peer: self.quota_max_buckets_per_peer,
            first_report: self.quota_first_report_timeout,
            stream_idle: self.quota_stream_idle,
        }
    }
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Directory of rule files (*.yaml, *.yml; dot-files skipped).
    #[arg(long, env = "SLUICE_CONFIG", default_value = "descriptors")]
    config: PathBuf,
    #[command(flatten)]
    config_args: ConfigArgs,
    #[command(flatten)]
    quota: QuotaArgs,
    /// Take the rules from this xDS management server (host:port, ADS, state of
    /// the world) instead of --config: the reference's CONFIG_TYPE=GRPC_XDS_SOTW.
    #[arg(long, env = "SLUICE_CONFIG_XDS")]
    config_xds: Option<String>,
    /// The node id sluice gives the xDS server (CONFIG_GRPC_XDS_NODE_ID).
    #[arg(long, env = "SLUICE_XDS_NODE_ID", default_value = "default")]
    xds_node_id: String,
    /// Extra headers on the xDS stream, comma list of name=value (CONFIG_GRPC_XDS_HEADERS).
    #[arg(
        long,
        env = "SLUICE_XDS_HEADERS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    xds_headers: Vec<String>,
    /// The node's metadata, comma list of key=value (CONFIG_GRPC_XDS_NODE_METADATA).
    #[arg(long, env = "SLUICE_XDS_NODE_METADATA", value_delimiter = ',')]
    xds_node_metadata: Vec<String>,
    /// Speak TLS to the xDS server, trusting this CA (PEM).
    #[arg(long, env = "SLUICE_XDS_TLS_CA")]
    xds_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS to the xDS server.
    #[arg(long, env = "SLUICE_XDS_TLS_CERT", requires_all = ["xds_tls_key", "xds_tls_ca"])]
    xds_tls_cert: Option<PathBuf>,
    /// The key of --xds-tls-cert (PEM).
    #[arg(long, env = "SLUICE_XDS_TLS_KEY", requires = "xds_tls_cert")]
    xds_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry (default: its host).
    #[arg(long, env = "SLUICE_XDS_TLS_SERVER_NAME")]
    xds_tls_server_name: Option<String>,
    /// HTTP/2 PING interval on the xDS stream; a stream whose PING is not
    /// answered within --xds-keepalive-timeout is replaced.
    #[arg(long, env = "SLUICE_XDS_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    xds_keepalive_interval: Duration,
    /// How long an xDS PING may go unanswered before the stream is replaced.
    #[arg(long, env = "SLUICE_XDS_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    xds_keepalive_timeout: Duration,
    /// xDS versions closer together than this are coalesced: the newest is
    /// applied, the ones it supersedes are not.
    #[arg(long, env = "SLUICE_XDS_MIN_APPLY_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    xds_min_apply_interval: Duration,
    /// Address of the gRPC server (RateLimitService and grpc.health.v1).
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    grpc_addr: SocketAddr,
    /// Serve gRPC on this Unix socket instead of --grpc-addr (the reference's
    /// GRPC_UDS), for an Envoy on the same host; a stale socket file is replaced.
    #[arg(long, env = "SLUICE_GRPC_UDS", conflicts_with = "grpc_tls_cert")]
    grpc_uds: Option<PathBuf>,
    /// Permissions of the --grpc-uds socket (octal), whatever the umask: by
    /// default its owner and group may connect, nobody else.
    #[arg(long, env = "SLUICE_GRPC_UDS_MODE", default_value = "660", value_parser = parse_mode)]
    grpc_uds_mode: u32,
    /// Address of the admin HTTP server; a comma list (or the flag again)
    /// serves the same routes on each.
    #[arg(
        long,
        env = "SLUICE_ADMIN_ADDR",
        default_value = "127.0.0.1:8080",
        value_delimiter = ','
    )]
    admin_addr: Vec<SocketAddr>,
    /// GET /healthcheck fails until at least one domain is loaded (the
    /// reference's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
    #[arg(long, env = "SLUICE_HEALTHCHECK_NEEDS_RULES")]
    healthcheck_needs_rules: bool,
    /// GET /healthcheck fails while the store is down, not only until it
    /// first answers (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
    #[arg(long, env = "SLUICE_HEALTHCHECK_NEEDS_STORE")]
    healthcheck_needs_store: bool,
    /// Answer OK to every request while still counting and reporting.
    #[arg(long, env = "SLUICE_SHADOW_MODE")]
    shadow_mode: bool,
    /// Treat every descriptor as a quota descriptor (the reference's QUOTA_MODE):
    /// a request is over only when all its descriptors are.
    #[arg(long, env = "SLUICE_QUOTA_MODE")]
    quota_mode: bool,
    /// A request that one descriptor rejects spends nothing of its other
    /// descriptors' budgets (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; one more
    /// store round trip for requests with several limits).
    #[arg(long, env = "SLUICE_STOP_INCREMENT_WHEN_OVER_LIMIT")]
    stop_increment_when_over_limit: bool,
    /// Share of a limit above which hits count as near_limit (NEAR_LIMIT_RATIO).
    #[arg(long, env = "SLUICE_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = parse_ratio)]
    near_limit_ratio: f32,
    /// Rate-limit headers sluice adds to every answer itself: none (Envoy's
    /// enable_x_ratelimit_headers builds draft-03 from the statuses), draft03
    /// (X-RateLimit-*, the reference's LIMIT_RESPONSE_HEADERS_ENABLED) or ietf
    /// (RateLimit-Policy and RateLimit).
    #[arg(long, env = "SLUICE_RESPONSE_HEADERS", value_enum, default_value_t = ResponseHeaders::None)]
    response_headers: ResponseHeaders,
    /// Fill dynamic_metadata in responses (the reference's RESPONSE_DYNAMIC_METADATA).
    #[arg(long, env = "SLUICE_RESPONSE_DYNAMIC_METADATA")]
    response_dynamic_metadata: bool,
    /// Do not watch the rule directory (SIGHUP and POST /reload still reload).
    #[arg(long, env = "SLUICE_NO_WATCH")]
    no_watch: bool,
    /// Longest wait for in-flight requests after SIGTERM/SIGINT, e.g. 10s or 500ms.
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Descriptor keys whose values are email addresses: normalised (trimmed,
    /// lowercased, +tag removed) and hashed before use (comma list).
    #[arg(
        long,
        env = "SLUICE_EMAIL_KEYS",
        value_delimiter = ',',
        default_value = "email"
    )]
    email_keys: Vec<String>,
    /// Hash email values with HMAC-SHA-256 under this secret instead of SHA-256.
    #[arg(long, env = "SLUICE_KEY_HASH_SECRET", hide_env_values = true)]
    key_hash_secret: Option<String>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    conns: ConnArgs,
    /// Serve gRPC over TLS with this certificate chain (PEM); reloaded on change.
    #[arg(long, env = "SLUICE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    grpc_tls_cert: Option<PathBuf>,
    /// The private key of --grpc-tls-cert (PEM).
    #[arg(long, env = "SLUICE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    grpc_tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, env = "SLUICE_GRPC_TLS_CLIENT_CA", requires = "grpc_tls_cert")]
    grpc_tls_client_ca: Option<PathBuf>,
    /// With --grpc-tls-client-ca: the client certificate must also carry this
    /// DNS name or IP address as a subject alternative name (GRPC_CLIENT_TLS_SAN).
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CLIENT_SAN",
        requires = "grpc_tls_client_ca"
    )]
    grpc_tls_client_san: Option<String>,
    /// Threads that serve requests (default: one per CPU core).
    #[arg(long, env = "SLUICE_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Decisions that may wait for the store at once; past it a request is
    /// shed at once (its rule's own on_store_failure deny or allow decides,
    /// else UNAVAILABLE, which Envoy's failure mode decides), except from a
    /// connection under its even share.
    #[arg(long, env = "SLUICE_MAX_PENDING", default_value_t = Settings::default().max_pending)]
    max_pending: usize,
    #[command(flatten)]
    store: StoreArgs,
    /// Export OpenTelemetry traces to this OTLP/gRPC endpoint (e.g.
    /// http://collector:4317); OTEL_EXPORTER_OTLP_ENDPOINT works too. Off by default.
    #[arg(long, env = "SLUICE_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Send the reference's stats to this statsd (host:port, UDP).
    #[arg(long, env = "SLUICE_STATSD_ADDR")]
    statsd_addr: Option<String>,
    /// How often stats are sent to --statsd-addr.
    #[arg(long, env = "SLUICE_STATSD_FLUSH_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    statsd_flush_interval: Duration,
    /// DogStatsD tags sent with every stat (comma list of key:value).
    #[arg(long, env = "SLUICE_STATSD_TAGS", value_delimiter = ',')]
    statsd_tags: Vec<String>,
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter: a level (info, debug, ...) or a tracing directive.
    #[arg(long, env = "SLUICE_LOG_LEVEL", default_value = "info")]
    log_level: String,
}

/// The most one request may carry; more is INVALID_ARGUMENT.
#[derive(Args, Clone)]
struct LimitArgs {
    /// Largest gRPC request message, in bytes.
    #[arg(long, env = "SLUICE_MAX_REQUEST_BYTES", default_value_t = 65_536)]
    max_request_bytes: usize,
    /// Descriptors per request.
    #[arg(long, env = "SLUICE_MAX_DESCRIPTORS", default_value_t = Limits::default().descriptors)]
    max_descriptors: usize,
    /// Entries per descriptor.
    #[arg(long, env = "SLUICE_MAX_ENTRIES", default_value_t = Limits::default().entries)]
    max_entries: usize,
    /// Bytes of an entry key (and of the domain).
    #[arg(long, env = "SLUICE_MAX_KEY_BYTES", default_value_t = Limits::default().key_bytes)]
    max_key_bytes: usize,
    /// Bytes of an entry value.
    #[arg(long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = Limits::default().value_bytes)]
    max_value_bytes: usize,
    /// Bytes of one descriptor's domain, keys and values together.
    #[arg(long, env = "SLUICE_MAX_DESCRIPTOR_BYTES", default_value_t = Limits::default().descriptor_bytes)]
    max_descriptor_bytes: usize,
    /// Hits one request or descriptor may add (hits_addend).
    #[arg(long, env = "SLUICE_MAX_HITS", default_value_t = Limits::default().hits)]
    max_hits: u64,
    /// Distinct detailed_metric label sets in /metrics; more are counted under the rule.
    #[arg(long, env = "SLUICE_MAX_DETAILED_METRICS", default_value_t = MetricLimits::default().detailed_sets)]
    max_detailed_metrics: usize,
    /// Bytes of one detailed_metric rule label; longer ones are counted under the rule.
    #[arg(long, env = "SLUICE_MAX_METRIC_LABEL_BYTES", default_value_t = MetricLimits::default().label_bytes)]
    max_metric_label_bytes: usize,
    /// Keys the console's top of over-limit descriptors keeps (memory is this
    /// many times two generations times 256 bytes at most); 0 turns it off.
    #[arg(long, env = "SLUICE_CONSOLE_TOP_KEYS", default_value_t = MetricLimits::default().top_keys)]
    console_top_keys: usize,
    /// Show client IP addresses in the console's top keys in clear (masked to
    /// their first half by default).
    #[arg(long, env = "SLUICE_CONSOLE_SHOW_ADDRESSES")]
    console_show_addresses: bool,
}

/// What clients may hold on the two listeners.
#[derive(Args, Clone)]
struct ConnArgs {
    /// Open gRPC connections; at the cap a newcomer is seated by closing the
    /// least useful connection (of the peer holding the most).
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTIONS", default_value_t = GrpcLimits::default().conn.max_connections)]
    grpc_max_connections: usize,
    /// gRPC connections one peer (IPv4 address, IPv6 /64) may hold; past it,
    /// its own least useful connection is closed.
    #[arg(long, env = "SLUICE_GRPC_MAX_CONNECTIONS_PER_PEER", default_value_t = GrpcLimits::default().conn.max_per_peer)]
    grpc_max_connections_per_peer: usize,
    /// Requests one peer may have in flight over all its gRPC connections;
    /// past it nothing more is read from that peer until some finish, so a
    /// flood from one address cannot queue ahead of every other Envoy (0:
    /// no bound).
    #[arg(long, env = "SLUICE_GRPC_MAX_IN_FLIGHT_PER_PEER", default_value_t = GrpcLimits::default().conn.max_in_flight_per_peer)]
    grpc_max_in_flight_per_peer: usize,
    /// Close a connection that has not sent its HTTP/2 preface (admin: any
    /// byte; TLS: finished its handshake) within this.
    #[arg(long, env = "SLUICE_HANDSHAKE_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    handshake_timeout: Duration,
    /// Concurrent HTTP/2 streams per gRPC connection.
    #[arg(long, env = "SLUICE_GRPC_MAX_STREAMS", default_value_t = GrpcLimits::default().max_streams)]
    grpc_max_streams: u32,
    /// Streams refused or reset on one gRPC connection before it is closed
    /// with GOAWAY (a client ignoring --grpc-max-streams).
    #[arg(long, env = "SLUICE_GRPC_MAX_RESET_STREAMS", default_value_t = GrpcLimits::default().max_reset_streams)]
    grpc_max_reset_streams: usize,
    /// Close a gRPC connection with no request for this long.
    #[arg(long, env = "SLUICE_GRPC_IDLE_TIMEOUT", default_value = "300s", value_parser = parse_duration)]
    grpc_idle_timeout: Duration,
    /// Interval of HTTP/2 PINGs on gRPC connections.
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    grpc_keepalive_interval: Duration,
    /// Close a gRPC connection whose PING is not answered within this.
    #[arg(long, env = "SLUICE_GRPC_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    grpc_keepalive_timeout: Duration,
    /// Open admin connections; at the cap a newcomer is seated by closing
    /// the least useful connection.
    #[arg(long, env = "SLUICE_ADMIN_MAX_CONNECTIONS", default_value_t = AdminLimits::default().conn.max_connections)]
    admin_max_connections: usize,
    /// Admin connections one peer may hold.
    #[arg(long, env = "SLUICE_ADMIN_MAX_CONNECTIONS_PER_PEER", default_value_t = AdminLimits::default().conn.max_per_peer)]
    admin_max_connections_per_peer: usize,
    /// Close an admin connection that sends nothing for this long.
    #[arg(long, env = "SLUICE_ADMIN_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    admin_idle_timeout: Duration,
    /// Longest time for an admin request's headers to arrive.
    #[arg(long, env = "SLUICE_ADMIN_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    admin_header_timeout: Duration,
    /// A ShouldRateLimit body not whole within this is refused (Envoy sends
    /// it at once).
    #[arg(long, env = "SLUICE_BODY_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    body_timeout: Duration,
    /// Request body bytes received and not yet decoded on one connection;
    /// past it, requests are refused RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_MAX_CONNECTION_BODY_BYTES", default_value_t = BodyLimits::default().per_connection)]
    max_connection_body_bytes: usize,
    /// The same over the process; past it, connections holding more than an
    /// even share are refused.
    #[arg(long, env = "SLUICE_MAX_BODY_BYTES", default_value_t = BodyLimits::default().per_process)]
    max_body_bytes: usize,
    /// Host names accepted in the admin port's Host header besides IP
    /// addresses and localhost (comma list), e.g. a Kubernetes service name.
    #[arg(long, env = "SLUICE_ADMIN_ALLOWED_HOSTS", value_delimiter = ',')]
    admin_allowed_hosts: Vec<String>,
}

impl ConnArgs {
    fn grpc(&self) -> GrpcLimits {
        GrpcLimits {
            conn: ConnLimits {
                max_connections: self.grpc_max_connections,
                max_per_peer: self.grpc_max_connections_per_peer,
                handshake_timeout: self.handshake_timeout,
                max_in_flight_per_peer: self.grpc_max_in_flight_per_peer,
                idle_timeout: self.grpc_idle_timeout,
                // A peer that takes none of our bytes is as dead as one that
                // does not answer a PING.
                write_stall: self.grpc_keepalive_timeout,
            },
            max_streams: self.grpc_max_streams,
            max_reset_streams: self.grpc_max_reset_streams,
            keepalive_interval: self.grpc_keepalive_interval,
            keepalive_timeout: self.grpc_keepalive_timeout,
            body: BodyLimits {
                timeout: self.body_timeout,
                per_connection: self.max_connection_body_bytes,
                per_process: self.max_body_bytes,
            },
        }
    }

    fn admin(&self) -> AdminLimits {
        AdminLimits {
            conn: ConnLimits {
                max_connections: self.admin_max_connections,
                max_per_peer: self.admin_max_connections_per_peer,
                handshake_timeout: self.handshake_timeout,
                max_in_flight_per_peer: 0,
                idle_timeout: self.admin_idle_timeout,
                write_stall: self.admin_idle_timeout,
            },
            header_timeout: self.admin_header_timeout,
            access: AdminAccess {
                allowed_hosts: self
                    .admin_allowed_hosts
                    .iter()
                    .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                    .collect(),
            },
        }
    }
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            descriptors: self.max_descriptors,
            entries: self.max_entries,
            key_bytes: self.max_key_bytes,
            value_bytes: self.max_value_bytes,
            descriptor_bytes: self.max_descriptor_bytes,
            hits: self.max_hits,
        }
    }

    fn metric_limits(&self) -> MetricLimits {
        MetricLimits {
            detailed_sets: self.max_detailed_metrics,
            label_bytes: self.max_metric_label_bytes,
            top_keys: self.console_top_keys,
            show_addresses: self.console_show_addresses,
        }
    }
}

/// Where counters live: memory (the default) or Redis.
#[derive(Args, Clone)]
struct StoreArgs {
    /// Count in Redis: redis://[user:pass@]host:port[/db], or rediss:// for TLS.
    // hide_env_values: the URL may carry a password; --help must not print it.
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        hide_env_values = true,
        conflicts_with = "redis_cluster"
    )]
    redis_url: Option<String>,
    /// Count in a Redis Cluster: comma-separated seed nodes (host:port or URLs).
    #[arg(
        long,
        env = "SLUICE_REDIS_CLUSTER",
        hide_env_values = true,
        value_delimiter = ','
    )]
    redis_cluster: Vec<String>,
    /// Count in the Redis master that Sentinel names: MASTER@HOST:PORT[,HOST:PORT...]
    /// (sentinels may be URLs: the first one's scheme and credentials are the master's).
    #[arg(
        long,
        env = "SLUICE_REDIS_SENTINEL",
        hide_env_values = true,
        conflicts_with_all = ["redis_url", "redis_cluster"]
    )]
    redis_sentinel: Option<String>,
    /// Password of the sentinels themselves (REDIS_SENTINEL_AUTH).
    #[arg(long, env = "SLUICE_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    redis_sentinel_password: Option<String>,
    /// Trust this CA (PEM) for rediss:// instead of the public roots (REDIS_TLS_CACERT).
    #[arg(long, env = "SLUICE_REDIS_TLS_CA")]
    redis_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS to Redis (REDIS_TLS_CLIENT_CERT).
    #[arg(long, env = "SLUICE_REDIS_TLS_CERT", requires = "redis_tls_key")]
    redis_tls_cert: Option<PathBuf>,
    /// The key of --redis-tls-cert (PEM) (REDIS_TLS_CLIENT_KEY).
    #[arg(long, env = "SLUICE_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    redis_tls_key: Option<PathBuf>,
    /// Count in memcached instead: host:port[,host:port...], keys spread over
    /// them (the reference's BACKEND_TYPE=memcache with MEMCACHE_HOST_PORT).
    #[arg(long, env = "SLUICE_MEMCACHE_SERVERS", value_delimiter = ',', conflicts_with_all = ["redis_url", "redis_cluster", "redis_sentinel"])]
    memcache_servers: Vec<String>,
    /// Connections in the Redis pool (each one multiplexed).
    #[arg(long, env = "SLUICE_REDIS_POOL_SIZE", default_value_t = 4)]
    redis_pool_size: u32,
    /// Run the Redis connections and the batcher on a thread of their own,
    /// so a flood queued on the workers is never timed as a slow Redis.
    #[arg(long, env = "SLUICE_REDIS_IO_THREAD", default_value_t = true, action = clap::ArgAction::Set)]
    redis_io_thread: bool,
    /// Longest wait for Redis per request before the failure policy decides.
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT", default_value = "20ms", value_parser = parse_duration)]
    redis_timeout: Duration,
    /// Prepended to every Redis key.
    #[arg(long, env = "SLUICE_CACHE_KEY_PREFIX", default_value = "")]
    cache_key_prefix: String,
    /// Redis key layout: sluice (collision-free, values hashed) or envoyproxy
    /// (the reference's keys, to share counters during a migration).
    #[arg(long, env = "SLUICE_KEY_FORMAT", value_enum, default_value_t = KeyFormat::Sluice)]
    key_format: KeyFormat,
    /// What decides when Redis fails or times out.
    #[arg(long, env = "SLUICE_STORE_FAILURE", value_enum, default_value_t = FailurePolicy::Fallback)]
    store_failure: FailurePolicy,
    /// Counters remembered as over their limit (answered without Redis); 0 disables.
    #[arg(long, env = "SLUICE_LOCAL_CACHE_SIZE", default_value_t = 100_000)]
    local_cache_size: usize,
    /// Counters held in memory (the memory store, or the fallback while Redis
    /// is down); when full, the least spent are dropped first.
    #[arg(long, env = "SLUICE_MAX_COUNTERS", default_value_t = DEFAULT_MAX_COUNTERS)]
    max_counters: usize,
}

impl StoreArgs {
    fn build(&self, metrics: &Arc<Metrics>) -> anyhow::Result<Arc<dyn Store>> {
        let target = match (&self.redis_url, self.redis_cluster.is_empty()) {
            (Some(url), _) => Target::Single(url.clone()),
            (None, false) => Target::Cluster(self.redis_cluster.clone()),
            (None, true) if self.redis_sentinel.is_some() => {
                let spec = self.redis_sentinel.as_deref().unwrap_or_default();
                Target::Sentinel(
                    Sentinel::parse(spec, self.redis_sentinel_password.clone())
                        .map_err(|e| anyhow::anyhow!("--redis-sentinel: {e}"))?,
                )
            }
            (None, true) if !self.memcache_servers.is_empty() => {
                let memcache = MemcacheStore::new(MemcacheConfig {
                    servers: self.memcache_servers.clone(),
                    prefix: self.cache_key_prefix.clone(),
                    pool_size: self.redis_pool_size,
                    connect_timeout: Duration::from_secs(1),
                })?;
                return Ok(Arc::new(Resilient::new(
                    memcache,
                    self.resilient_options(),
                    metrics.clone(),
                )));
            }
            (None, true) => return Ok(Arc::new(MemoryStore::with_capacity(self.max_counters))),
        };
        let redis = RedisStore::new(RedisConfig {
            target,
            pool_size: self.redis_pool_size,
            prefix: self.cache_key_prefix.clone(),
            key_format: self.key_format,
            connect_timeout: Duration::from_secs(1),
            tls: (self.redis_tls_ca.is_some() || self.redis_tls_cert.is_some()).then(|| RedisTls {
                ca: self.redis_tls_ca.clone(),
                cert: self.redis_tls_cert.clone().zip(self.redis_tls_key.clone()),
            }),
            io_thread: self.redis_io_thread,
        })?;
        Ok(Arc::new(Resilient::new(
            redis,
            self.resilient_options(),
            metrics.clone(),
        )))
    }

    fn resilient_options(&self) -> ResilientOptions {
        ResilientOptions {
            policy: self.store_failure,
            timeout: self.redis_timeout,
            cache_size: self.local_cache_size,
            max_counters: self.max_counters,
        }
    }
}

#[derive(Args)]
struct CheckArgs {
    /// The config directory to validate.
    dir: PathBuf,
    /// Also print every rule with its limit and shape, as /rlconfig does.
    #[arg(long)]
    rules: bool,
    /// Fail on rules a quota-mode bucket id (a map, with no order) could
    /// match in two ways; without it they are printed as warnings.
    #[arg(long)]
    quota: bool,
    #[command(flatten)]
    config_args: ConfigArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    n.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Duration::from_secs_f64(v * scale))
        .ok_or_else(|| format!("'{s}' is not a duration such as 10s or 500ms"))
}

/// `key=value` (or `key:value`) items, trimmed.
fn pairs(items: &[String]) -> impl Iterator<Item = (String, String)> + '_ {
    items.iter().filter_map(|h| {
        let (k, v) = h.split_once('=').or_else(|| h.split_once(':'))?;
        Some((k.trim().to_owned(), v.trim().to_owned()))
    })
}

fn statsd_config(args: &ServeArgs) -> anyhow::Result<Option<StatsdConfig>> {
    let Some(addr) = &args.statsd_addr else {
        return Ok(None);
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| format!("--statsd-addr '{addr}' is not a reachable host:port"))?;
    Ok(Some(StatsdConfig {
        addr,
        interval: args.statsd_flush_interval,
        tags: args
            .statsd_tags
            .iter()
            .map(|t| t.trim().to_owned())
            .collect(),
        // The reference's DogStatsD mogrifiers, from its own variables.
        mogrifiers: Mogrifier::from_env().map_err(|e| anyhow::anyhow!(e))?,
    }))
}

fn parse_ratio(s: &str) -> Result<f32, String> {
    s.parse::<f32>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("'{s}' is not a ratio between 0 and 1"))
}

fn main() -> ExitCode {
    // Started as the reference is (`/bin/ratelimit` in the image, Envoy
    // Gateway's command): its environment decides, not sluice's flags.
    let invoked = std::env::args_os().next().unwrap_or_default();
    let as_ratelimit = Path::new(&invoked).file_name() == Some(OsStr::new("ratelimit"));
    if as_ratelimit && std::env::args_os().len() == 1 {
        return finish(ratelimit());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Check(args)) => check(&args),
        Some(Command::Serve(args)) => serve(*args, &[]),
        Some(Command::Bench(args)) => bench(args),
        Some(Command::Health(args)) => health(&args),
        Some(Command::Ratelimit) => ratelimit(),
        None => serve(cli.serve, &[]),
    };
    finish(result)
}

fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `ratelimit` mode: the reference's environment as sluice's flags.
fn ratelimit() -> anyhow::Result<ExitCode> {
    let t = reference_env::translate(std::env::vars()).context("ratelimit mode")?;
    for (k, v) in &t.env {
        // SAFETY: nothing else runs yet: the runtime and its threads start
        // in serve, after this.
        unsafe { std::env::set_var(k, v) };
    }
    let args = std::iter::once("sluice".to_owned()).chain(t.args);
    let cli = Cli::try_parse_from(args).context("ratelimit mode: the translated flags")?;
    match cli.command {
        Some(Command::Serve(args)) => serve(*args, &t.notes),
        _ => anyhow::bail!("ratelimit mode: the translation is not a serve command"),
    }
}

fn health(args: &HealthArgs) -> anyhow::Result<ExitCode> {
    let addr = args
        .admin_addr
        .first()
        .copied()
        .context("--admin-addr: no address")?;
    match health_probe::check(health_probe::local(addr), "/healthcheck", args.timeout) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!("sluice health: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn load_options(c: &ConfigArgs) -> LoadOptions {
    LoadOptions {
        merge_domains: c.merge_domains,
        max_files: c.max_rule_files,
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    match load_dir(
        &args.dir,
        load_options(&args.config_args),
        &Metrics::default(),
    ) {
        Ok(rules) => {
            for (domain, count) in rules.summary() {
                println!("{domain}: {count} rules");
            }
            if args.rules {
                for line in rules.dump() {
                    println!("  {line}");
                }
            }
            let ambiguous = rules.quota_ambiguities();
            let kind = if args.quota { "error" } else { "warning" };
            for line in &ambiguous {
                eprintln!("{kind}: quota mode: {line}");
            }
            if args.quota && !ambiguous.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The gRPC listener: `--grpc-uds` when given, else `--grpc-addr`.
async fn bind_grpc(args: &ServeArgs) -> anyhow::Result<GrpcListener> {
    let Some(path) = &args.grpc_uds else {
        let tcp = TcpListener::bind(args.grpc_addr)
            .await
            .with_context(|| format!("binding --grpc-addr {}", args.grpc_addr))?;
        return Ok(tcp.into());
    };
    // A socket left by a sluice that did not exit cleanly is replaced; any
    // other file there is an error, never deleted.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt as _;
        anyhow::ensure!(
            meta.file_type().is_socket(),
            "--grpc-uds {}: exists and is not a socket",
            path.display()
        );
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    // Bound under a private name, given its mode, then moved into place: no
    // client ever finds the socket with the umask's permissions.
    let staging = path.with_file_name(format!(
        ".{}.{}",
        path.file_name()
            .map_or("sluice.sock".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&staging);
    let unix = tokio::net::UnixListener::bind(&staging)
        .with_context(|| format!("binding --grpc-uds {}", path.display()))?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            &staging,
            std::fs::Permissions::from_mode(args.grpc_uds_mode),
        )
        .with_context(|| format!("--grpc-uds-mode on {}", staging.display()))?;
    }
    std::fs::rename(&staging, path)
        .with_context(|| format!("moving the socket to {}", path.display()))?;
    Ok(GrpcListener::Unix(unix, path.clone()))
}

/// An octal file mode such as `660` or `0600`.
async fn bind_admin(addrs: &[SocketAddr]) -> anyhow::Result<Vec<TcpListener>> {
    if addrs.is_empty() {
        anyhow::bail!("--admin-addr: at least one address");
    }
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let l = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --admin-addr {addr}"))?;
        listeners.push(l);
    }
    Ok(listeners)
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("'{s}' is not an octal mode such as 660"))
}

fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let plan = sluice::bench::Plan {
        target: args.target,
        domain: args.domain,
        descriptors: args.descriptors,
        keys: args.keys,
        concurrency: args.concurrency,
        connections: args.connections,
        duration: args.duration,
        requests: args.requests,
        rate: args.rate,
    };
    // One client thread: on a small machine shared with the server, more
    // client threads mostly steal the server's cores and add jitter.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(sluice::bench::run(plan))?;
    let text = if args.json {
        report.json()
    } else {
        report.to_string()
    };
    // A reader that went away (`| head -1`) is not an error worth a panic.
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("writing the report")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Logs on stderr, and traces over OTLP when asked for (inside the runtime:
/// the exporter needs it). Returns the tracer to flush at exit.
fn init_logging(args: &ServeArgs) -> anyhow::Result<Option<Telemetry>> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("--log-level '{}'", args.log_level))?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_ansi(false).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let endpoint = args.otlp_endpoint.as_deref();
    let wanted = endpoint.is_some() || std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let (telemetry, otel) = if wanted {
        let (t, layer) = Telemetry::start(endpoint)?;
        (Some(t), Some(layer))
    } else {
        (None, None)
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(telemetry)
}

/// Serves; `notes` are said once logging is up (ratelimit mode's variables
/// that change nothing).
fn serve(args: ServeArgs, notes: &[String]) -> anyhow::Result<ExitCode> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let telemetry = {
        let _inside = runtime.enter();
        init_logging(&args)?
    };
    for note in notes {
        info!("ratelimit mode: {note}");
    }
    let metrics = Arc::new(Metrics::with_limits(args.limits.metric_limits()));
    // Invalid rules at startup: fail before listening.
    let rules = match &args.config_xds {
        Some(server) => Arc::new(LiveRules::for_xds(
            server,
            load_options(&args.config_args),
            metrics.clone(),
        )),
        None => match LiveRules::load(
            &args.config,
            load_options(&args.config_args),
            metrics.clone(),
        ) {
            Ok(rules) => Arc::new(rules),
            Err(e) => {
                eprintln!("{e}");
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let tls = match (&args.grpc_tls_cert, &args.grpc_tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            Tls::new(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.grpc_tls_client_ca.clone(),
                client_san: args.grpc_tls_client_san.clone(),
            })
            .context("--grpc-tls-*")?,
        )),
        _ => None,
    };
    let result = runtime.block_on(async move {
        let listeners = Listeners {
            grpc: bind_grpc(&args).await?,
            admin: bind_admin(&args.admin_addr).await?,
        };
        let settings = Settings {
            global_shadow: args.shadow_mode,
            dynamic_metadata: args.response_dynamic_metadata,
            privacy: Privacy::new(
                args.email_keys.clone(),
                args.key_hash_secret.clone().map(String::into_bytes),
            ),
            limits: args.limits.limits(),
            response_headers: args.response_headers,
            knobs: Knobs {
                quota_mode: args.quota_mode,
                near_ratio: args.near_limit_ratio,
                stop_when_over: args.stop_increment_when_over_limit,
            },
            max_pending: args.max_pending,
        };
        let store = args.store.build(&metrics)?;
        let limiter = RateLimiter::new(rules.clone(), store, metrics.clone(), settings);
        for (domain, count) in rules.current().rules.summary() {
            info!(domain, rules = count, "domain loaded");
        }
        for line in args.quota.options().store_rate_shortfalls() {
            warn!("quota mode: {line}; entries may expire while Envoys hold shares");
        }
        let opts = ServeOptions {
            grace: args.shutdown_grace,
            watch_config: !args.no_watch,
            max_request_bytes: args.limits.max_request_bytes,
            tls,
            grpc: args.conns.grpc(),
            admin: args.conns.admin(),
            healthcheck: HealthcheckPolicy {
                needs_rules: args.healthcheck_needs_rules,
                needs_store_now: args.healthcheck_needs_store,
            },
            statsd: statsd_config(&args)?,
            quota: args.quota.options(),
            xds: args.config_xds.clone().map(|server| XdsConfig {
                headers: pairs(&args.xds_headers)
                    .map(|(k, v)| (k.to_ascii_lowercase(), v))
                    .collect(),
                node_metadata: pairs(&args.xds_node_metadata).collect(),
                tls: args.xds_tls_ca.clone().map(|ca| XdsTls {
                    ca,
                    cert: args.xds_tls_cert.clone().zip(args.xds_tls_key.clone()),
                    server_name: args.xds_tls_server_name.clone(),
                }),
                keepalive: args.xds_keepalive_interval,
                keepalive_timeout: args.xds_keepalive_timeout,
                min_apply_interval: args.xds_min_apply_interval,
                ..XdsConfig::new(server, args.xds_node_id.clone())
            }),
        };
        server::run(
            listeners,
            limiter,
            server::signal(),
            opts,
            CancellationToken::new(),
        )
        .await?;
        if let Some(path) = &args.grpc_uds {
            // Ours, bound at startup: the next start finds no stale socket.
            let _ = std::fs::remove_file(path);
        }
        // The count lets an operator (and the shutdown test) check that every
        // request sluice decided was answered.
        info!(answered = metrics.requests_total(), "sluice stopped");
        Ok(ExitCode::SUCCESS)
    });
    if let Some(t) = telemetry {
        let _inside = runtime.enter();
        t.shutdown();
    }
    // A reload still running on a blocking thread (a huge or slow rule
    // directory) must not hold the exit past the grace period.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}
