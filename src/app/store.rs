//! The store the flags describe, wrapped in its failure policy.

use std::sync::Arc;
use std::time::Duration;

use super::AppError;
use crate::cli::StoreArgs;
use crate::metrics::Metrics;
use crate::store::memcache::{MemcacheConfig, MemcacheStore};
use crate::store::redis::{RedisConfig, RedisStore, RedisTarget, RedisTls, Sentinel};
use crate::store::{MemoryStore, Resilient, Store};

pub(crate) fn build(args: &StoreArgs, metrics: &Arc<Metrics>) -> Result<Arc<dyn Store>, AppError> {
    let target = match (&args.redis_url, args.redis_cluster.is_empty()) {
        (Some(url), _) => RedisTarget::Single(url.clone()),
        (None, false) => RedisTarget::Cluster(args.redis_cluster.clone()),
        (None, true) if args.redis_sentinel.is_some() => {
            let spec = args.redis_sentinel.as_deref().unwrap_or_default();
            RedisTarget::Sentinel(
                Sentinel::parse(spec, args.redis_sentinel_password.clone())
                    .map_err(|e| AppError::msg(format!("--redis-sentinel: {e}")))?,
            )
        }
        (None, true) if !args.memcache_servers.is_empty() => {
            let memcache = MemcacheStore::new(MemcacheConfig {
                servers: args.memcache_servers.clone(),
                prefix: args.cache_key_prefix.clone(),
                pool_size: args.redis_pool_size,
                connect_timeout: Duration::from_secs(1),
            })?;
            return Ok(Arc::new(Resilient::new(
                memcache,
                args.resilient_options(),
                metrics.clone(),
            )));
        }
        (None, true) => return Ok(Arc::new(MemoryStore::with_capacity(args.max_counters))),
    };
    let redis = RedisStore::new(RedisConfig {
        target,
        pool_size: args.redis_pool_size,
        cluster_max_in_flight: usize::try_from(args.redis_cluster_max_in_flight).unwrap_or(256),
        prefix: args.cache_key_prefix.clone(),
        key_format: args.key_format.into(),
        connect_timeout: Duration::from_secs(1),
        tls: (args.redis_tls_ca.is_some() || args.redis_tls_cert.is_some()).then(|| RedisTls {
            ca: args.redis_tls_ca.clone(),
            cert: args.redis_tls_cert.clone().zip(args.redis_tls_key.clone()),
        }),
        io_thread: args.redis_io_thread,
        sentinel_recheck: args.redis_sentinel_recheck.0,
    })?;
    Ok(Arc::new(Resilient::new(
        redis,
        args.resilient_options(),
        metrics.clone(),
    )))
}
