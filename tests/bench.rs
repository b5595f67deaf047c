//! `sluice bench` against a real sluice: every request is answered and
//! counted as the limits say.

mod common;

use std::process::Command;

use common::{Sluice, sluice_bin};

const RULES: &str = "
domain: bench
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
";

fn bench(s: &Sluice, args: &[&str]) -> serde_json::Value {
    let out = Command::new(sluice_bin())
        .args([
            "bench",
            "--target",
            &s.grpc.to_string(),
            "--domain",
            "bench",
            "--json",
        ])
        .args(args)
        .output()
        .expect("sluice bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one line of JSON")
}

#[test]
fn closed_loop_counts_every_answer() {
    let s = Sluice::start(&[("bench.yaml", RULES)], &[]);
    // 5 keys, 10 requests each, a limit of 3 per key.
    let v = bench(
        &s,
        &[
            "--descriptor",
            "ip=10.0.0.{n}",
            "--keys",
            "5",
            "--requests",
            "50",
            "--concurrency",
            "8",
        ],
    );
    assert_eq!(v["requests"], 50);
    assert_eq!(v["ok"], 15);
    assert_eq!(v["over_limit"], 35);
    assert_eq!(v["errors"], 0);
    assert!(v["p50_us"].as_u64().unwrap() <= v["p99_us"].as_u64().unwrap());
}

#[test]
fn open_loop_sends_at_the_rate_asked() {
    let s = Sluice::start(&[("bench.yaml", RULES)], &[]);
    let v = bench(
        &s,
        &[
            "--descriptor",
            "ip=fresh{n}",
            "--keys",
            "1000",
            "--rate",
            "200",
            "--duration",
            "1s",
        ],
    );
    assert_eq!(v["requests"], 200, "{v}");
    assert_eq!(v["ok"], 200);
}

#[test]
fn an_unreachable_target_is_an_error_not_a_report() {
    let out = Command::new(sluice_bin())
        .args([
            "bench",
            "--target",
            "127.0.0.1:1",
            "--descriptor",
            "k=v",
            "--requests",
            "1",
        ])
        .output()
        .expect("sluice bench");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect to 127.0.0.1:1"));
}

#[test]
fn samples_give_every_request_its_due_time_in_order() {
    let s = Sluice::start(&[("bench.yaml", RULES)], &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("samples");
    let v = bench(
        &s,
        &[
            "--descriptor",
            "ip=due{n}",
            "--keys",
            "1000",
            "--rate",
            "100",
            "--duration",
            "1s",
            "--samples",
            path.to_str().expect("a path in UTF-8"),
        ],
    );
    let text = std::fs::read_to_string(&path).expect("the samples file");
    let rows: Vec<(u64, u64)> = text
        .lines()
        .map(|l| {
            let (due, latency) = l.split_once(' ').expect("two fields");
            (due.parse().expect("due"), latency.parse().expect("latency"))
        })
        .collect();
    assert_eq!(rows.len(), 100, "{v}");
    assert!(rows.windows(2).all(|w| w[0].0 <= w[1].0), "in due order");
    // At 100 a second request i is due i * 10 ms from the start.
    assert_eq!(rows[50].0 / 1000, 500, "{:?}", rows[50]);
    let slowest = rows.iter().map(|r| r.1).max().unwrap_or_default();
    assert_eq!(slowest, v["max_us"].as_u64().unwrap_or_default());
}
