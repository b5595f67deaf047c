//! Bounds on what one request, connection or peer may take.

use clap::Args;

use super::heading;

use super::Span;
use crate::admin::{AdminAccess, AdminBounds};
use crate::conn::ConnBounds;
use crate::metrics::MetricBounds;
use crate::request::Bounds;
use crate::server::{BodyBounds, GrpcBounds};

/// The most one request may carry; more is INVALID_ARGUMENT.
#[derive(Args, Clone)]
pub struct BoundArgs {
    /// Largest gRPC request message, in bytes.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_REQUEST_BYTES", default_value_t = 65_536)]
    pub(crate) max_request_bytes: usize,
    /// Descriptors per request.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_DESCRIPTORS", default_value_t = Bounds::default().descriptors)]
    pub(crate) max_descriptors: usize,
    /// Entries per descriptor.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_ENTRIES", default_value_t = Bounds::default().entries)]
    pub(crate) max_entries: usize,
    /// Bytes of an entry key (and of the domain).
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_KEY_BYTES", default_value_t = Bounds::default().key_bytes)]
    pub(crate) max_key_bytes: usize,
    /// Bytes of an entry value.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_VALUE_BYTES", default_value_t = Bounds::default().value_bytes)]
    pub(crate) max_value_bytes: usize,
    /// Bytes of one descriptor's domain, keys and values together.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_DESCRIPTOR_BYTES", default_value_t = Bounds::default().descriptor_bytes)]
    pub(crate) max_descriptor_bytes: usize,
    /// Hits one request or descriptor may add (hits_addend).
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_HITS", default_value_t = Bounds::default().hits)]
    pub(crate) max_hits: u64,
    /// Distinct detailed_metric label sets in /metrics; more are counted under the rule.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_DETAILED_METRICS", default_value_t = MetricBounds::default().detailed_sets)]
    pub(crate) max_detailed_metrics: usize,
    /// Bytes of one detailed_metric rule label; longer ones are counted under the rule.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_METRIC_LABEL_BYTES", default_value_t = MetricBounds::default().label_bytes)]
    pub(crate) max_metric_label_bytes: usize,
    /// Rules whose series /metrics shows: only rules that have counted
    /// anything appear, at most this many (the busiest); the rest are
    /// counted in sluice_rule_series_omitted.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_RULE_SERIES", default_value_t = MetricBounds::default().rule_series)]
    pub(crate) max_rule_series: usize,
    /// Rules that keep a usage history (/api/usage, sluice advise) at once,
    /// about 100 KiB each once they have traffic; later ones are not tracked
    /// and counted in sluice_rule_usage_refused_total.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_MAX_USAGE_RULES", default_value_t = MetricBounds::default().usage_rules)]
    pub(crate) max_usage_rules: usize,
    /// Keys the console's top of over-limit descriptors keeps (memory is this
    /// many times two generations times 256 bytes at most); 0 turns it off.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_CONSOLE_TOP_KEYS", default_value_t = crate::console::TOP_KEYS)]
    pub(crate) console_top_keys: usize,
    /// Show client IP addresses in the console's top keys in clear (masked to
    /// their first half by default).
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_CONSOLE_SHOW_ADDRESSES")]
    pub(crate) console_show_addresses: bool,
    /// Rules the console graphs at once (180 seconds of rates, about 2 KiB
    /// each): only rules with traffic in the last 3 minutes hold one, and
    /// past this many a busier newcomer takes a quieter one's place.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_CONSOLE_MAX_RULES", default_value_t = crate::console::GRAPHED)]
    pub(crate) console_max_rules: usize,
    /// Configured rules the console looks at each second for traffic: with
    /// more, a quiet rule that wakes is graphed within rules / this seconds
    /// (10 at a million), and the look costs about 9 ms of a core a second.
    #[arg(help_heading = heading::BOUNDS, long, env = "SLUICE_CONSOLE_RULES_PER_SECOND", default_value_t = crate::console::WALKED as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) console_rules_per_second: u32,
}

/// What clients may hold on the two listeners.
#[derive(Args, Clone)]
pub struct ConnArgs {
    /// Open gRPC connections; at the cap a newcomer is seated by closing the
    /// least useful connection (of the peer holding the most).
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_CONNECTIONS", default_value_t = GrpcBounds::default().conn.max_connections)]
    pub(crate) grpc_max_connections: usize,
    /// gRPC connections one peer (IPv4 address, IPv6 /64) may hold; past it,
    /// its own least useful connection is closed.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_CONNECTIONS_PER_PEER", default_value_t = GrpcBounds::default().conn.max_per_peer)]
    pub(crate) grpc_max_connections_per_peer: usize,
    /// Requests one peer may have in flight over all its gRPC connections;
    /// past it nothing more is read from that peer until some finish, so a
    /// flood from one address cannot queue ahead of every other Envoy (0:
    /// no bound).
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_IN_FLIGHT_PER_PEER", default_value_t = GrpcBounds::default().conn.max_in_flight_per_peer)]
    pub(crate) grpc_max_in_flight_per_peer: usize,
    /// Close a connection that has not sent its HTTP/2 preface (admin: any
    /// byte; TLS: finished its handshake) within this.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_HANDSHAKE_TIMEOUT", default_value_t = Span(GrpcBounds::default().conn.handshake_timeout))]
    pub(crate) handshake_timeout: Span,
    /// Concurrent HTTP/2 streams per gRPC connection.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_STREAMS", default_value_t = GrpcBounds::default().max_streams)]
    pub(crate) grpc_max_streams: u32,
    /// Streams refused or reset on one gRPC connection before it is closed
    /// with GOAWAY (a client ignoring --grpc-max-streams).
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_RESET_STREAMS", default_value_t = GrpcBounds::default().max_reset_streams)]
    pub(crate) grpc_max_reset_streams: usize,
    /// Streams a client reset before sluice accepted them, waiting on one
    /// gRPC connection at once, before it is closed with GOAWAY (the
    /// rapid-reset guard; a sluice stalled past Envoy's timeout reads Envoy's
    /// requests and their resets together, so not h2's 20).
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_MAX_PENDING_RESETS", default_value_t = GrpcBounds::default().max_pending_resets)]
    pub(crate) grpc_max_pending_resets: usize,
    /// Close a gRPC connection with no request for this long.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_IDLE_TIMEOUT", default_value_t = Span(GrpcBounds::default().conn.idle_timeout))]
    pub(crate) grpc_idle_timeout: Span,
    /// Interval of HTTP/2 PINGs on gRPC connections.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_KEEPALIVE_INTERVAL", default_value_t = Span(GrpcBounds::default().keepalive_interval))]
    pub(crate) grpc_keepalive_interval: Span,
    /// Close a gRPC connection whose PING is not answered within this.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_GRPC_KEEPALIVE_TIMEOUT", default_value_t = Span(GrpcBounds::default().keepalive_timeout))]
    pub(crate) grpc_keepalive_timeout: Span,
    /// Open admin connections; at the cap a newcomer is seated by closing
    /// the least useful connection.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_ADMIN_MAX_CONNECTIONS", default_value_t = AdminBounds::default().conn.max_connections)]
    pub(crate) admin_max_connections: usize,
    /// Admin connections one peer may hold.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_ADMIN_MAX_CONNECTIONS_PER_PEER", default_value_t = AdminBounds::default().conn.max_per_peer)]
    pub(crate) admin_max_connections_per_peer: usize,
    /// Close an admin connection that sends nothing for this long.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_ADMIN_IDLE_TIMEOUT", default_value_t = Span(AdminBounds::default().conn.idle_timeout))]
    pub(crate) admin_idle_timeout: Span,
    /// Longest time for an admin request's headers to arrive.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_ADMIN_HEADER_TIMEOUT", default_value_t = Span(AdminBounds::default().header_timeout))]
    pub(crate) admin_header_timeout: Span,
    /// A ShouldRateLimit body not whole within this is refused (Envoy sends
    /// it at once).
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_BODY_TIMEOUT", default_value_t = Span(BodyBounds::default().timeout))]
    pub(crate) body_timeout: Span,
    /// Request body bytes received and not yet decoded on one connection;
    /// past it, requests are refused RESOURCE_EXHAUSTED.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_MAX_CONNECTION_BODY_BYTES", default_value_t = BodyBounds::default().per_connection)]
    pub(crate) max_connection_body_bytes: usize,
    /// The same over the process; past it, connections holding more than an
    /// even share are refused.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_MAX_BODY_BYTES", default_value_t = BodyBounds::default().per_process)]
    pub(crate) max_body_bytes: usize,
    /// Host names accepted in the admin port's Host header besides IP
    /// addresses and localhost (comma list), e.g. a Kubernetes service name.
    #[arg(help_heading = heading::CONNECTIONS, long, env = "SLUICE_ADMIN_ALLOWED_HOSTS", value_delimiter = ',')]
    pub(crate) admin_allowed_hosts: Vec<String>,
    /// A file holding the token the counters endpoints require (as
    /// `Authorization: Bearer`), read again when it changes; without it they
    /// answer loopback peers only.
    #[arg(help_heading = heading::START, long, env = "SLUICE_ADMIN_TOKEN_FILE")]
    pub(crate) admin_token_file: Option<std::path::PathBuf>,
}

impl ConnArgs {
    pub(crate) fn grpc(&self) -> GrpcBounds {
        GrpcBounds {
            conn: ConnBounds {
                max_connections: self.grpc_max_connections,
                max_per_peer: self.grpc_max_connections_per_peer,
                handshake_timeout: self.handshake_timeout.0,
                max_in_flight_per_peer: self.grpc_max_in_flight_per_peer,
                idle_timeout: self.grpc_idle_timeout.0,
                // A peer that takes none of our bytes is as dead as one that
                // does not answer a PING.
                write_stall: self.grpc_keepalive_timeout.0,
            },
            max_streams: self.grpc_max_streams,
            max_reset_streams: self.grpc_max_reset_streams,
            max_pending_resets: self.grpc_max_pending_resets,
            keepalive_interval: self.grpc_keepalive_interval.0,
            keepalive_timeout: self.grpc_keepalive_timeout.0,
            body: BodyBounds {
                timeout: self.body_timeout.0,
                per_connection: self.max_connection_body_bytes,
                per_process: self.max_body_bytes,
            },
        }
    }

    pub(crate) fn admin(&self) -> AdminBounds {
        AdminBounds {
            conn: ConnBounds {
                max_connections: self.admin_max_connections,
                max_per_peer: self.admin_max_connections_per_peer,
                handshake_timeout: self.handshake_timeout.0,
                max_in_flight_per_peer: 0,
                idle_timeout: self.admin_idle_timeout.0,
                write_stall: self.admin_idle_timeout.0,
            },
            header_timeout: self.admin_header_timeout.0,
            access: AdminAccess {
                allowed_hosts: self
                    .admin_allowed_hosts
                    .iter()
                    .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                    .collect(),
                token_file: self.admin_token_file.clone(),
            },
        }
    }
}

impl BoundArgs {
    pub(crate) fn limits(&self) -> Bounds {
        Bounds {
            descriptors: self.max_descriptors,
            entries: self.max_entries,
            key_bytes: self.max_key_bytes,
            value_bytes: self.max_value_bytes,
            descriptor_bytes: self.max_descriptor_bytes,
            hits: self.max_hits,
        }
    }

    /// The console's top over-limit keys, under these bounds.
    pub(crate) fn console(&self) -> crate::console::Console {
        crate::console::Console::new(
            self.console_top_keys,
            self.console_show_addresses,
            self.console_max_rules,
            self.console_rules_per_second as usize,
        )
    }

    pub(crate) fn metric_limits(&self) -> MetricBounds {
        MetricBounds {
            detailed_sets: self.max_detailed_metrics,
            label_bytes: self.max_metric_label_bytes,
            rule_series: self.max_rule_series,
            usage_rules: self.max_usage_rules,
        }
    }
}
