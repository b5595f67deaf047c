//! `make soak`'s second part: hostile volume beside an honest load above its
//! limit, on two sluice instances sharing one redis-server. The attackers:
//! - silent: thousands of TCP connections that never speak (127.0.0.2), and
//!   hundreds on the admin ports;
//! - slow bodies: HTTP/2 streams that send 65,000-byte messages but their
//!   last byte (127.0.0.3), reopened when closed;
//! - quota: RLQS streams that never send (127.0.0.4);
//! - flood: h2load, 64 connections x 100 streams against each instance.
//!
//! The honest client (127.0.0.5) spends one key, limited to VOLUME_LIMIT per
//! minute, at VOLUME_RATE per second across both instances with Envoy's
//! 20 ms deadline. Reported: admitted per whole minute window against the
//! limit (goal 1.02x), breaker trips (goal 0), honest answers within 20 ms,
//! shed and late, peak RSS and descriptors. VOLUME_SECONDS (180) bounds it.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/proc.rs"]
mod proc;
#[path = "support/shared.rs"]
mod shared;

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::redis::RedisServer;
use common::{Sluice, eventually, metric};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use proc::{env_or, fds, rss_kib};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rules(limit: u64) -> String {
    format!(
        "domain: vol\ndescriptors:\n  - key: shared\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n  - key: flood\n    rate_limit: {{unit: second, requests_per_unit: 1000000000}}\n"
    )
}

fn from(ip: [u8; 4]) -> tokio::net::TcpSocket {
    let s = tokio::net::TcpSocket::new_v4().expect("socket");
    let _ = s.bind(SocketAddr::from((ip, 0)));
    s
}

/// Keeps `n` silent connections open to `to` until `stop`.
async fn silent(to: SocketAddr, n: usize, stop: Arc<AtomicBool>) {
    let mut held = Vec::new();
    while !stop.load(Relaxed) {
        // Drop what sluice closed (a read of 0 bytes, or an error).
        held.retain(|s: &tokio::net::TcpStream| {
            let mut b = [0u8; 1];
            matches!(s.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        while held.len() < n && !stop.load(Relaxed) {
            match from([127, 0, 0, 2]).connect(to).await {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One connection of half-sent 65,000-byte bodies, reopened when closed.
async fn slow_bodies(to: SocketAddr, streams: u32, stop: Arc<AtomicBool>) {
    let message = vec![0u8; 65_000];
    while !stop.load(Relaxed) {
        let Ok(mut t) = from([127, 0, 0, 3]).connect(to).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut out = common::h2raw::preface();
        common::h2raw::frame(&mut out, 0x4, 0x1, 0, &[]);
        let _ = t.write_all(&out).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 0..streams {
            let mut one = Vec::new();
            common::h2raw::call(&mut one, 1 + 2 * i, &to.to_string(), &message);
            let headers =
                9 + (usize::from(one[0]) << 16 | usize::from(one[1]) << 8 | usize::from(one[2]));
            let mut frames = one[..headers].to_vec();
            for chunk in one[headers + 9..one.len() - 1].chunks(16_384) {
                common::h2raw::frame(&mut frames, 0x0, 0, 1 + 2 * i, chunk);
            }
            if t.write_all(&frames).await.is_err() {
                break;
            }
        }
        // Hold it, reading (and so answering nothing), until sluice closes it.
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Relaxed) {
            match tokio::time::timeout(Duration::from_millis(500), t.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
        }
    }
}

/// `n` quota streams that never send, reopened when ended.
async fn silent_quota(to: SocketAddr, n: usize, stop: Arc<AtomicBool>) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{to}"))
        .expect("endpoint")
        .local_address(Some(IpAddr::from([127, 0, 0, 4])))
        .connect_lazy();
    while !stop.load(Relaxed) {
        let mut open = Vec::new();
        for _ in 0..n {
            let mut c = RateLimitQuotaServiceClient::new(channel.clone());
            let never = futures_util::stream::pending();
            if let Ok(r) = c.stream_rate_limit_quotas(never).await {
                open.push(r.into_inner());
            }
        }
        // Wait until sluice ends them, then open again.
        for mut s in open {
            let _ = tokio::time::timeout(Duration::from_secs(30), s.message()).await;
        }
    }
}

fn h2load(to: SocketAddr, seconds: u64, body: &std::path::Path) -> Child {
    shared::h2load(
        &["-t1", "-c64", "-m100", "-D", &seconds.to_string()],
        body,
        to,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("h2load (make soak installs nghttp2-client)")
}

/// What the honest client saw.
#[derive(Default)]
struct Honest {
    sent: AtomicU64,
    within_20ms: AtomicU64,
    shed: AtomicU64,
    late: AtomicU64,
    other: AtomicU64,
    /// Admitted per minute window (epoch minute -> count), small.
    admitted: parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>,
    /// Shed or late per minute: what an Envoy failing open admits besides.
    undecided: parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>,
}

fn minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

async fn honest(targets: [SocketAddr; 2], rate: u64, seconds: u64, h: Arc<Honest>) {
    let clients: Vec<_> = targets
        .iter()
        .map(|t| {
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{t}"))
                .expect("endpoint")
                .local_address(Some(IpAddr::from([127, 0, 0, 5])))
                .connect_lazy();
            RateLimitServiceClient::new(ch)
        })
        .collect();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0usize;
    while Instant::now() < end {
        tick.tick().await;
        n += 1;
        let mut c = clients[n % 2].clone();
        let h = h.clone();
        tokio::spawn(async move {
            let mut req = tonic::Request::new(common::request(
                "vol",
                vec![common::descriptor(&[("shared", "k")])],
            ));
            req.set_timeout(Duration::from_millis(20));
            let started = Instant::now();
            h.sent.fetch_add(1, Relaxed);
            match c.should_rate_limit(req).await {
                Ok(r) => {
                    if started.elapsed() <= Duration::from_millis(20) {
                        h.within_20ms.fetch_add(1, Relaxed);
                    }
                    if r.get_ref().overall_code == common::OK {
                        *h.admitted.lock().entry(minute()).or_default() += 1;
                    }
                }
                Err(e) if e.code() == tonic::Code::Unavailable => {
                    h.shed.fetch_add(1, Relaxed);
                    *h.undecided.lock().entry(minute()).or_default() += 1;
                }
                Err(e)
                    if matches!(
                        e.code(),
                        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                    ) =>
                {
                    h.late.fetch_add(1, Relaxed);
                    *h.undecided.lock().entry(minute()).or_default() += 1;
                }
                Err(_) => {
                    h.other.fetch_add(1, Relaxed);
                }
            }
        });
    }
}

fn main() {
    let seconds = env_or("VOLUME_SECONDS", 180);
    let rate = env_or("VOLUME_RATE", 20);
    let limit = env_or("VOLUME_LIMIT", 600);
    let redis = RedisServer::start();
    let args = [
        "--redis-url",
        &redis.url(),
        "--log-level",
        "warn,sluice=info",
    ];
    let a = Sluice::start(&[("vol.yaml", &rules(limit))], &args);
    let b = Sluice::start(&[("vol.yaml", &rules(limit))], &args);
    for s in [&a, &b] {
        assert!(eventually(Duration::from_secs(10), || s.readyz()["store"]
            ["healthy"]
            == true));
    }
    let body = tempfile::NamedTempFile::new().expect("tmp");
    let msg = common::request("vol", vec![common::descriptor(&[("flood", "x")])]).encode_to_vec();
    std::fs::write(body.path(), shared::frame(msg)).expect("body");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let h = Arc::new(Honest::default());
    println!(
        "volume: {seconds}s, honest {rate}/s on a limit of {limit}/min across two instances, beside the attackers\n"
    );
    let floods = attack(&rt, [&a, &b], seconds, body.path(), &stop);
    // The honest client on a runtime of its own, so the attackers' writes
    // in this process never delay it: what it sees late, sluice made late.
    let honest_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let load = honest_rt.spawn(honest([a.grpc, b.grpc], rate, seconds, h.clone()));
    let (peak_rss, peak_fds) = sample(&a, &b, seconds);
    let _ = honest_rt.block_on(load);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Relaxed);
    for mut f in floods {
        let _ = f.kill();
        let _ = f.wait();
    }
    report(&a, &b, &h, limit, peak_rss, peak_fds);
    rt.shutdown_timeout(Duration::from_secs(2));
    honest_rt.shutdown_timeout(Duration::from_secs(2));
}

/// The attackers on `rt`, against each instance: silent connections on
/// both ports, slow bodies, silent quota streams, and an h2load flood (the
/// floods returned).
fn attack(
    rt: &tokio::runtime::Runtime,
    instances: [&Sluice; 2],
    seconds: u64,
    body: &std::path::Path,
    stop: &Arc<AtomicBool>,
) -> Vec<Child> {
    let mut floods = Vec::new();
    for s in instances {
        // This process's descriptors (ulimit -n, often 1024) bound how many
        // it can hold: it reopens what sluice closes, so sluice sees a
        // stream of new silent connections, not one batch.
        rt.spawn(silent(s.grpc, 2000, stop.clone()));
        rt.spawn(silent(s.admin, 200, stop.clone()));
        for _ in 0..4 {
            rt.spawn(slow_bodies(s.grpc, 1000, stop.clone()));
        }
        rt.spawn(silent_quota(s.grpc, 1024, stop.clone()));
        floods.push(h2load(s.grpc, seconds, body));
    }
    floods
}

/// A row of both instances' RSS, descriptors, trips, sheds and evictions
/// every 10 s; the peak RSS (KiB) and descriptors.
fn sample(a: &Sluice, b: &Sluice, seconds: u64) -> (u64, usize) {
    println!("| t (s) | RSS a / b (MiB) | fds a / b | trips a / b | shed a / b | evicted a / b |");
    println!("|---|---|---|---|---|---|");
    let (mut peak_rss, mut peak_fds) = (0u64, 0usize);
    let started = Instant::now();
    while started.elapsed().as_secs() < seconds {
        std::thread::sleep(Duration::from_secs(10));
        let m: Vec<String> = [a, b].iter().map(|s| s.get("/metrics").1).collect();
        let get = |i: usize, name: &str| metric(&m[i], name).unwrap_or(0.0);
        let rss = [rss_kib(a.pid()), rss_kib(b.pid())];
        let fd = [fds(a.pid()).0, fds(b.pid()).0];
        peak_rss = peak_rss.max(rss[0]).max(rss[1]);
        peak_fds = peak_fds.max(fd[0]).max(fd[1]);
        let shed = "sluice_bound_hits_total{bound=\"shed\"}";
        let evicted = "sluice_bound_hits_total{bound=\"grpc_connection_evicted\"}";
        println!(
            "| {} | {:.0} / {:.0} | {} / {} | {} / {} | {} / {} | {} / {} |",
            started.elapsed().as_secs(),
            rss[0] as f64 / 1024.0,
            rss[1] as f64 / 1024.0,
            fd[0],
            fd[1],
            get(0, "sluice_store_circuit_trips_total"),
            get(1, "sluice_store_circuit_trips_total"),
            get(0, shed),
            get(1, shed),
            get(0, evicted),
            get(1, evicted),
        );
    }
    (peak_rss, peak_fds)
}

fn report(a: &Sluice, b: &Sluice, h: &Honest, limit: u64, peak_rss: u64, peak_fds: usize) {
    let windows = h.admitted.lock().clone();
    // The first and last minutes are partial: report the whole ones.
    let whole: Vec<(u64, u64)> = windows
        .iter()
        .skip(1)
        .take(windows.len().saturating_sub(2))
        .map(|(m, n)| (*m, *n))
        .collect();
    println!(
        "\nadmitted on the shared key per whole minute (limit {limit}), and with what an Envoy failing open adds (shed or late):"
    );
    let undecided = h.undecided.lock().clone();
    for (m, n) in &whole {
        let open = n + undecided.get(m).copied().unwrap_or(0);
        println!(
            "- minute {m}: {n} ({:.3}x); failing open {open} ({:.3}x)",
            *n as f64 / limit as f64,
            open as f64 / limit as f64
        );
    }
    let worst = whole.iter().map(|(_, n)| *n).max().unwrap_or(0);
    println!(
        "worst window: {:.3}x the limit (goal 1.02x)",
        worst as f64 / limit as f64
    );
    let sent = h.sent.load(Relaxed);
    println!(
        "honest: {sent} sent, {} answered within 20 ms, {} shed (UNAVAILABLE), {} late, {} other",
        h.within_20ms.load(Relaxed),
        h.shed.load(Relaxed),
        h.late.load(Relaxed),
        h.other.load(Relaxed),
    );
    for (name, s) in [("a", a), ("b", b)] {
        let m = s.get("/metrics").1;
        let get = |k: &str| metric(&m, k).unwrap_or(0.0);
        println!(
            "{name}: trips {}, fallback decisions {}, shed {}, abandoned {}, evicted {}, handshake timeouts {}, body timeouts {}, body bytes {}, quota silent {}, quota peer refusals {}",
            get("sluice_store_circuit_trips_total"),
            get("sluice_store_policy_decisions_total{policy=\"fallback\"}"),
            get("sluice_bound_hits_total{bound=\"shed\"}"),
            get("sluice_bound_hits_total{bound=\"abandoned\"}"),
            get("sluice_bound_hits_total{bound=\"grpc_connection_evicted\"}"),
            get("sluice_bound_hits_total{bound=\"handshake_timeout\"}"),
            get("sluice_bound_hits_total{bound=\"body_timeout\"}"),
            get("sluice_bound_hits_total{bound=\"body_bytes\"}"),
            get("sluice_bound_hits_total{bound=\"quota_silent_stream\"}"),
            get("sluice_bound_hits_total{bound=\"quota_peer_streams\"}"),
        );
    }
    println!(
        "peak RSS {:.1} MiB, peak descriptors {peak_fds}",
        peak_rss as f64 / 1024.0
    );
}
