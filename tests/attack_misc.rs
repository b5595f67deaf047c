//! Hostile volume and hostile files: a flood of distinct keys stays within
//! --max-counters without resetting a spent client's counter, a rule
//! directory full of symlink loops loads at once and never holds shutdown,
//! a dangling rule link keeps the last good rules, concurrent reloads
//! coalesce, and detailed metrics stay small.

mod common;

use std::time::{Duration, Instant};

use common::*;

const RULES: &str = "
domain: web
descriptors:
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: user
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 5}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_keys_is_bounded_and_resets_nobody() {
    let s = Sluice::start(&[("web.yaml", RULES)], &["--max-counters", "640"]);
    let mut c = s.client().await;
    for _ in 0..5 {
        assert_eq!(
            ask(&mut c, "web", &[("ip", "spent")]).await.overall_code,
            OK
        );
    }
    // Ten times the bound in fresh addresses, as an IPv6 client could send.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let mut c = c.clone();
            tokio::spawn(async move {
                for i in 0..800 {
                    ask(&mut c, "web", &[("ip", &format!("2001:db8::{t}:{i}"))]).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        ask(&mut c, "web", &[("ip", "spent")]).await.overall_code,
        OVER,
        "the spent client's counter survived the flood"
    );
    assert!(eventually(Duration::from_secs(5), || {
        let m = s.get("/metrics").1;
        let live = metric(&m, "sluice_memory_counters").unwrap_or(0.0);
        let evicted = metric(&m, "sluice_memory_counter_evictions_total").unwrap_or(0.0);
        live > 0.0 && live <= 640.0 && evicted >= 5000.0
    }));
}

#[cfg(unix)]
#[test]
fn symlink_loops_load_at_once_and_never_hold_shutdown() {
    let dir = config_dir(&[("web.yaml", RULES)]);
    for name in ["a", "b", "c", "d"] {
        std::os::unix::fs::symlink(".", dir.path().join(name)).unwrap();
    }
    let mut s = Sluice::start_in(dir.path(), &["--shutdown-grace", "2s"]);
    let (_, text) = s.get("/readyz");
    assert!(text.contains("\"status\":\"ready\""), "{text}");
    let (code, body) = s.post("/reload", "");
    assert_eq!(code, 200, "{body}");
    s.signal("TERM");
    let started = Instant::now();
    assert!(s.wait(Duration::from_secs(10)).success());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[cfg(unix)]
#[tokio::test]
async fn a_dangling_rule_link_keeps_the_last_good_rules() {
    let s = Sluice::start(&[("web.yaml", RULES)], &["--no-watch"]);
    let mut c = s.client().await;
    // The domain's file becomes a link to nowhere, as a half-done ConfigMap
    // swap or a deleted target leaves it.
    std::fs::remove_file(s.dir().join("web.yaml")).unwrap();
    std::fs::write(s.dir().join("other.yaml"), "domain: other\n").unwrap();
    std::os::unix::fs::symlink(s.dir().join("gone.yaml"), s.dir().join("web.yaml")).unwrap();
    let (code, body) = s.post("/reload", "");
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("web.yaml"), "{body}");
    let (_, ready) = s.get("/readyz");
    assert!(ready.contains("dangling"), "{ready}");
    // The domain keeps its limits instead of answering OK to everything.
    for _ in 0..5 {
        ask(&mut c, "web", &[("ip", "d")]).await;
    }
    assert_eq!(ask(&mut c, "web", &[("ip", "d")]).await.overall_code, OVER);
}

#[tokio::test]
async fn concurrent_reloads_coalesce() {
    let files: Vec<(String, String)> = (0..300)
        .map(|i| (format!("d{i}.yaml"), format!("domain: d{i}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let s = Sluice::start(&refs, &["--no-watch", "--log-level", "debug"]);
    let admin = s.admin;
    let threads: Vec<_> = (0..40)
        .map(|_| std::thread::spawn(move || http(admin, "POST", "/reload", "").0))
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    let loads = s
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("config unchanged"))
        .count();
    eprintln!("{loads} reloads for 40 requests");
    assert!(loads < 40, "{loads} reloads ran for 40 requests");
}

#[tokio::test]
async fn detailed_metric_labels_stay_small() {
    let s = Sluice::start(
        &[("web.yaml", RULES)],
        &[
            "--max-detailed-metrics",
            "50",
            "--max-metric-label-bytes",
            "64",
        ],
    );
    let mut c = s.client().await;
    let long = "x".repeat(1000);
    for i in 0..200 {
        ask(&mut c, "web", &[("user", &format!("{long}{i}"))]).await;
        ask(&mut c, "web", &[("user", &format!("u{i}"))]).await;
    }
    let m = s.get("/metrics").1;
    assert!(!m.contains(&long[..100]), "long values never become labels");
    let series = m
        .lines()
        .filter(|l| l.starts_with("sluice_rule_total_hits_total{domain=\"web\""))
        .count();
    assert!(series <= 55, "{series} series");
    assert!(m.len() < 64 * 1024, "{} bytes", m.len());
}
