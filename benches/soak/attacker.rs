//! The attacker that runs beside the soak's honest load, each attack bounded
//! by the soak's own duration:
//! - poison: requests whose hits_addend is 2^63 (refused at the edge) and a
//!   counter pushed toward overflow with the largest allowed hits;
//! - no-read: HTTP/2 connections, written by hand, that open streams as fast
//!   as the socket takes them and never read a byte;
//! - idle: a thousand TCP connections that never speak;
//! - flood: `sluice bench` over a hundred million distinct keys on a day-long
//!   rule.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use prost::Message;

use super::common::h2raw;

/// What the attacker did, for the soak's report.
#[derive(Default)]
pub struct Tally {
    pub poison_sent: AtomicU64,
    pub poison_refused: AtomicU64,
    pub noread_streams: AtomicU64,
    pub noread_connections: AtomicU64,
    pub idle_held: AtomicU64,
}

pub struct Attacker {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    flood: Child,
    pub tally: Arc<Tally>,
}

impl Attacker {
    pub fn start(grpc: SocketAddr, domain: &str, seconds: u64) -> Attacker {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut threads = Vec::new();
        let (s, t, d) = (stop.clone(), tally.clone(), domain.to_owned());
        threads.push(std::thread::spawn(move || {
            poison(grpc, &d, deadline, &s, &t)
        }));
        let (s, t) = (stop.clone(), tally.clone());
        threads.push(std::thread::spawn(move || no_read(grpc, deadline, &s, &t)));
        let (s, t) = (stop.clone(), tally.clone());
        threads.push(std::thread::spawn(move || idle(grpc, &s, &t)));
        let flood = Command::new(super::common::sluice_bin())
            .args([
                "bench",
                "--target",
                &grpc.to_string(),
                "--domain",
                domain,
                "--json",
            ])
            .args(["--descriptor", "flood=x{n}", "--keys", "100000000"])
            .args(["--rate", "1000", "--duration", &format!("{seconds}s")])
            .stdout(Stdio::null())
            .spawn()
            .expect("sluice bench (flood)");
        Attacker {
            stop,
            threads,
            flood,
            tally,
        }
    }

    pub fn stop(mut self) -> Arc<Tally> {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = self.flood.kill();
        let _ = self.flood.wait();
        self.tally
    }
}

fn request(domain: &str, key: &str, value: &str, hits: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            hits_addend: Some(UInt64Value { value: hits }),
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

fn poison(grpc: SocketAddr, domain: &str, deadline: Instant, stop: &AtomicBool, t: &Tally) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let Ok(mut c) = RateLimitServiceClient::connect(format!("http://{grpc}")).await else {
            return;
        };
        let mut i = 0u64;
        while !stop.load(Relaxed) && Instant::now() < deadline {
            i += 1;
            let hits = if i.is_multiple_of(2) {
                1 << 63
            } else {
                u64::from(u32::MAX)
            };
            t.poison_sent.fetch_add(1, Relaxed);
            if c.should_rate_limit(request(domain, "ip", "poison", hits))
                .await
                .is_err()
            {
                t.poison_refused.fetch_add(1, Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

fn no_read(grpc: SocketAddr, deadline: Instant, stop: &AtomicBool, t: &Tally) {
    let message = request("soak", "ip", "noread", 1).encode_to_vec();
    while !stop.load(Relaxed) && Instant::now() < deadline {
        let Ok(mut s) = TcpStream::connect(grpc) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        t.noread_connections.fetch_add(1, Relaxed);
        s.set_write_timeout(Some(Duration::from_secs(2))).ok();
        let mut out = h2raw::preface();
        let mut stream = 1u32;
        // Until the server stops taking bytes or closes: never read.
        while !stop.load(Relaxed) && Instant::now() < deadline && stream < 200_001 {
            for _ in 0..100 {
                h2raw::call(&mut out, stream, &grpc.to_string(), &message);
                stream += 2;
            }
            if s.write_all(&out).is_err() {
                break;
            }
            t.noread_streams.fetch_add(100, Relaxed);
            out.clear();
        }
    }
}

/// Whether the server still holds `s` open.
fn alive(s: &TcpStream) -> bool {
    s.set_nonblocking(true).ok();
    let mut buf = [0u8; 1];
    match std::io::Read::read(&mut &*s, &mut buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

fn idle(grpc: SocketAddr, stop: &AtomicBool, t: &Tally) {
    let mut held: Vec<TcpStream> = Vec::new();
    while !stop.load(Relaxed) {
        // Reopen what the server closed, up to a thousand.
        held.retain(alive);
        while held.len() < 1000 {
            match TcpStream::connect(grpc) {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
        t.idle_held.store(held.len() as u64, Relaxed);
        std::thread::sleep(Duration::from_secs(1));
    }
}
