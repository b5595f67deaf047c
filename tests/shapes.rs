//! Limit shapes against the real binary on every store: a token bucket is
//! exact under concurrency and shared across instances, sliding windows and
//! token buckets stop the burst a fixed window lets through at a boundary,
//! a client that waits Retry-After is admitted, and a window Envoy has no
//! unit for is reported as a rate it can name.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::redis::{RedisCluster, RedisServer};
use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

const RULES: &str = "
domain: shapes
descriptors:
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 100}
  - key: charged
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: token_bucket, overdraft: true}
  - key: fixed2
    rate_limit: {window: 2s, requests_per_unit: 10}
  - key: sliding2
    rate_limit: {window: 2s, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket2
    rate_limit: {window: 2s, requests_per_unit: 10, algorithm: token_bucket}
  - key: slow
    rate_limit: {window: 2s, requests_per_unit: 2, algorithm: token_bucket}
  - key: ninety
    rate_limit: {window: 90s, requests_per_unit: 30, algorithm: sliding_window}
  - key: slide3
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window}
  - key: slide100
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window}
  - key: api_key
    rate_limits:
      - {unit: hour, requests_per_unit: 3, name: small}
      - {unit: day, requests_per_unit: 100, name: daily}
  - key: mail
    rate_limit: {unit: hour, requests_per_unit: 100, on_store_failure: deny}
  - key: page
    rate_limit: {unit: hour, requests_per_unit: 100}
";

fn start(extra: &[&str]) -> Sluice {
    let s = Sluice::start(&[("shapes.yaml", RULES)], extra);
    assert!(
        eventually(Duration::from_secs(10), || s
            .get("/readyz")
            .1
            .contains("\"status\":\"ready\"")),
        "{}",
        s.get("/readyz").1
    );
    s
}

fn redis_args(url: &str) -> Vec<String> {
    ["--redis-url", url, "--redis-timeout", "2s"]
        .map(String::from)
        .to_vec()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits until the wall clock is `from_ms..to_ms` into a `period_ms` window.
fn at_phase(period_ms: u128, from_ms: u128, to_ms: u128) {
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % period_ms;
        if (from_ms..to_ms).contains(&now) {
            return;
        }
        // A wall-clock condition: nothing to poll but the clock.
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_and_sliding_windows_are_exact_on_every_store() {
    let redis = RedisServer::start();
    let on_redis = redis_args(&redis.url());
    let memory = start(&[]);
    let one = start(&args(&on_redis));
    let two = start(&args(&on_redis));
    let c = memory.client().await;
    assert_eq!(admitted(&[c], 1000, "shapes", ("bucket", "m")).await, 100);
    // Two instances on one Redis share one bucket.
    let clients = [one.client().await, two.client().await];
    assert_eq!(
        admitted(&clients, 1000, "shapes", ("bucket", "r")).await,
        100
    );
}

/// `hits` on `key` of the overdraft bucket (0: a check): the answer.
async fn charge(
    c: &mut envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    hits: u64,
) -> RateLimitResponse {
    let mut d = descriptor(&[("charged", key)]);
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
    past_sheds(c, || {
        tonic::Request::new(request("shapes", vec![d.clone()]))
    })
    .await
    .expect("rpc")
}

/// Charged after each response (a check of 0, then the cost): a bucket
/// with `overdraft: true` takes the charge that does not fit, and one made
/// while in debt, so the checks after are refused until refill pays it all
/// back. On memory, Redis and memcached alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdraft_bucket_takes_every_charge_into_debt_on_every_store() {
    let redis = RedisServer::start();
    let memcached = common::memcache::Memcached::start();
    let on_redis = redis_args(&redis.url());
    let on_memcached = [
        "--memcache-servers",
        &memcached.addr(),
        "--redis-timeout",
        "2s",
    ];
    for (store, extra) in [
        ("memory", vec![]),
        ("redis", args(&on_redis)),
        ("memcached", on_memcached.to_vec()),
    ] {
        let s = start(&extra);
        let mut c = s.client().await;
        for i in 0..4 {
            assert_eq!(
                charge(&mut c, store, 0).await.overall_code,
                OK,
                "{store}: check {i}"
            );
            charge(&mut c, store, 300).await;
        }
        // 1,200 of 1,000 taken: 200 in debt, about 12 minutes of refill.
        let refused = charge(&mut c, store, 0).await;
        assert_eq!(refused.overall_code, OVER, "{store}: the check in debt");
        let wait = retry_after(&refused).expect("Retry-After");
        assert!((600..=760).contains(&wait), "{store}: {wait}");
        // A charge made in debt (a request that passed its check before
        // the others were charged) is taken too: the wait grows by its
        // refill, 300 tokens at 1,000 an hour (18 minutes).
        charge(&mut c, store, 300).await;
        let later = retry_after(&charge(&mut c, store, 0).await).expect("Retry-After");
        assert!(
            (wait + 1000..=wait + 1100).contains(&later),
            "{store}: {wait} then {later}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_work_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let s = start(&["--redis-cluster", &cluster.seeds(), "--redis-timeout", "2s"]);
    let c = s.client().await;
    assert_eq!(
        admitted(std::slice::from_ref(&c), 300, "shapes", ("bucket", "c")).await,
        100
    );
    let mut c = c;
    let codes: Vec<i32> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(ask(&mut c, "shapes", &[("slide3", "c")]).await.overall_code);
        }
        v
    };
    assert_eq!(codes, [OK, OK, OK, OVER]);
    // The bucket's usage: one key took 100 of the 300 it asked for (read
    // as the usage level at or just below it, within 5%).
    let (code, body) = s.get("/api/usage?domain=shapes&rule=bucket");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["usage"]["keys"], 1, "{v}");
    let max = v["usage"]["max"].as_u64().unwrap_or(0);
    assert!((95..=100).contains(&max), "{v}");
}

/// Ten requests late in one 2 s window and ten early in the next: a fixed
/// window admits all twenty, a sliding window and a token bucket do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_windows_and_buckets_stop_the_boundary_burst() {
    let redis = RedisServer::start();
    let on_redis = redis_args(&redis.url());
    for s in [start(&[]), start(&args(&on_redis))] {
        let mut c = s.client().await;
        // Late in the window, with room for a slow machine to finish the
        // thirty requests before the boundary.
        at_phase(2000, 1300, 1500);
        for key in ["fixed2", "sliding2", "bucket2"] {
            for _ in 0..10 {
                assert_eq!(
                    ask(&mut c, "shapes", &[(key, "b")]).await.overall_code,
                    OK,
                    "{key}"
                );
            }
        }
        at_phase(2000, 100, 300);
        let mut second = Vec::new();
        for key in ["fixed2", "sliding2", "bucket2"] {
            let mut ok = 0;
            for _ in 0..10 {
                ok += usize::from(ask(&mut c, "shapes", &[(key, "b")]).await.overall_code == OK);
            }
            second.push(ok);
        }
        eprintln!("second burst admitted (fixed, sliding, bucket): {second:?}");
        assert_eq!(
            second[0], 10,
            "the fixed window opens again at the boundary"
        );
        // The estimate still holds about 85-95% of the last window.
        assert!(second[1] <= 3, "sliding window let {} through", second[1]);
        // 0.6-1.0 s of refill at 5 tokens a second (and the bucket stays
        // far from the fixed window's full ten).
        assert!(second[2] <= 6, "token bucket let {} through", second[2]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waits_retry_after_is_admitted() {
    let redis = RedisServer::start();
    let on_redis = redis_args(&redis.url());
    for s in [start(&[]), start(&args(&on_redis))] {
        let mut c = s.client().await;
        // One token a second, two at most.
        assert_eq!(
            ask(&mut c, "shapes", &[("slow", "w")]).await.overall_code,
            OK
        );
        assert_eq!(
            ask(&mut c, "shapes", &[("slow", "w")]).await.overall_code,
            OK
        );
        let r = ask(&mut c, "shapes", &[("slow", "w")]).await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!(r.statuses[0].limit_remaining, 0);
        let wait = retry_after(&r).expect("Retry-After");
        assert_eq!(wait, 1);
        // Waiting is what is under test: Retry-After, then one more try.
        std::thread::sleep(Duration::from_secs(wait));
        let r = ask(&mut c, "shapes", &[("slow", "w")]).await;
        assert_eq!(r.overall_code, OK, "{r:?}");
    }
}

#[tokio::test]
async fn a_window_envoy_has_no_unit_for_is_reported_as_a_rate_it_can_name() {
    let s = start(&[]);
    let mut c = s.client().await;
    let r = ask(&mut c, "shapes", &[("ninety", "x")]).await;
    let limit = r.statuses[0].current_limit.as_ref().expect("current_limit");
    // 30 per 90 s is reported as 20 per minute: a client pacing itself by
    // the report never reaches the real limit.
    assert_eq!((limit.requests_per_unit, limit.unit), (20, 2));
    assert_eq!(r.statuses[0].limit_remaining, 29);
    let (_, rl) = s.get("/rlconfig");
    assert!(
        rl.contains("shapes.ninety: window=90s requests_per_unit=30 algorithm=sliding_window"),
        "{rl}"
    );
}

#[tokio::test]
async fn several_limits_on_one_descriptor_all_count_and_the_tightest_shows() {
    let s = start(&[]);
    let mut c = s.client().await;
    let r = ask(&mut c, "shapes", &[("api_key", "k1")]).await;
    let st = &r.statuses[0];
    assert_eq!(
        st.limit_remaining, 2,
        "the hourly limit of 3 is the tighter"
    );
    assert_eq!(st.current_limit.as_ref().unwrap().name, "small");
    ask(&mut c, "shapes", &[("api_key", "k1")]).await;
    ask(&mut c, "shapes", &[("api_key", "k1")]).await;
    let r = ask(&mut c, "shapes", &[("api_key", "k1")]).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "small");
    assert!(retry_after(&r).is_some());
    // Both limits counted every request, each under its own path.
    let m = s.get("/metrics").1;
    for rule in ["api_key:small", "api_key:daily"] {
        let series = format!("sluice_rule_total_hits_total{{domain=\"shapes\",rule=\"{rule}\"}}");
        assert_eq!(metric(&m, &series), Some(4.0), "{rule}");
    }
}

/// While Redis is down, a rule with `on_store_failure: deny` fails closed
/// and the others follow `--store-failure allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_can_fail_closed_while_others_fail_open() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let s = start(&[
        "--redis-url",
        &url,
        "--redis-timeout",
        "200ms",
        "--store-failure",
        "allow",
    ]);
    let mut c = s.client().await;
    assert_eq!(
        ask(&mut c, "shapes", &[("mail", "a")]).await.overall_code,
        OK
    );
    redis.kill();
    for _ in 0..5 {
        assert_eq!(
            ask(&mut c, "shapes", &[("mail", "a")]).await.overall_code,
            OVER
        );
        assert_eq!(
            ask(&mut c, "shapes", &[("page", "a")]).await.overall_code,
            OK
        );
    }
    let m = s.get("/metrics").1;
    assert!(metric(&m, "sluice_store_policy_decisions_total{policy=\"deny\"}").unwrap() >= 5.0);
    assert!(metric(&m, "sluice_store_policy_decisions_total{policy=\"allow\"}").unwrap() >= 5.0);
}
