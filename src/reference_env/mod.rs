//! `ratelimit` mode: sluice started where envoyproxy/ratelimit runs, with
//! only the image changed. Envoy Gateway's Deployment runs
//! `command: ["/bin/ratelimit"]` and configures it entirely through the
//! reference's environment variables; started under that name, sluice reads
//! the same variables, with the reference's defaults, and turns them into its
//! own flags (the one way settings enter `serve`).
//!
//! Every variable of the reference's settings list is one of three kinds:
//! read (turned into a flag), moot (what it tunes does not exist in sluice;
//! accepted and said once at startup), or refused when set to anything but
//! the reference's default, with an error naming it: sluice never silently
//! does something other than what a variable asks.

mod store;
mod table;
#[cfg(test)]
pub(crate) mod tests;
mod traces;

use std::collections::BTreeMap;

pub use table::{MOOT, UNSUPPORTED};

/// Why the environment cannot be served as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("{var}={value}: {why}")]
    Unsupported {
        var: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("{var}={value}: {why}")]
    Invalid {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error("{var} must be set: {why}")]
    Missing {
        var: &'static str,
        why: &'static str,
    },
}

/// What the environment asks for, as sluice's own command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// `serve` and its flags.
    pub args: Vec<String>,
    /// Environment sluice's tracing reads (`OTEL_*`), from `TRACING_*`.
    pub env: Vec<(String, String)>,
    /// Lines for the startup log: variables accepted that change nothing.
    pub notes: Vec<String>,
}

/// The environment, read with the reference's defaults.
pub(crate) struct Env(BTreeMap<String, String>);

impl Env {
    pub(crate) fn new(vars: impl IntoIterator<Item = (String, String)>) -> Env {
        Env(vars.into_iter().collect())
    }

    /// The variable as set (empty counts as unset, as envconfig does).
    pub(crate) fn set(&self, var: &str) -> Option<&str> {
        self.0
            .get(var)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn or<'a>(&'a self, var: &str, default: &'a str) -> &'a str {
        self.set(var).unwrap_or(default)
    }

    /// A boolean as Go's `strconv.ParseBool` reads it.
    fn flag(&self, var: &'static str, default: bool) -> Result<bool, EnvError> {
        match self.set(var) {
            None => Ok(default),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(invalid(var, v, "not a boolean")),
        }
    }
}

fn invalid(var: &'static str, value: &str, why: impl Into<String>) -> EnvError {
    EnvError::Invalid {
        var,
        value: value.to_owned(),
        why: why.into(),
    }
}

/// Translates the reference's environment into sluice's flags.
pub fn translate(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Translation, EnvError> {
    let env = Env::new(vars);
    let mut t = Translation {
        args: vec!["serve".into()],
        ..Translation::default()
    };
    table::refuse_unsupported(&env)?;
    table::note_moot(&env, &mut t.notes);
    listeners(&env, &mut t)?;
    rules(&env, &mut t)?;
    store::translate(&env, &mut t)?;
    stats(&env, &mut t)?;
    logging(&env, &mut t)?;
    behaviour(&env, &mut t)?;
    traces::traces(&env, &mut t)?;
    Ok(t)
}

impl Translation {
    fn flag(&mut self, name: &str, value: impl Into<String>) {
        self.args.push(format!("--{name}"));
        self.args.push(value.into());
    }

    fn switch(&mut self, name: &str) {
        self.args.push(format!("--{name}"));
    }
}

/// `host:port` with the reference's empty-host meaning all addresses.
fn addr(host: &str, port: &str) -> String {
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn listeners(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    match env.set("GRPC_UDS") {
        Some(path) => t.flag("grpc-uds", path),
        None => t.flag(
            "grpc-addr",
            addr(env.or("GRPC_HOST", "0.0.0.0"), env.or("GRPC_PORT", "8081")),
        ),
    }
    // The reference serves /healthcheck and /json on PORT, /rlconfig on
    // DEBUG_PORT and Prometheus on PROMETHEUS_ADDR; sluice serves all its
    // admin routes on the first two, and the reference's stats on the last.
    let admin = [
        addr(env.or("HOST", "0.0.0.0"), env.or("PORT", "8080")),
        addr(
            env.or("DEBUG_HOST", "0.0.0.0"),
            env.or("DEBUG_PORT", "6070"),
        ),
    ];
    if env.flag("USE_PROMETHEUS", false)? {
        let (host, port) = env
            .or("PROMETHEUS_ADDR", ":9090")
            .rsplit_once(':')
            .ok_or_else(|| {
                invalid(
                    "PROMETHEUS_ADDR",
                    env.or("PROMETHEUS_ADDR", ""),
                    "not host:port",
                )
            })?;
        // The reference's stats, named by its mapping file, as the reference
        // serves them there; sluice's own stay on the admin addresses.
        t.flag("reference-metrics-addr", addr(host, port));
        if let Some(yaml) = env.set("PROMETHEUS_MAPPER_YAML") {
            t.flag("reference-metrics-mapper", yaml);
        }
    }
    t.flag("admin-addr", admin.join(","));
    if env.flag("GRPC_SERVER_USE_TLS", false)? {
        server_tls(env, t)?;
    }
    Ok(())
}

/// gRPC over TLS. Envoy Gateway names the client CA `GRPC_SERVER_TLS_CA_CERT`
/// (the reference reads only `GRPC_CLIENT_TLS_CACERT`, so under Envoy Gateway
/// it never checks Envoy's certificate); sluice takes either as the CA that
/// Envoy's client certificate must chain to, which is what Envoy Gateway
/// means by mounting it.
fn server_tls(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    const WHY: &str = "GRPC_SERVER_USE_TLS=true needs a certificate and its key";
    let cert = env.set("GRPC_SERVER_TLS_CERT").ok_or(EnvError::Missing {
        var: "GRPC_SERVER_TLS_CERT",
        why: WHY,
    })?;
    let key = env.set("GRPC_SERVER_TLS_KEY").ok_or(EnvError::Missing {
        var: "GRPC_SERVER_TLS_KEY",
        why: WHY,
    })?;
    t.flag("grpc-tls-cert", cert);
    t.flag("grpc-tls-key", key);
    let ca = match (
        env.set("GRPC_CLIENT_TLS_CACERT"),
        env.set("GRPC_SERVER_TLS_CA_CERT"),
    ) {
        (Some(a), Some(b)) if a != b => {
            return Err(invalid(
                "GRPC_SERVER_TLS_CA_CERT",
                b,
                format!(
                    "differs from GRPC_CLIENT_TLS_CACERT={a}; sluice checks client certificates against one CA"
                ),
            ));
        }
        (a, b) => a.or(b),
    };
    if let Some(ca) = ca {
        t.flag("grpc-tls-client-ca", ca);
    }
    if let Some(san) = env.set("GRPC_CLIENT_TLS_SAN") {
        t.flag("grpc-tls-client-san", san);
    }
    Ok(())
}

fn rules(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    match env.or("CONFIG_TYPE", "FILE") {
        "FILE" => {
            // Both of the reference's loaders read ROOT/SUBDIRECTORY/APPDIRECTORY
            // (RUNTIME_WATCH_ROOT only picks what is watched; sluice watches
            // the directory, symlink swaps included).
            let mut dir =
                std::path::PathBuf::from(env.or("RUNTIME_ROOT", "/srv/runtime_data/current"));
            if let Some(sub) = env.set("RUNTIME_SUBDIRECTORY") {
                dir.push(sub);
            }
            dir.push(env.or("RUNTIME_APPDIRECTORY", "config"));
            t.flag("config", dir.display().to_string());
        }
        "GRPC_XDS_SOTW" => xds(env, t)?,
        other => {
            return Err(invalid(
                "CONFIG_TYPE",
                other,
                "sluice reads FILE or GRPC_XDS_SOTW",
            ));
        }
    }
    if env.flag("MERGE_DOMAIN_CONFIG", false)? {
        t.switch("merge-domains");
    }
    Ok(())
}

fn xds(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    t.flag(
        "config-xds",
        env.or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
    );
    t.flag("xds-node-id", env.or("CONFIG_GRPC_XDS_NODE_ID", "default"));
    if let Some(m) = env.set("CONFIG_GRPC_XDS_NODE_METADATA") {
        t.flag("xds-node-metadata", m);
    }
    if let Some(h) = env.set("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
        t.flag("xds-headers", h);
    }
    if !env.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
        return Ok(());
    }
    let ca = env
        .set("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
        .ok_or(EnvError::Missing {
            var: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            why: "sluice verifies the xDS server against a CA it is given, not the system roots",
        })?;
    t.flag("xds-tls-ca", ca);
    match (
        env.set("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
        env.set("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
    ) {
        (Some(cert), Some(key)) => {
            t.flag("xds-tls-cert", cert);
            t.flag("xds-tls-key", key);
        }
        (None, None) => {}
        (Some(_), None) => {
            return Err(EnvError::Missing {
                var: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                why: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT needs its key",
            });
        }
        (None, Some(_)) => {
            return Err(EnvError::Missing {
                var: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                why: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY needs its certificate",
            });
        }
    }
    if let Some(san) = env.set("CONFIG_GRPC_XDS_SERVER_TLS_SAN") {
        t.flag("xds-tls-server-name", san);
    }
    Ok(())
}

/// The reference's statsd sink (on by default, to localhost:8125).
fn stats(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    if env.flag("USE_STATSD", true)? && !env.flag("DISABLE_STATS", false)? {
        t.flag(
            "statsd-addr",
            addr(
                env.or("STATSD_HOST", "localhost"),
                env.or("STATSD_PORT", "8125"),
            ),
        );
        t.flag(
            "statsd-flush-interval",
            env.or("STATS_FLUSH_INTERVAL", "10s"),
        );
        if let Some(tags) = env.set("EXTRA_TAGS") {
            t.flag("statsd-tags", tags);
        }
    }
    Ok(())
}

/// `LOG_LEVEL` (logrus's levels) and `LOG_FORMAT`.
fn logging(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    let level = env.or("LOG_LEVEL", "WARN").to_ascii_lowercase();
    let level = match level.as_str() {
        "trace" | "debug" | "info" | "error" => level.clone(),
        "warn" | "warning" => "warn".into(),
        "fatal" | "panic" => "error".into(),
        _ => return Err(invalid("LOG_LEVEL", &level, "not a logrus level")),
    };
    t.flag("log-level", level);
    match env.or("LOG_FORMAT", "text") {
        f @ ("text" | "json") => t.flag("log-format", f),
        other => return Err(invalid("LOG_FORMAT", other, "text or json")),
    }
    Ok(())
}

fn behaviour(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    for (var, flag) in [
        ("SHADOW_MODE", "shadow-mode"),
        ("QUOTA_MODE", "quota-mode"),
        ("RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata"),
        (
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            "stop-increment-when-over-limit",
        ),
        (
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
            "healthcheck-needs-rules",
        ),
        (
            "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
            "healthcheck-needs-store",
        ),
        ("USE_CALENDAR_MONTH_RATE_LIMIT", "calendar-months"),
    ] {
        if env.flag(var, false)? {
            t.switch(flag);
        }
    }
    t.flag("near-limit-ratio", env.or("NEAR_LIMIT_RATIO", "0.8"));
    Ok(())
}
