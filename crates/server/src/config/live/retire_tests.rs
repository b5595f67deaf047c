use std::sync::Mutex;

use super::*;

/// Says which thread freed it.
struct Probe(Arc<Mutex<Option<String>>>);

impl Drop for Probe {
    fn drop(&mut self) {
        let name = std::thread::current().name().map(str::to_owned);
        if let Ok(mut by) = self.0.lock() {
            *by = name.or(Some("unnamed".into()));
        }
    }
}

#[test]
fn a_request_never_frees_a_retired_snapshot() {
    let by = Arc::new(Mutex::new(None));
    let old = Arc::new(Probe(by.clone()));
    let request = old.clone();
    retire(old);
    std::thread::sleep(TICK * 5);
    assert_eq!(*by.lock().unwrap(), None, "held by a request: kept");
    // The request lets go of what was the last reference but one.
    std::thread::Builder::new()
        .name("request".into())
        .spawn(move || drop(request))
        .unwrap()
        .join()
        .unwrap();
    let freed = (0..5000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        by.lock().unwrap().is_some()
    });
    assert!(freed);
    assert_eq!(by.lock().unwrap().as_deref(), Some("sluice-retire"));
}

#[test]
fn a_reload_leaves_the_old_rules_to_the_retiring_thread() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.yaml");
    let rules = |n: u32| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}\n"
        )
    };
    std::fs::write(&file, rules(1)).unwrap();
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let live = super::super::LiveRules::load(dir.path(), Default::default(), metrics).unwrap();
    // What a request in flight holds across its store call.
    let request = live.snapshot();
    std::fs::write(&file, rules(2)).unwrap();
    live.reload("test").unwrap();
    // The request's reference is not the last: it will not free the rules.
    assert_eq!(Arc::strong_count(&request), 2);
    let weak = Arc::downgrade(&request);
    drop(request);
    let freed = (0..5000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        weak.strong_count() == 0
    });
    assert!(freed);
}

static PURGES: AtomicU64 = AtomicU64::new(0);

fn count_purge() {
    PURGES.fetch_add(1, Relaxed);
}

/// The allocator's purge runs once replaced rules are freed, on the
/// retiring thread (the binary hands mimalloc's collect).
#[test]
fn freeing_a_snapshot_runs_the_hook_after_it() {
    after_freeing(count_purge);
    let before = PURGES.load(Relaxed);
    retire(Arc::new(0u8));
    let purged = (0..5000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        PURGES.load(Relaxed) > before
    });
    assert!(purged, "no purge after a snapshot was freed");
}
