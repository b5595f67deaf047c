//! Usage-based limits end to end: two real Envoys running the shipped
//! `envoy/usage.yaml`, each asking its own sluice, both sluices counting the
//! shipped `descriptors/usage.yaml` in one real Redis, in front of the
//! LLM-style upstream (`envoy/llm.py`) that says in a response header what
//! each response cost.

mod common;
#[path = "usage/concurrency.rs"]
mod concurrency;
#[path = "usage/debt.rs"]
mod debt;
#[path = "usage/settlement.rs"]
mod settlement;
#[path = "usage/versions.rs"]
mod versions;

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use common::redis::{RedisServer, free_port};
use common::stack::{room_in_window, spawn_envoy, start_script};
use common::{Sluice, eventually, metric, workspace};

/// The budget of descriptors/usage.yaml, tokens per minute per key.
const BUDGET: u64 = 1000;

struct Fleet {
    envoys: Vec<(Child, u16)>,
    llm: (Child, u16),
    sluices: Vec<Sluice>,
    _redis: RedisServer,
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (e, _) in &mut self.envoys {
            let _ = e.kill();
            let _ = e.wait();
        }
        let _ = self.llm.0.kill();
        let _ = self.llm.0.wait();
    }
}

/// What a client saw: the status and its Retry-After.
#[derive(Debug, Clone, Copy)]
struct Seen {
    status: u16,
    retry_after: Option<u64>,
}

impl Fleet {
    /// The shipped rules, with concurrency raised out of the way of bursts.
    fn start() -> Fleet {
        Fleet::start_with(|rules| rules.replace("max_in_flight: 5", "max_in_flight: 100"))
    }

    /// The shipped configs, with `descriptors/usage.yaml` passed through `edit`.
    fn start_with(edit: impl Fn(&str) -> String) -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = RedisServer::start();
        let url = redis.url();
        let rules = dir.path().join("descriptors");
        std::fs::create_dir(&rules).expect("mkdir");
        let shipped = std::fs::read_to_string(workspace().join("descriptors/usage.yaml"))
            .expect("descriptors/usage.yaml");
        let edited = edit(&shipped);
        assert_ne!(edited, shipped, "the edit found nothing to change");
        std::fs::write(rules.join("usage.yaml"), edited).expect("rules");
        let sluices: Vec<Sluice> = (0..2)
            .map(|_| Sluice::start_in(&rules, &["--redis-url", &url, "--redis-timeout", "150ms"]))
            .collect();
        for s in &sluices {
            assert!(
                eventually(Duration::from_secs(10), || s.readyz()["status"] == "ready"),
                "{:?}",
                s.readyz()
            );
        }
        let llm = start_script("envoy/llm.py");
        let envoys = sluices
            .iter()
            .enumerate()
            .map(|(i, s)| usage_envoy(dir.path(), i, s.grpc, llm.1))
            .collect();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let fleet = Fleet {
            envoys,
            llm,
            sluices,
            _redis: redis,
            agent,
            _dir: dir,
        };
        for i in 0..2 {
            assert!(
                eventually(Duration::from_secs(30), || fleet
                    .try_post(
                        i,
                        "/v1/chat/hello",
                        &[("x-api-key", "warmup"), ("x-tokens", "0")]
                    )
                    .is_some_and(|s| s.status == 200)),
                "envoy {i} never came up"
            );
        }
        fleet
    }

    fn try_post(&self, envoy: usize, path: &str, headers: &[(&str, &str)]) -> Option<Seen> {
        let port = self.envoys.get(envoy)?.1;
        let mut req = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{port}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self.agent.run(req.body(String::new()).ok()?).ok()?;
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let status = resp.status().as_u16();
        // The whole stream, so that it has ended when this returns.
        let _ = resp.into_body().read_to_string();
        Some(Seen {
            status,
            retry_after,
        })
    }

    fn post(&self, envoy: usize, path: &str, headers: &[(&str, &str)]) -> Seen {
        self.try_post(envoy, path, headers)
            .unwrap_or_else(|| panic!("POST {path}: no answer from envoy {envoy}"))
    }

    /// `n` requests at once, alternating Envoys, those that reach the model
    /// held there until `held` are in flight and the rest answered: how many
    /// got 200. Nothing ends before every check was made, however slowly
    /// the requests start.
    fn held(&self, n: usize, held: usize, path: &str, headers: &[(&str, &str)]) -> usize {
        let mut headers = headers.to_vec();
        headers.push(("x-hold", "1"));
        self.gate("shut");
        let answered = AtomicUsize::new(0);
        let (settled, statuses) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (headers, answered) = (&headers, &answered);
                    s.spawn(move || {
                        let status = self.post(i % 2, path, headers).status;
                        answered.fetch_add(1, Relaxed);
                        status
                    })
                })
                .collect();
            let settled = eventually(Duration::from_secs(10), || {
                answered.load(Relaxed) >= n - held && self.llm("now") >= held as u64
            });
            self.gate("open");
            let statuses: Vec<u16> = handles
                .into_iter()
                .map(|h| h.join().expect("request"))
                .collect();
            (settled, statuses)
        });
        let ok = statuses.iter().filter(|s| **s == 200).count();
        assert!(
            settled,
            "{ok} of {n} passed ({statuses:?}), not {held} held and the rest answered"
        );
        ok
    }

    fn gate(&self, to: &str) {
        let url = format!("http://127.0.0.1:{}/gate/{to}", self.llm.1);
        assert!(self.agent.get(url).call().is_ok(), "gate {to}");
    }

    /// A rule's counter summed over both sluices (`total_hits` or `refunded_hits`).
    fn counted(&self, counter: &str, rule: &str) -> u64 {
        self.sluices
            .iter()
            .map(|s| {
                let series =
                    format!("sluice_rule_{counter}_total{{domain=\"usage\",rule=\"{rule}\"}}");
                metric(&s.get("/metrics").1, &series).unwrap_or(0.0) as u64
            })
            .sum()
    }

    /// What the model says of its streams: `now` open, `served` so far.
    fn llm(&self, field: &str) -> u64 {
        let r = self
            .agent
            .get(format!("http://127.0.0.1:{}/in-flight", self.llm.1))
            .call()
            .expect("llm /in-flight");
        let v: serde_json::Value =
            serde_json::from_str(&r.into_body().read_to_string().expect("body")).expect("json");
        v[field].as_u64().expect("a count")
    }

    /// Requests that reached the upstream so far.
    fn served(&self) -> u64 {
        self.llm("served")
    }
}

/// Envoy `i` of the fleet, on `envoy/usage.yaml` rendered for `sluice` and
/// the model on `llm_port`: the process and its port.
fn usage_envoy(dir: &Path, i: usize, sluice: std::net::SocketAddr, llm_port: u16) -> (Child, u16) {
    let port = free_port();
    let config = dir.join(format!("envoy{i}.yaml"));
    let rendered = Command::new("python3")
        .arg(workspace().join("envoy/stack.py"))
        .arg("render")
        .arg("--config")
        .arg(workspace().join("envoy/usage.yaml"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin", &format!("127.0.0.1:{}", free_port())])
        .args(["--sluice", &sluice.to_string()])
        .args(["--upstream", &format!("127.0.0.1:{}", llm_port)])
        .arg("--out")
        .arg(&config)
        .status()
        .expect("python3 envoy/stack.py render");
    assert!(rendered.success());
    let log = dir.join(format!("envoy{i}.log"));
    (spawn_envoy(&config, &log), port)
}

/// What envoy/usage.yaml needs: its charges after the response
/// (`apply_on_stream_done` in `RateLimitPerRoute`) are sent from Envoy 1.40;
/// 1.38 and 1.39 load the config and never send them, 1.36 and 1.37 refuse
/// it (`is_negative_hits`).
const USAGE_ENVOY: (u32, u32) = (1, 40);

const AFTER: &str = "tokens_after.api_key";
const RESERVED: &str = "tokens_reserved.api_key";

#[test]
fn a_budget_charged_after_each_response_holds_within_one_responses_cost() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let fleet = Fleet::start();
    room_in_window(60, 25);
    let cost = 300;
    let headers = [("x-api-key", "team-a"), ("x-tokens", "300")];
    let mut spent = 0;
    let mut passed = 0;
    // Alternate Envoys (and so sluices): one budget across the fleet.
    for i in 0..4 {
        let seen = fleet.post(i % 2, "/v1/chat/completions", &headers);
        // A request passes while what was spent is at most the budget
        // (checked with hits_addend 0, spending nothing); the one that
        // crosses it completes.
        assert_eq!(seen.status, 200, "request {i} with {spent} spent");
        passed += 1;
        spent += cost;
        // Charged when its stream ended: wait for the charge to land.
        assert!(
            eventually(Duration::from_secs(10), || fleet
                .counted("total_hits", AFTER)
                == spent),
            "charged {} of {spent}",
            fleet.counted("total_hits", AFTER)
        );
    }
    assert!(spent > BUDGET && spent <= BUDGET + cost, "{spent}");
    // Later requests: 429 with a Retry-After within the minute, on both.
    for envoy in 0..2 {
        let seen = fleet.post(envoy, "/v1/chat/completions", &headers);
        assert_eq!(seen.status, 429, "{seen:?}");
        let wait = seen.retry_after.expect("Retry-After");
        assert!((1..=60).contains(&wait), "{wait}");
    }
    // A refused request reached nothing upstream and was charged nothing.
    assert_eq!(fleet.counted("total_hits", AFTER), spent);
    assert_eq!(passed, 4);
    // Another key's budget is untouched.
    let other = fleet.post(1, "/v1/chat/completions", &[("x-api-key", "team-b")]);
    assert_eq!(other.status, 200);
}

/// Ten concurrent requests of one key, each held in flight: charged after
/// the response they all pass and overspend by far; reserved at request time
/// only what fits passes, and the fleet overspends by no more than the
/// difference between use and estimate.
#[test]
fn reserving_then_settling_bounds_what_concurrent_requests_overspend() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let fleet = Fleet::start();
    room_in_window(60, 30);
    let burst = |path: &str, key: &str, extra: &[(&str, &str)], held: usize| {
        let mut headers = vec![("x-api-key", key)];
        headers.extend_from_slice(extra);
        fleet.held(10, held, path, &headers)
    };
    // Charged after: every check passes before anything is charged.
    let passed = burst("/v1/chat/completions", "after", &[("x-tokens", "240")], 10);
    assert_eq!(passed, 10, "the overspend reserving prevents");
    assert!(eventually(Duration::from_secs(10), || fleet
        .counted("total_hits", AFTER)
        == 2400));

    // Reserved: 200 each fits five times in 1000.
    let before = fleet.served();
    let estimate = [("x-max-tokens", "200"), ("x-tokens", "240")];
    let passed = burst("/v1/reserved/chat/completions", "reserved", &estimate, 5);
    assert_eq!(passed, 5);
    assert_eq!(fleet.served() - before, 5, "exactly five reached the model");
    // Settled: every estimate given back (the refused ones' too: a window
    // counts a refused reservation, and its stream-done refund returns it),
    // and five uses charged.
    assert!(
        eventually(Duration::from_secs(10), || fleet
            .counted("refunded_hits", RESERVED)
            == 2000),
        "{}",
        fleet.counted("refunded_hits", RESERVED)
    );
    // Spent now: 5 x 240 = 1200, over by 5 x (240 - 200) = 200 at most.
    assert!(eventually(Duration::from_secs(10), || fleet
        .counted("total_hits", RESERVED)
        == 10 * 200 + 5 * 240));
    let after = fleet.post(
        0,
        "/v1/reserved/chat/completions",
        &[("x-api-key", "reserved"), ("x-max-tokens", "1")],
    );
    assert_eq!(after.status, 429, "the key is spent");
    // Without an estimate there is nothing to reserve: turned away.
    let bare = fleet.post(
        1,
        "/v1/reserved/chat/completions",
        &[("x-api-key", "reserved")],
    );
    assert_eq!(bare.status, 400);
}
