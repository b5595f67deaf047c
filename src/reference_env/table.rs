//! The reference's variables that `ratelimit` mode does not turn into flags:
//! those that tune what sluice does not have (moot), and those whose
//! non-default values ask for what sluice does not do (unsupported).

use super::{Env, EnvError};

/// Accepted whatever their value; said once at startup when set.
pub const MOOT: &[(&str, &str)] = &[
    (
        "RUNTIME_IGNOREDOTFILES",
        "dot-files and dot-directories are always skipped",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the rule directory itself is watched, symlink swaps included",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "sluice starts before the first xDS response and answers OK until rules arrive; with files it refuses invalid rules at startup",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire a few seconds after their window",
    ),
    (
        "REDIS_TIMEOUT",
        "the reference's dial timeout; sluice bounds every store call by --redis-timeout (20ms)",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "concurrent requests are batched into shared script calls",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "concurrent requests are batched into shared script calls",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "cluster slots are called in parallel",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "connections are multiplexed; a request never waits past --redis-timeout",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "sluice starts without its store, decides by --store-failure and retries",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "sluice starts without its store, decides by --store-failure and retries",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "sluice starts without its store, decides by --store-failure and retries",
    ),
    (
        "MEMCACHE_SRV_REFRESH",
        "server names are resolved on every reconnect",
    ),
    (
        "USE_DOG_STATSD",
        "DogStatsD tags come from EXTRA_TAGS; USE_DOG_STATSD_MOGRIFIERS is read as it is",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "xDS reconnects back off from 100ms to 10s",
    ),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "xDS reconnects back off from 100ms to 10s",
    ),
    (
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "xDS reconnects back off from 100ms to 10s",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "xDS reconnects back off from 100ms to 10s",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "xDS reconnects back off from 100ms to 10s",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "connections are not aged out; idle ones close after --grpc-idle-timeout",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are not aged out; idle ones close after --grpc-idle-timeout",
    ),
];

/// `(variable, the reference's default, why sluice cannot do otherwise)`:
/// any other value is a startup error.
pub const UNSUPPORTED: &[(&str, &str, &str)] = &[
    (
        "REDIS_PERSECOND",
        "false",
        "no second Redis for per-second limits: one batched script call serves them (run a second sluice to keep them apart)",
    ),
    (
        "MEMCACHE_TLS",
        "false",
        "memcached is spoken in plain TCP only",
    ),
    (
        "PROMETHEUS_PATH",
        "/metrics",
        "Prometheus is served at /metrics",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "false",
        "durations are in seconds (sluice_request_duration_seconds)",
    ),
    (
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        "false",
        "sluice's own headers are X-RateLimit-* (draft 03) or the IETF RateLimit-Policy/RateLimit, not the reference's: run `sluice serve --response-headers`, or let Envoy's enable_x_ratelimit_headers build them",
    ),
    (
        "LIMIT_LIMIT_HEADER",
        "RateLimit-Limit",
        "header names are fixed",
    ),
    (
        "LIMIT_REMAINING_HEADER",
        "RateLimit-Remaining",
        "header names are fixed",
    ),
    (
        "LIMIT_RESET_HEADER",
        "RateLimit-Reset",
        "header names are fixed",
    ),
    (
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        "",
        "xDS responses may be up to 4 MiB",
    ),
];

pub(super) fn refuse_unsupported(env: &Env) -> Result<(), EnvError> {
    for &(var, default, why) in UNSUPPORTED {
        if let Some(v) = env.set(var)
            && !v.eq_ignore_ascii_case(default)
        {
            return Err(EnvError::Unsupported {
                var,
                value: v.to_owned(),
                why,
            });
        }
    }
    Ok(())
}

pub(super) fn note_moot(env: &Env, notes: &mut Vec<String>) {
    for &(var, why) in MOOT {
        if let Some(v) = env.set(var) {
            notes.push(format!("{var}={v}: not needed, {why}"));
        }
    }
    // The per-second Redis settings mean nothing without it (refused above).
    for var in env.0.keys().filter(|k| k.starts_with("REDIS_PERSECOND_")) {
        notes.push(format!("{var}: not needed without REDIS_PERSECOND"));
    }
}
