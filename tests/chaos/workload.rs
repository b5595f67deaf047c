//! Clients that act like Envoys: each picks a rule, a value and a number of
//! hits (1 to 3) from the seed, sends `ShouldRateLimit` to the instances in
//! turn and records the operation. And an observer that reads each
//! instance's `/readyz` to record when its store was not in use.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

use super::fleet::{CONCURRENCY, Fleet, REFUNDABLE, RULES};
use super::history::{Answer, Degraded, Op, RefRead, Reset, Shared, Trip, now_ms};
use super::nemesis::Rng;

/// Clients at once, and the pause between one's requests.
const CLIENTS: usize = 4;
const PAUSE: Duration = Duration::from_millis(8);
/// The longest a client waits for an answer before it gives up (what an
/// Envoy's `timeout` on the ratelimit filter does).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The clients' own loopback address: Envoys other than the one h2load
/// floods from 127.0.0.1, so another peer to sluice (whose bounds are per
/// peer: sharing the flood's, an answer waited behind its 1,024 streams).
const CLIENTS_FROM: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

fn channel(fleet: &Fleet, i: usize) -> RateLimitServiceClient<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{}", fleet.instances[i].grpc))
        .expect("endpoint")
        .local_address(Some(CLIENTS_FROM.into()))
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
            let slots = fleet.backend.slots();
            while now_ms() < until_ms {
                n += 1;
                let instance = n % chans.len();
                let c = &mut chans[instance];
                let first = one(c, instance, &mut rng, slots).await;
                let admitted = first.answer == Answer::Ok;
                let (rule, value, hits, slot) =
                    (first.rule, first.value.clone(), first.hits, first.slot);
                history.lock().expect("history").ops.push(first);
                // A slot is held a while, then released; half of what a
                // refundable rule admits is given back.
                let back = if slot > 0 {
                    tokio::time::sleep(Duration::from_millis(10 + rng.below(50))).await;
                    true
                } else {
                    rule == REFUNDABLE && admitted && rng.below(2) == 0
                };
                if back {
                    let ask = Ask {
                        rule,
                        value,
                        hits,
                        refund: true,
                        slot,
                    };
                    let op = send(c, instance, ask).await;
                    history.lock().expect("history").ops.push(op);
                }
                tokio::time::sleep(PAUSE).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// What one request asks.
struct Ask {
    rule: &'static str,
    value: String,
    hits: u32,
    refund: bool,
    slot: u64,
}

/// A request on a rule the seed picks: hits on a counter, or a slot taken.
async fn one(
    c: &mut RateLimitServiceClient<Channel>,
    instance: usize,
    rng: &mut Rng,
    slots: bool,
) -> Op {
    let n = RULES.len() as u64 + u64::from(slots);
    let pick = rng.below(n) as usize;
    let value = format!("v{}", rng.below(2));
    let ask = match RULES.get(pick) {
        Some((rule, _, _)) => Ask {
            rule,
            value,
            hits: 1 + rng.below(3) as u32,
            refund: false,
            slot: 0,
        },
        None => Ask {
            rule: CONCURRENCY.0,
            value: "v0".to_owned(),
            hits: 1,
            refund: false,
            slot: 1 + rng.next() % (1 << 40),
        },
    };
    send(c, instance, ask).await
}

async fn send(c: &mut RateLimitServiceClient<Channel>, instance: usize, ask: Ask) -> Op {
    let slot = ask.slot.to_string();
    let entries: Vec<(&str, &str)> = if ask.slot > 0 {
        vec![(ask.rule, &ask.value), ("slot", &slot)]
    } else {
        vec![(ask.rule, &ask.value)]
    };
    let mut d = super::common::descriptor(&entries);
    d.is_negative_hits = ask.refund;
    let mut req = super::common::request("chaos", vec![d]);
    req.hits_addend = ask.hits;
    let sent = now_ms();
    let answer = match c.should_rate_limit(req).await {
        Ok(r) if r.get_ref().overall_code == 1 => Answer::Ok,
        Ok(_) => Answer::OverLimit,
        Err(s) => Answer::Error(s.code() as i32),
    };
    Op {
        instance,
        rule: ask.rule,
        value: ask.value,
        hits: ask.hits,
        refund: ask.refund,
        slot: ask.slot,
        sent,
        answered: now_ms(),
        answer,
    }
}

/// One HTTP/1.1 exchange with an instance's admin port that may be
/// stopped or gone: `None` then. Status and the raw answer.
fn admin_call(
    admin: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&admin, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(1_500)))
        .ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    Some((status, out))
}

/// `sluice_store_circuit_trips_total` of an instance that may be stopped
/// or gone (`None` then; 0 for a store without a breaker).
fn circuit_trips(admin: std::net::SocketAddr) -> Option<u64> {
    let (status, body) = admin_call(admin, "GET", "/metrics", "")?;
    if status != 200 {
        return None;
    }
    let line = body
        .lines()
        .find(|l| l.starts_with("sluice_store_circuit_trips_total "));
    Some(
        line.and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or(0),
    )
}

/// `/readyz` of an instance that may be stopped or gone: `None` then.
fn readyz(admin: std::net::SocketAddr) -> Option<String> {
    admin_call(admin, "GET", "/readyz", "").map(|(_, body)| body)
}

/// An operator: every 0.5 to 1.5 s (drawn from the seed) resets a counter
/// of a rule that is reached, or looks one up, through an instance in
/// turn, mid-flood, and records each reset with its span and answer.
pub fn operate(fleet: &Fleet, history: &Shared, seed: u64, until_ms: u64) {
    let mut rng = Rng::new(seed ^ 0x5eed_0f0f);
    let mut n = 0;
    while now_ms() < until_ms {
        std::thread::sleep(Duration::from_millis(500 + rng.below(1_000)));
        n += 1;
        let instance = n % fleet.instances.len();
        // `d` is never reached: its counters have nothing to reset.
        let (rule, _, _) = RULES[rng.below(3) as usize];
        let value = format!("v{}", rng.below(2));
        let reset = rng.below(3) > 0;
        let Some(admin) = fleet.admins()[instance] else {
            continue;
        };
        let body = format!(
            r#"{{"domain":"chaos","descriptors":[{{"entries":[{{"key":"{rule}","value":"{value}"}}]}}]}}"#
        );
        let path = if reset {
            "/api/counters/reset"
        } else {
            "/api/counters"
        };
        let sent = now_ms();
        let status = admin_call(admin, "POST", path, &body).map_or(0, |(s, _)| s);
        let answered = now_ms();
        let mut h = history.lock().expect("history");
        if reset {
            h.resets.push(Reset {
                instance,
                rule,
                value,
                sent,
                answered,
                status,
            });
        } else {
            h.lookups.0 += 1;
            h.lookups.1 += u64::from(status == 200);
        }
    }
}

/// Reads each instance's `/readyz` and breaker trips every 100 ms until
/// `until_ms`, and records the spans in which one said `degraded` and
/// each trip.
pub fn observe(fleet: &Fleet, history: &Shared, until_ms: u64) {
    let mut open: Vec<Option<u64>> = vec![None; fleet.instances.len()];
    // Each instance's last reading of its trips: (when, how many).
    let mut trips: Vec<Option<(u64, u64)>> = vec![None; fleet.instances.len()];
    while now_ms() < until_ms {
        for (i, admin) in fleet.admins().into_iter().enumerate() {
            let Some(admin) = admin else { continue };
            if let Some(count) = circuit_trips(admin) {
                let now = now_ms();
                // Fewer than before: the instance restarted, and each trip
                // since is new.
                let new =
                    trips[i].map_or(0, |(_, was)| if count < was { count } else { count - was });
                if let (Some((after, _)), true) = (trips[i], new > 0) {
                    let trip = Trip {
                        instance: i,
                        after,
                        by: now,
                    };
                    history.lock().expect("history").trips.push(trip);
                }
                trips[i] = Some((now, count));
            }
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
        if fleet.backend == super::store::Backend::Sentinel {
            let port = fleet.store.lock().expect("store").port();
            let mut h = history.lock().expect("history");
            if h.masters.last().is_none_or(|(_, p)| *p != port) {
                h.masters.push((now_ms(), port));
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
            let port = fleet.store.lock().expect("store").port();
            // A shadow rule's key holds refused hits too, a refundable
            // one's fewer: the plain rules only.
            for (rule, _, len) in RULES[..4].iter().filter(|r| r.2 == 1_000) {
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
