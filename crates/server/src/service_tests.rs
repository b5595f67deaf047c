use super::*;
use crate::config::LoadOptions;
use crate::store::{BoxFuture, StoreHealth};

/// A store that answers one count too few.
struct Short;

impl Store for Short {
    fn increment<'a>(
        &'a self,
        batch: &'a [Increment],
    ) -> BoxFuture<'a, Result<Vec<Tally>, StoreError>> {
        let n = batch.len().saturating_sub(1);
        Box::pin(std::future::ready(Ok(vec![Tally::Count(0); n])))
    }

    fn health(&self) -> StoreHealth {
        StoreHealth {
            backend: "short",
            in_use: "short",
            healthy: true,
            reached: true,
            detail: None,
        }
    }
}

#[tokio::test]
async fn a_short_answer_from_any_store_is_an_error_not_an_admit() {
    let dir = tempfile::tempdir().unwrap();
    let rules =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    std::fs::write(dir.path().join("d.yaml"), rules).unwrap();
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let live = LiveRules::load(dir.path(), LoadOptions::default(), metrics.clone()).unwrap();
    let limiter = RateLimiter::new(
        Arc::new(live),
        Arc::new(Short),
        metrics,
        Settings::default(),
    );
    let req = Request {
        domain: "d".into(),
        descriptors: vec![crate::request::Descriptor {
            entries: vec![("k".into(), "v".into())],
            limit: None,
            hits_addend: None,
            hits: 1,
            refund: false,
        }],
        hits_addend: 0,
    };
    let e = limiter.decide(req).await.unwrap_err();
    assert!(
        matches!(e, ServiceError::Store(StoreError::BadReply(_))),
        "{e}"
    );
}
