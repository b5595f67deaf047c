//! Clients that act like Envoys: each picks a rule, a value and a number of
//! hits (1 to 3) from the seed, sends `ShouldRateLimit` to the instances in
//! turn and records the operation. And an observer that reads each
//! instance's `/readyz` to record when its store was not in use.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::fleet::{Fleet, RULES};
use super::history::{Answer, Degraded, Op, RefRead, Shared, now_ms};
use super::nemesis::Rng;

/// Clients at once, and the pause between one's requests.
const CLIENTS: usize = 4;
const PAUSE: Duration = Duration::from_millis(8);
/// The longest a client waits for an answer before it gives up (what an
/// Envoy's `timeout` on the ratelimit filter does).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

fn channel(fleet: &Fleet, i: usize) -> RateLimitServiceClient<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{}", fleet.instances[i].grpc))
        .expect("endpoint")
        .connect_timeout(Duration::from_millis(500))
        .timeout(CLIENT_TIMEOUT);
    RateLimitServiceClient::new(endpoint.connect_lazy())
}

/// Runs the clients until `until_ms`.
pub async fn clients(fleet: Arc<Fleet>, history: Shared, seed: u64, until_ms: u64) {
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (fleet, history) = (fleet.clone(), history.clone());
        let mut rng = Rng::new(seed ^ (0x9e37_79b9 * (c as u64 + 1)));
        tasks.push(tokio::spawn(async move {
            let mut chans: Vec<_> = (0..fleet.instances.len())
                .map(|i| channel(&fleet, i))
                .collect();
            let mut n = c;
            while now_ms() < until_ms {
                n += 1;
                let instance = n % chans.len();
                let op = one(&mut chans[instance], instance, &mut rng).await;
                history.lock().expect("history").ops.push(op);
                tokio::time::sleep(PAUSE).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn one(c: &mut RateLimitServiceClient<Channel>, instance: usize, rng: &mut Rng) -> Op {
    let (rule, _, _) = RULES[rng.below(RULES.len() as u64) as usize];
    let value = format!("v{}", rng.below(2));
    let hits = 1 + rng.below(3) as u32;
    let mut req =
        super::common::request("chaos", vec![super::common::descriptor(&[(rule, &value)])]);
    req.hits_addend = hits;
    let sent = now_ms();
    let answer = match c.should_rate_limit(req).await {
        Ok(r) if r.get_ref().overall_code == 1 => Answer::Ok,
        Ok(_) => Answer::OverLimit,
        Err(s) => Answer::Error(s.code() as i32),
    };
    Op {
        instance,
        rule,
        value,
        hits,
        sent,
        answered: now_ms(),
        answer,
    }
}

/// `/readyz` of an instance that may be stopped or gone: `None` then.
fn readyz(admin: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&admin, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    write!(
        s,
        "GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Reads each instance's `/readyz` every 100 ms until `until_ms`, and
/// records the spans in which one said `degraded`.
pub fn observe(fleet: &Fleet, history: &Shared, until_ms: u64) {
    let mut open: Vec<Option<u64>> = vec![None; fleet.instances.len()];
    while now_ms() < until_ms {
        for (i, admin) in fleet.admins().into_iter().enumerate() {
            let Some(admin) = admin else { continue };
            let body = readyz(admin).unwrap_or_default();
            let degraded = body.contains("\"degraded\"");
            let now = now_ms();
            match (open[i], degraded) {
                (None, true) => open[i] = Some(now),
                (Some(start), false) if !body.is_empty() => {
                    history.lock().expect("history").degraded.push(Degraded {
                        instance: i,
                        start,
                        end: now,
                    });
                    open[i] = None;
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let now = now_ms();
    for (i, start) in open.into_iter().enumerate() {
        if let Some(start) = start {
            history.lock().expect("history").degraded.push(Degraded {
                instance: i,
                start,
                end: now,
            });
        }
    }
}

/// Under `--key-format envoyproxy`: reads each one-second counter's key in
/// the store, as a reference instance would, once its window has ended.
pub fn read_reference(fleet: &Fleet, history: &Shared, until_ms: u64) {
    let mut next = now_ms() / 1_000 * 1_000;
    while now_ms() < until_ms {
        std::thread::sleep(Duration::from_millis(100));
        // Read a window 400 ms after it ends (answers in flight have landed),
        // well before its key expires.
        while next + 1_400 <= now_ms() {
            let port = fleet.redis.lock().expect("redis").port;
            for (rule, _, len) in RULES.iter().filter(|r| r.2 == 1_000) {
                for value in ["v0", "v1"] {
                    let key = format!("chaos_{rule}_{value}_{}", next / len);
                    let reply = super::common::redis::command(port, &format!("GET {key}"));
                    let count = reply
                        .as_deref()
                        .and_then(|r| r.lines().nth(1))
                        .and_then(|n| n.trim().parse().ok());
                    let read = RefRead {
                        rule,
                        value: value.to_owned(),
                        window: next,
                        count,
                    };
                    history.lock().expect("history").reference.push(read);
                }
            }
            next += 1_000;
        }
    }
}
