//! `BACKEND_TYPE` and the `REDIS_*` / `MEMCACHE_*` variables as sluice's
//! store flags. Counters keep the reference's key format, so swapping the
//! image against the same Redis carries every count over.

use super::{Env, EnvError, Translation, invalid};

pub(super) fn translate(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    match env.or("BACKEND_TYPE", "redis") {
        "redis" => redis(env, t)?,
        "memcache" => memcache(env, t)?,
        other => {
            return Err(invalid(
                "BACKEND_TYPE",
                other,
                "sluice counts in redis or memcache",
            ));
        }
    }
    if let Some(prefix) = env.set("CACHE_KEY_PREFIX") {
        t.flag("cache-key-prefix", prefix);
    }
    t.flag("key-format", "envoyproxy");
    // The reference's local cache is off unless sized, in bytes; sluice's
    // holds entries of about 100 bytes each.
    let bytes = env.or("LOCAL_CACHE_SIZE_IN_BYTES", "0");
    let bytes: u64 = bytes
        .parse()
        .map_err(|_| invalid("LOCAL_CACHE_SIZE_IN_BYTES", bytes, "not a number of bytes"))?;
    t.flag("local-cache-size", (bytes / 100).to_string());
    Ok(())
}

fn redis(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    let url = env.or("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let tls = env.flag("REDIS_TLS", false)?;
    let insecure = env.flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)?;
    let auth = env.set("REDIS_AUTH").map(userinfo);
    let socket = env.or("REDIS_SOCKET_TYPE", "unix");
    let one = |hostport: &str| -> Result<String, EnvError> {
        match socket {
            "tcp" => {
                let scheme = if tls { "rediss" } else { "redis" };
                let at = auth.as_deref().map(|a| format!("{a}@")).unwrap_or_default();
                let frag = if tls && insecure { "#insecure" } else { "" };
                Ok(format!("{scheme}://{at}{hostport}{frag}"))
            }
            "unix" => {
                if tls {
                    return Err(invalid("REDIS_TLS", "true", "no TLS over a Unix socket"));
                }
                let at = auth.as_deref().map(|a| format!("{a}@")).unwrap_or_default();
                Ok(format!("redis+unix://{at}{hostport}"))
            }
            other => Err(invalid("REDIS_SOCKET_TYPE", other, "tcp or unix")),
        }
    };
    match env.or("REDIS_TYPE", "SINGLE").to_ascii_lowercase().as_str() {
        "single" => t.flag("redis-url", one(url)?),
        "cluster" => {
            if auth.is_some() || tls {
                return Err(EnvError::Unsupported {
                    var: "REDIS_TYPE",
                    value: "cluster".into(),
                    why: "REDIS_AUTH and REDIS_TLS are not carried to Redis Cluster nodes by ratelimit mode; run `sluice serve --redis-cluster` with credentials in the node URLs",
                });
            }
            t.flag("redis-cluster", url);
        }
        "sentinel" => {
            let (master, sentinels) = url.split_once(',').ok_or_else(|| {
                invalid("REDIS_URL", url, "sentinel needs master,host:port[,...]")
            })?;
            t.flag("redis-sentinel", format!("{master}@{sentinels}"));
            if let Some(pw) = env.set("REDIS_SENTINEL_AUTH") {
                t.flag("redis-sentinel-password", pw);
            }
        }
        other => return Err(invalid("REDIS_TYPE", other, "SINGLE, CLUSTER or SENTINEL")),
    }
    t.flag("redis-pool-size", env.or("REDIS_POOL_SIZE", "10"));
    if let Some(ca) = env.set("REDIS_TLS_CACERT") {
        t.flag("redis-tls-ca", ca);
    }
    if let (Some(cert), Some(key)) = (
        env.set("REDIS_TLS_CLIENT_CERT"),
        env.set("REDIS_TLS_CLIENT_KEY"),
    ) {
        t.flag("redis-tls-cert", cert);
        t.flag("redis-tls-key", key);
    }
    Ok(())
}

/// `REDIS_AUTH` (`password` or `user:password`) as a URL's userinfo.
fn userinfo(auth: &str) -> String {
    let (user, pass) = auth.split_once(':').unwrap_or(("", auth));
    format!("{}:{}", encode(user), encode(pass))
}

/// Percent-encodes what a URL's userinfo cannot hold as is.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn memcache(env: &Env, t: &mut Translation) -> Result<(), EnvError> {
    if let Some(srv) = env.set("MEMCACHE_SRV") {
        return Err(EnvError::Unsupported {
            var: "MEMCACHE_SRV",
            value: srv.to_owned(),
            why: "SRV records are not read: list the servers (DNS names are resolved on every reconnect) in MEMCACHE_HOST_PORT",
        });
    }
    let servers = env.set("MEMCACHE_HOST_PORT").ok_or(EnvError::Missing {
        var: "MEMCACHE_HOST_PORT",
        why: "BACKEND_TYPE=memcache needs its servers",
    })?;
    t.flag("memcache-servers", servers);
    t.flag("redis-pool-size", env.or("MEMCACHE_MAX_IDLE_CONNS", "2"));
    Ok(())
}
