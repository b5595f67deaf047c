//! The application value: what the composition root ([`crate::app`]) built,
//! handed whole to the gRPC server, the admin port, the console and the
//! background tasks. Each takes the part it needs by its name; the limiter
//! is one part among them, never a locator for the others.

use std::sync::Arc;

use crate::config::LiveRules;
use crate::metrics::Metrics;
use crate::service::{OverLimitWatch, RateLimiter, Settings};
use crate::store::Store;

/// The running parts, cheap to clone (each is shared).
#[derive(Clone)]
pub struct App {
    /// The live rules: the reload task (files or xDS) is their one writer.
    pub rules: Arc<LiveRules>,
    /// The counter store, behind its breaker and failure policy.
    pub store: Arc<dyn Store>,
    /// Every component's numbers, read at a scrape.
    pub metrics: Arc<Metrics>,
    /// The decision path shared by gRPC and `/json`, over the same three.
    pub limiter: RateLimiter,
}

impl App {
    /// Builds the limiter over `rules`, `store` and `metrics`, telling
    /// `watch` of each over-limit descriptor.
    pub fn new(
        rules: Arc<LiveRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        settings: Settings,
        watch: Arc<dyn OverLimitWatch>,
    ) -> App {
        let limiter = RateLimiter::new(rules.clone(), store.clone(), metrics.clone(), settings)
            .watched_by(watch);
        App {
            rules,
            store,
            metrics,
            limiter,
        }
    }
}
