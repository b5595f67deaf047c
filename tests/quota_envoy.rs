//! Quota mode end to end: real Envoys running the shipped `envoy/rlqs.yaml`
//! report to sluice and enforce the token buckets it assigns; a real Redis
//! shares one budget between sluice instances.
//!
//! Each test warms its bucket first (one request per Envoy, then waits until
//! sluice has assigned every Envoy its share), because the shipped config
//! admits a key's requests until its first assignment arrives
//! (`no_assignment_behavior: ALLOW_ALL`, one round trip); the floods then
//! measure what the assignments let through. Floods are paced (100/s per
//! Envoy, far above every share) so two cores can run them.

mod common;

use std::time::Duration;

use common::quota::{QuotaEnvoy, Tally, Upstream, partner_rules, quota_metric};
use common::redis::RedisServer;
use common::{Sluice, eventually};

/// 120 per 20s: 6 per second across the fleet.
const LIMIT: u64 = 120;
const WINDOW: u64 = 20;

fn warm(sluices: &[&Sluice], envoys: &[&QuotaEnvoy], key: &str) {
    for e in envoys {
        e.get(key);
    }
    let want = envoys.len() as f64;
    assert!(
        eventually(Duration::from_secs(15), || {
            sluices
                .iter()
                .map(|s| quota_metric(s, "sluice_quota_envoys"))
                .sum::<f64>()
                >= want
        }),
        "not every Envoy reported the bucket"
    );
    // Every Envoy holds its share of the split (not the whole budget it may
    // have been given while it was alone).
    assert!(
        eventually(Duration::from_secs(10), || {
            let assigned: f64 = sluices
                .iter()
                .map(|s| quota_metric(s, "sluice_quota_assigned_per_second"))
                .sum();
            assigned <= (LIMIT / WINDOW) as f64 + 0.01
        }),
        "shares never settled"
    );
    // And every Envoy has received its share: a share sluice decided but
    // had not yet sent is not held (and a killed sluice never sends it).
    assert!(
        eventually(Duration::from_secs(10), || {
            let held: Option<f64> = envoys.iter().map(|e| e.held_per_second()).sum();
            held.is_some_and(|h| h <= (LIMIT / WINDOW) as f64 + 0.01)
        }),
        "Envoys never held their shares: {:?}",
        envoys
            .iter()
            .map(|e| e.held_per_second())
            .collect::<Vec<_>>()
    );
}

/// Floods both Envoys for one window; returns what each admitted.
fn flood_both(a: &QuotaEnvoy, b: &QuotaEnvoy, key: &str) -> (u64, u64) {
    let run = Duration::from_secs(WINDOW);
    std::thread::scope(|s| {
        let ta = s.spawn(|| a.flood(key, run, Some(100.0), 2));
        let tb = s.spawn(|| b.flood(key, run, Some(100.0), 2));
        let (ta, tb) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(ta.limited() > 0 && tb.limited() > 0, "{ta:?} {tb:?}");
        assert_eq!(ta.other() + tb.other(), 0);
        (ta.ok(), tb.ok())
    })
}

/// The bound: the rule's count, plus each Envoy's burst (one second of its
/// share, its bucket starting full), plus rounding: within 10%.
fn assert_within_limit(a: u64, b: u64) {
    let total = a + b;
    let low = LIMIT * 85 / 100;
    let high = LIMIT * 110 / 100;
    assert!(
        (low..=high).contains(&total),
        "admitted {a} + {b} = {total} against {LIMIT}"
    );
    // An even split of an even flood.
    assert!(a.abs_diff(b) <= LIMIT / 5, "{a} vs {b}");
}

#[test]
fn two_envoys_flooded_for_a_window_stay_within_the_rule() {
    let rules = partner_rules(LIMIT as u32, "20s");
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let a = QuotaEnvoy::start(&sluice, &upstream);
    let b = QuotaEnvoy::start(&sluice, &upstream);
    warm(&[&sluice], &[&a, &b], "acme");
    let (oa, ob) = flood_both(&a, &b, "acme");
    eprintln!("one sluice: {oa} + {ob}");
    assert_within_limit(oa, ob);
    // The reported counts reach the rule's metrics.
    assert!(quota_metric(&sluice, "sluice_quota_allowed_total") >= (oa + ob - 10) as f64);
}

#[test]
fn two_sluices_on_one_redis_share_one_budget() {
    let redis = RedisServer::start();
    let rules = partner_rules(LIMIT as u32, "20s");
    // What this test checks is the sharing, with the store answering: a
    // store timeout a loaded machine's Redis always meets (with 20 ms, a
    // starved Redis is rightly found slow, the breaker opens, and each
    // sluice shares the budget as if alone, by the failure policy).
    let args = ["--redis-url", &redis.url(), "--redis-timeout", "1s"];
    let s1 = Sluice::start(&[("api.yaml", &rules)], &args);
    let s2 = Sluice::start(&[("api.yaml", &rules)], &args);
    for s in [&s1, &s2] {
        assert!(eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"));
    }
    let upstream = Upstream::start();
    let a = QuotaEnvoy::start(&s1, &upstream);
    let b = QuotaEnvoy::start(&s2, &upstream);
    warm(&[&s1, &s2], &[&a, &b], "acme");
    let (oa, ob) = flood_both(&a, &b, "acme");
    eprintln!("two sluices: {oa} + {ob}");
    assert_within_limit(oa, ob);
}

/// A busy Envoy (rate a second over its connections) beside a quiet one (one
/// connection) on `key`: 10 s for sluice to learn their demand (two
/// reports), then what each got in the `counted` seconds after.
fn side_by_side(
    (busy, busy_rate, conns): (&QuotaEnvoy, f64, usize),
    (quiet, quiet_rate): (&QuotaEnvoy, f64),
    key: &str,
    counted: u64,
) -> (Tally, Tally) {
    let run = |e: &QuotaEnvoy, rate: f64, conns: usize| {
        e.flood(key, Duration::from_secs(10), Some(rate), conns);
        e.flood(key, Duration::from_secs(counted), Some(rate), conns)
    };
    std::thread::scope(|s| {
        let tb = s.spawn(|| run(busy, busy_rate, conns));
        let tq = s.spawn(|| run(quiet, quiet_rate, 1));
        (tb.join().unwrap(), tq.join().unwrap())
    })
}

#[test]
fn skewed_demand_gives_the_busy_envoy_most_and_the_quiet_one_all_it_asks() {
    let rules = partner_rules(LIMIT as u32, "20s");
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let busy = QuotaEnvoy::start(&sluice, &upstream);
    let quiet = QuotaEnvoy::start(&sluice, &upstream);
    warm(&[&sluice], &[&busy, &quiet], "acme");
    // 9 requests per second against 1, 10 against a budget of 6. Two
    // reports (10 s) let sluice measure the demand; then 15 s are counted.
    let (b, q) = side_by_side((&busy, 9.0, 1), (&quiet, 1.0), "acme", 15);
    eprintln!("busy {b:?}, quiet {q:?}");
    assert!(b.ok() > 2 * q.ok(), "busy {} vs quiet {}", b.ok(), q.ok());
    // Busy: most of the 6/s (about 4/s by the split, the quiet Envoy's
    // claim being about twice its rate) and never more than all.
    assert!((45..=95).contains(&b.ok()), "busy admitted {}", b.ok());
    assert!(q.limited() <= 1, "the quiet Envoy was refused: {q:?}");
}

#[test]
fn a_departed_envoys_share_returns_and_a_rule_edit_reassigns_at_once() {
    let rules = partner_rules(LIMIT as u32, "20s");
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let a = QuotaEnvoy::start(&sluice, &upstream);
    let mut b = QuotaEnvoy::start(&sluice, &upstream);
    warm(&[&sluice], &[&a, &b], "acme");
    let killed = std::time::Instant::now();
    b.kill();
    // Within a few reporting intervals (5 s each), A holds the whole 6/s.
    assert!(
        eventually(Duration::from_secs(15), || {
            quota_metric(&sluice, "sluice_quota_assigned_per_second") >= 5.9
        }),
        "the departed Envoy's share never came back"
    );
    eprintln!("share back after {:?}", killed.elapsed());
    let t = a.flood("acme", Duration::from_secs(5), Some(100.0), 2);
    assert!(t.ok() >= 25, "A admitted {} in 5 s at 6/s", t.ok());
    // Doubling the rule: new assignments within one reporting interval.
    std::fs::write(
        sluice.dir().join("api.yaml"),
        partner_rules(2 * LIMIT as u32, "20s"),
    )
    .unwrap();
    let edited = std::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || {
            quota_metric(&sluice, "sluice_quota_assigned_per_second") >= 11.9
        }),
        "the edit was not reassigned"
    );
    eprintln!("edit assigned after {:?}", edited.elapsed());
    let t = a.flood("acme", Duration::from_secs(5), Some(100.0), 2);
    assert!(t.ok() >= 50, "A admitted {} in 5 s at 12/s", t.ok());
}

/// The case that refused a quarter of a well-behaved client's requests: 120
/// per minute (2/s), one Envoy at 18/s and one at 0.5/s. After two reports
/// (10 s) to learn the demand, 60 s are counted: the quiet Envoy gets at
/// least 29 of its 30 through; the busy one what the quiet one's claim (its
/// rate and a deviation, about 0.7/s) leaves, at least three quarters of
/// the 90 the quiet one does not use (75 measured; 60 before claims lost
/// their second deviation and Envoy's whole-second intervals were read by
/// our clock);
/// and the fleet stays within the rule plus the buckets' bursts.
#[test]
fn a_quiet_envoy_under_its_share_is_not_refused_beside_a_busy_one() {
    let rules = partner_rules(120, "60s");
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let busy = QuotaEnvoy::start(&sluice, &upstream);
    let quiet = QuotaEnvoy::start(&sluice, &upstream);
    warm(&[&sluice], &[&busy, &quiet], "partner-q");
    let (b, q) = side_by_side((&busy, 18.0, 2), (&quiet, 0.5), "partner-q", 60);
    eprintln!("busy {b:?}, quiet {q:?}");
    assert!(
        q.limited() <= q.ok() / 30,
        "the quiet Envoy was refused: {q:?}"
    );
    assert!(q.ok() >= 28, "the quiet Envoy sent too little: {q:?}");
    assert_eq!(b.other() + q.other(), 0);
    // 120 in 60 s for the fleet; each bucket holds at most 6 more.
    assert!(b.ok() + q.ok() <= 120 + 12, "{b:?} {q:?}");
    let rest = 120 - q.ok();
    assert!(b.ok() * 4 >= rest * 3, "the busy Envoy got {b:?} of {rest}");
}

/// A client that sends a new x-api-key with every request gets no budget
/// from it: an unknown key is refused (401) before any bucket is made, and
/// a forged x-partner-id beside a real key changes nothing, so the partner's
/// budget holds and no bucket places are taken.
#[test]
fn rotating_the_api_key_buys_nothing() {
    let rules = partner_rules(30, "60s");
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let envoy = QuotaEnvoy::start(&sluice, &upstream);
    warm(&[&sluice], &[&envoy], "initech");
    let buckets = quota_metric(&sluice, "sluice_quota_envoys");
    for i in 0..50 {
        assert_eq!(envoy.get(&format!("rotated-{i}")), 401, "key {i}");
    }
    assert_eq!(
        quota_metric(&sluice, "sluice_quota_envoys"),
        buckets,
        "no new buckets"
    );
    // The partner's own budget: 30 a minute whatever else it sends.
    let forged = envoy.flood_with("initech", &[("x-partner-id", "someone-else")], 60);
    assert!(forged.limited() > 0, "{forged:?}");
    assert!(forged.ok() <= 30 + 6, "{forged:?}");
    assert_eq!(
        quota_metric(&sluice, "sluice_quota_envoys"),
        buckets,
        "still one bucket"
    );
    // Cycling keys from one IP runs into its per-IP budget before a key is
    // even checked. The shipped bucket (100 a second, bursts of 200) is
    // only reached by a sender faster than a loaded test machine always
    // is, so this Envoy holds each IP to 20 an hour: the bound, not the
    // machine's speed, decides.
    let shipped = "token_bucket: {max_tokens: 200, tokens_per_fill: 100, fill_interval: 1s}";
    let small = |text: &str| {
        assert!(text.contains(shipped), "the shipped per-IP bucket moved");
        text.replace(
            shipped,
            "token_bucket: {max_tokens: 20, tokens_per_fill: 20, fill_interval: 3600s}",
        )
    };
    let bounded = QuotaEnvoy::start_with(&sluice, &upstream, small);
    let statuses: Vec<u16> = (0..100)
        .map(|i| bounded.get(&format!("fast-{i}")))
        .collect();
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "no per-IP bound");
    assert!(
        statuses.iter().filter(|s| **s == 401).count() <= 20,
        "{statuses:?}"
    );
}

/// A sluice restart with two Envoys attached: the new instance learns the
/// fleet before it assigns (the Envoys keep enforcing what they hold
/// meanwhile), so neither reconnecting Envoy is handed the whole budget,
/// and a flood across the restart stays within the rule plus the bursts.
#[test]
fn a_restarted_sluice_learns_the_fleet_before_it_reassigns() {
    let rules = partner_rules(LIMIT as u32, "20s");
    let mut old = Sluice::start(&[("api.yaml", &rules)], &[]);
    let upstream = Upstream::start();
    let a = QuotaEnvoy::start(&old, &upstream);
    let b = QuotaEnvoy::start(&old, &upstream);
    warm(&[&old], &[&a, &b], "acme");
    let grpc = old.grpc.to_string();
    let dir = old.dir().to_path_buf();
    old.signal("KILL");
    old.wait(Duration::from_secs(10));
    let new = Sluice::start_at(&dir, &grpc, &["--quota-learning", "10s"]);
    assert!(
        new.readyz()["quota"]["learning_seconds_left"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
    let (oa, ob) = flood_both(&a, &b, "acme");
    eprintln!("across a restart: {oa} + {ob}");
    assert_within_limit(oa, ob);
    // Learned, then assigned: both Envoys report to the new instance.
    assert!(eventually(Duration::from_secs(15), || quota_metric(
        &new,
        "sluice_quota_envoys"
    ) >= 2.0));
    drop(old);
}
