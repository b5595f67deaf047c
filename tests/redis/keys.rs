//! What sluice writes in Redis: key prefix, format and expiry, the reference's keys, calendar months.

use super::*;

#[tokio::test]
async fn keys_carry_prefix_format_and_a_bounded_expiry() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&[
        "--redis-url",
        &url,
        "--cache-key-prefix",
        "pfx:",
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&s);
    let mut c = s.client().await;
    ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await;
    let keys = redis.counter_keys().join("\n");
    let key = keys.trim();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start_of_hour = now / 3600 * 3600;
    assert!(
        key == format!("pfx:shop_ip_1.2.3.4_{start_of_hour}")
            || key == format!("pfx:shop_ip_1.2.3.4_{}", start_of_hour - 3600),
        "{key}"
    );
    assert_eq!(redis.cli(&["get", key]).trim(), "1");
    let ttl: u64 = redis.cli(&["ttl", key]).trim().parse().unwrap();
    assert!(
        (1..=3600 + 5).contains(&ttl),
        "ttl {ttl} outlives the window"
    );

    sluice_format_hashes_what_it_keys(&redis, &url).await;
}

/// sluice's own key format under `--cache-key-prefix`: a hashed value, no
/// email in clear in Redis or the logs, and an expiry no longer than the
/// window.
async fn sluice_format_hashes_what_it_keys(redis: &RedisServer, url: &str) {
    let sluice_format = start(&[
        "--redis-url",
        url,
        "--cache-key-prefix",
        "sl:",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&sluice_format);
    let mut c = sluice_format.client().await;
    ask(&mut c, "shop", &[("email", "someone@example.com")]).await;
    let keys = redis.cli(&["--scan", "--pattern", "sl:shop:*"]);
    let key = keys.trim();
    assert!(key.starts_with("sl:shop:HOUR:"), "{key}");
    assert!(
        !keys.contains("example.com"),
        "no email in clear in Redis keys: {keys}"
    );
    assert_eq!(key.rsplit(':').next().unwrap().len(), 32);
    let ttl: i64 = redis.cli(&["ttl", key]).trim().parse().unwrap();
    assert!((1..=3600 + 5).contains(&ttl), "ttl {ttl}");
    assert!(
        !sluice_format
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("example.com")),
        "no email in logs"
    );
}

/// A migration fleet shares the reference's keys: what a reference instance
/// reads there must be the hits, never a leased chunk counted ahead of them
/// (the reference's `TestGenerateCacheKeysWithShareThreshold`). With the
/// shipped defaults (leasing on) and `--key-format envoyproxy`.
#[tokio::test]
async fn a_reference_key_holds_exactly_the_hits() {
    let redis = RedisServer::start();
    let url = redis.url();
    let s = start(&[
        "--redis-url",
        &url,
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ]);
    wait_ready(&s);
    let mut c = s.client().await;
    for n in 1..=6u32 {
        assert_eq!(
            ask(&mut c, "shop", &[("hot", "mig")]).await.overall_code,
            OK
        );
        let keys = redis.counter_keys().join("\n");
        let key = keys.trim();
        assert!(key.starts_with("shop_hot_mig_"), "{key}");
        assert_eq!(
            redis.cli(&["get", key]).trim(),
            n.to_string(),
            "after {n} requests the reference's key must hold {n}"
        );
    }
}

/// `--calendar-months` (the reference's `USE_CALENDAR_MONTH_RATE_LIMIT`):
/// under the reference's key format, a month's key carries the first
/// second of the UTC calendar month and expires at its end, and Envoy is
/// told the reset is at the next 1st. Without it, a month is 30 days from
/// the epoch, as the reference's default.
#[tokio::test]
async fn calendar_months_key_and_expire_as_the_references() {
    let redis = RedisServer::start();
    let url = redis.url();
    let rules = "domain: bill\ndescriptors:\n  - key: plan\n    rate_limit: {unit: month, requests_per_unit: 3}\n";
    let base = [
        "--redis-url",
        url.as_str(),
        "--key-format",
        "envoyproxy",
        "--redis-timeout",
        "2s",
    ];
    let month = utc("-d \"$(date -u +%Y-%m-01)\"");
    let next = utc("-d \"$(date -u +%Y-%m-01) +1 month\"");
    for calendar in [true, false] {
        let mut args = base.to_vec();
        if calendar {
            args.push("--calendar-months");
        }
        let s = Sluice::start(&[("bill.yaml", rules)], &args);
        wait_ready(&s);
        let mut c = s.client().await;
        let value = if calendar { "cal" } else { "thirty" };
        let r = ask(&mut c, "bill", &[("plan", value)]).await;
        let now = utc("");
        let (start, end) = if calendar {
            (month, next)
        } else {
            (
                now / 2_592_000 * 2_592_000,
                now / 2_592_000 * 2_592_000 + 2_592_000,
            )
        };
        let key = format!("bill_plan_{value}_{start}");
        assert_eq!(
            redis.cli(&["get", &key]).trim(),
            "1",
            "{:?}",
            redis.counter_keys()
        );
        let ttl: u64 = redis.cli(&["ttl", &key]).trim().parse().expect("ttl");
        assert!(
            (end - now).saturating_sub(2) <= ttl && ttl <= end - now + 6,
            "calendar={calendar}: expires in {ttl}s, the window ends in {}s",
            end - now
        );
        let reset = r.statuses[0]
            .duration_until_reset
            .as_ref()
            .expect("reset")
            .seconds;
        let reset = u64::try_from(reset).expect("positive");
        assert!(
            (end - now).saturating_sub(2) <= reset && reset <= end - now + 1,
            "calendar={calendar}: reset in {reset}s, the window ends in {}s",
            end - now
        );
    }
}
