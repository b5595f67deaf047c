//! The command line: clap's groups as the README groups the flags, and the
//! only place flags become typed settings. `main` parses and dispatches;
//! [`crate::app`] builds and runs what the settings describe.

mod bounds;
mod rules;
mod serve;
mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use bounds::{BoundArgs, ConnArgs};

/// The headings `serve --help` groups its flags under, the few most users
/// set first; the book's flag table (docs/src/reference/command-line.md)
/// has a section for each, in this order.
pub(crate) mod heading {
    pub(crate) const START: &str = "Start here";
    pub(crate) const RULES: &str = "Rules";
    pub(crate) const XDS: &str = "Rules over xDS";
    pub(crate) const STORE: &str = "Store";
    pub(crate) const FAILURE: &str = "Failure and shedding";
    pub(crate) const DECISIONS: &str = "Decisions and answers";
    pub(crate) const QUOTA: &str = "Quota mode (rate_limit_quota)";
    pub(crate) const LISTENERS: &str = "Listeners and lifecycle";
    pub(crate) const TLS: &str = "TLS";
    pub(crate) const BOUNDS: &str = "Bounds";
    pub(crate) const CONNECTIONS: &str = "Connections";
    pub(crate) const OBSERVABILITY: &str = "Observability";
    pub(crate) const PRIVACY: &str = "Privacy";
}
pub use rules::ConfigArgs;
pub use serve::{QuotaArgs, ServeArgs};
pub use store::StoreArgs;

/// A rate-limit service for Envoy, compatible with envoyproxy/ratelimit configs.
#[derive(Parser)]
#[command(name = "sluice", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Where `serve --help` sends a reader who runs envoyproxy/ratelimit's
/// environment today.
const REFERENCE_ENV_HELP: &str = "The reference's environment: `sluice ratelimit` serves from \
envoyproxy/ratelimit's variables (REDIS_URL, RUNTIME_ROOT, USE_STATSD, ...) as its /bin/ratelimit \
does; the book's migration table maps each to the flags above.";

#[derive(Subcommand)]
pub enum Command {
    /// Serve the rules (the default when no command is given).
    #[command(after_help = REFERENCE_ENV_HELP)]
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
    /// Look a client's counters up, reset them, or list who is refused now,
    /// through a running sluice's admin port.
    Counters(CountersArgs),
    /// Per rule, how keys really use it and the limits that would refuse
    /// 0.1%, 1% and 5% of them, from a running sluice's admin port.
    Advise(AdviseArgs),
}

/// Where the admin clients (`sluice counters`, `sluice advise`) ask, and
/// how they print the answer.
#[derive(Args)]
pub struct AdminClient {
    /// The admin port, as http://host:port.
    #[arg(
        long,
        global = true,
        env = "SLUICE_ADMIN_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub(crate) admin: String,
    /// Print the answer's JSON instead of a table.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Longest wait for the answer.
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

/// `sluice advise`.
#[derive(Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub(crate) client: AdminClient,
    /// Only this domain.
    #[arg(long)]
    pub(crate) domain: Option<String>,
    /// Another instance sharing the store (its admin port, as
    /// http://host:port; repeat for each): each instance counts its share
    /// of the fleet's usage, so the figures are summed over --admin and
    /// these.
    #[arg(long, value_name = "URL")]
    pub(crate) also: Vec<String>,
}

/// `sluice counters show|reset|top`.
#[derive(Args)]
pub struct CountersArgs {
    #[command(subcommand)]
    pub(crate) action: CountersAction,
    #[command(flatten)]
    pub(crate) client: AdminClient,
    /// A file holding the admin token (else SLUICE_ADMIN_TOKEN; neither: no
    /// token, which a sluice without --admin-token-file accepts on loopback).
    #[arg(long, global = true)]
    pub(crate) token_file: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum CountersAction {
    /// What the descriptors meet now and why; spends nothing.
    Show(CounterTarget),
    /// Set every counter the descriptors use back to empty.
    Reset(CounterTarget),
    /// The keys refused most lately (in clear with the token).
    Top,
}

#[derive(Args)]
pub struct CounterTarget {
    #[arg(long)]
    pub(crate) domain: String,
    /// A descriptor as key=value[,key=value...]; repeat for several.
    #[arg(long = "descriptor", required = true)]
    pub(crate) descriptors: Vec<String>,
}

#[derive(Args)]
pub struct HealthArgs {
    /// The admin address (the first of --admin-addr's list); an unspecified
    /// address is reached on loopback.
    #[arg(long, env = "SLUICE_ADMIN_ADDR", default_value = "127.0.0.1:8080", value_delimiter = ',', num_args = 1..)]
    pub(crate) admin_addr: Vec<SocketAddr>,
    /// Longest wait for the answer.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

#[derive(Args)]
pub struct BenchArgs {
    /// host:port of the rate-limit service's gRPC listener.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(crate) target: String,
    #[arg(long, default_value = "api")]
    pub(crate) domain: String,
    /// A descriptor as key=value[,key=value...]; the placeholder n in braces
    /// (as in ip=10.0.0.{ n } without the spaces) in a value becomes one of
    /// --keys distinct values. Repeat for several descriptors per request.
    #[arg(long = "descriptor", required = true)]
    pub(crate) descriptors: Vec<crate::loadgen::Template>,
    // clap reads the placeholder's braces as a line break in help text,
    // so help never spells it.
    /// Distinct values of the placeholder, taken in turn.
    #[arg(long, default_value_t = 1)]
    pub(crate) keys: u64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// HTTP/2 connections to spread them over.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,
    /// How long to run, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Stop after this many requests (if sooner than --duration).
    #[arg(long)]
    pub(crate) requests: Option<u64>,
    /// Send at this fixed rate (requests/s) instead of as fast as possible.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Print one line of JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write every request to this file, one line each in the order
    /// they were due: microseconds from the start it was due (or sent),
    /// then its latency in microseconds.
    #[arg(long)]
    pub(crate) samples: Option<PathBuf>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The config directory to validate.
    pub(crate) dir: PathBuf,
    /// Also print every rule with its limit and shape, as /rlconfig does.
    #[arg(long)]
    pub(crate) rules: bool,
    /// Fail on rules a quota-mode bucket id (a map, with no order) could
    /// match in two ways; without it they are printed as warnings.
    #[arg(long)]
    pub(crate) quota: bool,
    /// Also check an Envoy config against the rules (a bootstrap in YAML or
    /// JSON, or an admin /config_dump): what each route sends, the rule it
    /// meets, and the holes. Repeat for several files.
    #[arg(long)]
    pub(crate) envoy: Vec<PathBuf>,
    /// The Envoy the --envoy files are for (e.g. 1.39): what the config
    /// asks that this Envoy refuses or ignores is an error. A /config_dump
    /// says its own.
    #[arg(long, requires = "envoy")]
    pub(crate) envoy_version: Option<crate::envoy_check::EnvoyVersion>,
    /// With --envoy: the report as JSON, for CI.
    #[arg(long)]
    pub(crate) json: bool,
    /// Read the directory as rules a control plane pushes, shaped by this
    /// --xds-overlay directory: the overlay is checked, applied, and each of
    /// its entries that meets no rule is printed as a warning.
    #[arg(long)]
    pub(crate) xds_overlay: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) config_args: ConfigArgs,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A duration flag, written `10s`, `500ms` or `1.5s`, and shown the same way
/// in `--help`: a default is then the library's own value (`default_value_t
/// = Span(QuotaOptions::default().assignment_ttl)`), written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Duration);

impl std::str::FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Span, String> {
        parse_duration(s).map(Span)
    }
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
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
pub(crate) fn pairs(items: &[String]) -> impl Iterator<Item = (String, String)> + '_ {
    items.iter().filter_map(|h| {
        let (k, v) = h.split_once('=').or_else(|| h.split_once(':'))?;
        Some((k.trim().to_owned(), v.trim().to_owned()))
    })
}

pub(crate) fn parse_ratio(s: &str) -> Result<f32, String> {
    s.parse::<f32>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("'{s}' is not a ratio between 0 and 1"))
}

pub(crate) fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("'{s}' is not an octal mode such as 660"))
}

#[cfg(test)]
mod tests;
