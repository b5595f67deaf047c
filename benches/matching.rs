//! Criterion micro-benchmarks of the request path without the network:
//! matching a descriptor against 10 to 10,000 rules (the time must not grow
//! with the rule count), a whole decision with the memory store, and loading a
//! directory of 10,000 rules.

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::sync::Arc;

use common::descriptor;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice::config::{LiveRules, LoadOptions, load_dir};
use sluice::metrics::Metrics;
use sluice::service::{RateLimiter, Settings};
use sluice::store::MemoryStore;

/// Counts allocations, so the decision's are reported next to its time.
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations one call of `f` makes, averaged over 1000 calls.
fn allocations_per_call(mut f: impl FnMut()) -> f64 {
    f();
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..1000 {
        f();
    }
    (ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - before) as f64 / 1000.0
}

/// A domain `bench` with `n` exact-value rules under `user`, a wildcard and a
/// key-only rule beside them, and a three-level login rule.
fn rules(n: usize) -> String {
    let mut y = String::from("domain: bench\ndescriptors:\n");
    for i in 0..n {
        y.push_str(&format!(
            "  - key: user\n    value: u{i}\n    rate_limit: {{unit: minute, requests_per_unit: 100}}\n"
        ));
    }
    y.push_str(
        "  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 100}\n\
         \x20 - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 1000000000}\n\
         \x20 - key: tier\n    value: credentials\n    descriptors:\n\
         \x20     - key: remote_address\n        descriptors:\n\
         \x20         - key: path\n            rate_limit: {unit: minute, requests_per_unit: 30}\n",
    );
    y
}

fn dir_with(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.yaml"), rules(n)).expect("write");
    dir
}

fn matching(c: &mut Criterion) {
    let mut group = c.benchmark_group("match");
    for n in [10, 1_000, 10_000] {
        let dir = dir_with(n);
        let loaded =
            load_dir(dir.path(), LoadOptions::default(), &Metrics::default()).expect("rules");
        let domain = loaded.domain("bench").expect("domain");
        let exact = [("user", "u7")];
        let keyonly = [("remote_address", "10.1.2.3")];
        let nested = [
            ("tier", "credentials"),
            ("remote_address", "10.1.2.3"),
            ("path", "/api/auth/login"),
        ];
        group.bench_with_input(BenchmarkId::new("exact value", n), &n, |b, _| {
            b.iter(|| black_box(domain.find(black_box(&exact[..])).is_some()))
        });
        group.bench_with_input(BenchmarkId::new("key only", n), &n, |b, _| {
            b.iter(|| black_box(domain.find(black_box(&keyonly[..])).is_some()))
        });
        group.bench_with_input(BenchmarkId::new("three levels", n), &n, |b, _| {
            b.iter(|| black_box(domain.find(black_box(&nested[..])).is_some()))
        });
    }
    group.finish();
}

/// A limiter on the memory store with the rules in `dir`, and a runtime.
fn limiter_on(dir: &std::path::Path) -> (RateLimiter, tokio::runtime::Runtime) {
    let metrics = Arc::new(Metrics::default());
    let rules =
        Arc::new(LiveRules::load(dir, LoadOptions::default(), metrics.clone()).expect("rules"));
    let limiter = RateLimiter::new(
        rules,
        Arc::new(MemoryStore::default()),
        metrics,
        Settings::default(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    (limiter, runtime)
}

fn decision(c: &mut Criterion) {
    let dir = dir_with(10);
    let (limiter, runtime) = limiter_on(dir.path());
    let one = RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![descriptor(&[("remote_address", "10.1.2.3")])],
        hits_addend: 0,
    };
    let login = RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![
            descriptor(&[("remote_address", "10.1.2.3")]),
            descriptor(&[
                ("tier", "credentials"),
                ("remote_address", "10.1.2.3"),
                ("path", "/api/auth/login"),
            ]),
            descriptor(&[("user", "u7")]),
        ],
        hits_addend: 0,
    };
    for (name, req) in [("one descriptor", &one), ("three descriptors", &login)] {
        // The request's own decode (prost's strings and vectors) is not
        // counted: the clone stands for it and is made before counting.
        let mut copies: Vec<RateLimitRequest> = (0..1001).map(|_| req.clone()).collect();
        let total = allocations_per_call(|| {
            if let Some(r) = copies.pop() {
                black_box(runtime.block_on(limiter.handle(r)).is_ok());
            }
        });
        println!("decide (memory store)/{name}: {total:.1} allocations per decision");
    }
    let mut group = c.benchmark_group("decide (memory store)");
    group.bench_function("one descriptor", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(limiter.handle(one.clone()).await.is_ok()) })
    });
    group.bench_function("three descriptors", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(limiter.handle(login.clone()).await.is_ok()) })
    });
    group.finish();
}

fn loading(c: &mut Criterion) {
    let dir = dir_with(10_000);
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    group.bench_function("10,000 rules", |b| {
        b.iter(|| load_dir(dir.path(), LoadOptions::default(), &Metrics::default()).expect("rules"))
    });
    group.finish();
}

/// The console's top over-limit keys, as the request path feeds it for an
/// over-limit descriptor: a key already held, and a flood of new keys (each
/// one replaces the smallest of 64 slots and renders its text).
fn top_keys(c: &mut Criterion) {
    use sluice::console::TopKeys;
    use sluice::limiter::Unit;
    use sluice::store::CounterKey;
    let mut group = c.benchmark_group("top keys");
    let top = TopKeys::new(64, false);
    let hot = CounterKey::new(
        "api",
        Unit::Minute,
        [("masked_remote_address", "203.0.113.7/32")],
    );
    group.bench_function("held key", |b| {
        b.iter(|| top.record(&hot, "per_ip", 1, 1000))
    });
    let fresh: Vec<CounterKey> = (0..4096)
        .map(|i| {
            let v = format!("198.51.{}.{}/32", i / 256, i % 256);
            CounterKey::new("api", Unit::Minute, [("masked_remote_address", v.as_str())])
        })
        .collect();
    let mut i = 0;
    group.bench_function("new key (flood)", |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            top.record(&fresh[i], "per_ip", 1, 1000)
        })
    });
    group.finish();
}

/// Usage-based limits against a plain increment, whole decisions on the
/// memory store: a refund (`is_negative_hits`), and a concurrency slot
/// taken and given back (two calls, as Envoy makes them).
fn usage(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("usage.yaml"),
        "domain: usage
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 4000000000, refundable: true}
  - key: c
    descriptors:
      - key: id
        rate_limit: {algorithm: concurrency, max_in_flight: 1000000, lease: 60s}
",
    )
    .expect("rules");
    let (limiter, runtime) = limiter_on(dir.path());
    let ask = |entries: &[(&str, &str)], refund: bool| RateLimitRequest {
        domain: "usage".into(),
        descriptors: vec![
            envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
                is_negative_hits: refund,
                ..descriptor(entries)
            },
        ],
        hits_addend: 0,
    };
    let (charge, refund) = (ask(&[("k", "v")], false), ask(&[("k", "v")], true));
    let (acquire, release) = (
        ask(&[("c", "v"), ("id", "r1")], false),
        ask(&[("c", "v"), ("id", "r1")], true),
    );
    let mut group = c.benchmark_group("usage (memory store)");
    group.bench_function("increment", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(limiter.handle(charge.clone()).await.is_ok()) })
    });
    group.bench_function("refund", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(limiter.handle(refund.clone()).await.is_ok()) })
    });
    group.bench_function("acquire + release", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(limiter.handle(acquire.clone()).await.is_ok());
            black_box(limiter.handle(release.clone()).await.is_ok())
        })
    });
    group.finish();
}

criterion_group!(benches, matching, decision, loading, top_keys, usage);
criterion_main!(benches);
