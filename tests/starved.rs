//! A store that hangs while sluice itself is starved of CPU, on a real
//! redis-server: sluice's own lateness must never hide a store that answers
//! no one. The starvation is a CPU quota's: the test stops and continues
//! sluice on a cycle (run 20 ms, stopped 40 ms, as a pod throttled to a
//! third of a core), so every thread of it runs late by tens of
//! milliseconds, more than the default `--redis-timeout` of 20 ms.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 3}
";

/// Stops and continues a process on a cycle until dropped (then leaves it
/// running).
struct Throttle {
    pid: u32,
    on: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Throttle {
    fn start(pid: u32, run: Duration, stopped: Duration) -> Throttle {
        let on = Arc::new(AtomicBool::new(true));
        let thread = std::thread::spawn({
            let on = on.clone();
            move || {
                while on.load(Relaxed) {
                    send_signal(pid, "STOP");
                    std::thread::sleep(stopped);
                    send_signal(pid, "CONT");
                    std::thread::sleep(run);
                }
            }
        });
        Throttle {
            pid,
            on,
            thread: Some(thread),
        }
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.on.store(false, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        send_signal(self.pid, "CONT");
    }
}

/// What one call on a fresh key came to.
#[derive(Debug, Default)]
struct Seen {
    shed: usize,
    decided: usize,
}

async fn ask_fresh(
    c: &mut envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
    i: usize,
    seen: &mut Seen,
) {
    let key = format!("fresh-{i}");
    let mut req = tonic::Request::new(request("shop", vec![descriptor(&[("ip", &key)])]));
    // Envoy's deadline, generous: the stalls must not be what answers.
    req.set_timeout(Duration::from_secs(5));
    match c.should_rate_limit(req).await {
        Ok(r) => {
            assert_eq!(r.get_ref().overall_code, OK, "a fresh key is admitted");
            seen.decided += 1;
        }
        Err(s) if is_shed(&s) => seen.shed += 1,
        Err(s) => panic!("call {i}: {s:?}"),
    }
}

/// Redis killed, restarted, then stopped with SIGSTOP (a stuck primary),
/// while sluice runs a third of the time: the outage is found out (the
/// breaker opens, `/readyz` says degraded) within the silence bound plus
/// the waits that trip it, stretched by the throttle, and from then on every
/// request is decided by `--store-failure` (fallback: admitted and counted
/// in memory), never shed. Before the fix every timeout was read as
/// sluice's own lateness while it ran late, and requests were shed for as
/// long as the starvation lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_is_found_out_while_sluice_is_starved_of_cpu() {
    let mut redis = RedisServer::start();
    let s = Sluice::start(&[("shop.yaml", RULES)], &["--redis-url", &redis.url()]);
    let ready = || s.status() == "ready";
    assert!(
        eventually(Duration::from_secs(10), ready),
        "{:?}",
        s.readyz()
    );
    redis.restart();
    let mut c = s.client().await;
    let mut seen = Seen::default();
    let mut i = 0;
    // sluice learns of the restart from its next call, and comes back to
    // the new Redis: asked until it counts there again.
    let back = Instant::now();
    while !ready() || redis.counter_keys().is_empty() {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "back after the restart: {:?}",
            s.readyz()
        );
        i += 1;
        ask_fresh(&mut c, i, &mut seen).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let throttle = Throttle::start(
        s.pid(),
        Duration::from_millis(20),
        Duration::from_millis(40),
    );
    redis.signal("STOP");
    let hung = Instant::now();
    // The bound sluice states: the silence bound (1 s) and the few waits
    // that trip the breaker, in sluice's time; the throttle gives it a
    // third of wall time, and a loaded host less again.
    let bound = Duration::from_secs(20);
    while s.status() != "degraded" {
        assert!(
            hung.elapsed() < bound,
            "a stopped Redis was not found out in {bound:?} ({seen:?}): {:?}",
            s.readyz()
        );
        i += 1;
        ask_fresh(&mut c, i, &mut seen).await;
    }
    let found = hung.elapsed();
    // Found out: every request is decided by the policy, none shed.
    let before = seen.shed;
    for _ in 0..20 {
        i += 1;
        ask_fresh(&mut c, i, &mut seen).await;
    }
    assert_eq!(
        seen.shed, before,
        "shed after the outage was found: {seen:?}"
    );
    assert!(
        s.readyz()["store"]["in_use"] == "memory-fallback",
        "{:?}",
        s.readyz()
    );
    drop(throttle);
    eprintln!("found out after {found:?}: {seen:?}");
    redis.signal("CONT");
    assert!(
        eventually(Duration::from_secs(10), ready),
        "back after SIGCONT: {:?}",
        s.readyz()
    );
}
