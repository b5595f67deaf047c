//! The store's pulse, taken beside the fleet: a ping every 10 ms on a
//! connection of the harness's own, straight to the store (no proxy), and
//! each round trip of [`STALL_MS`] or more recorded as a stall.
//!
//! sluice puts a wait down to its store only when a call has gone
//! unanswered, with none answered since, for at least `QUIET` (100 ms)
//! beyond its own lateness ("Stores and failure"). A store that answers
//! nothing that long is at fault whatever the reason, a host too loaded to
//! run it included, and a trip it causes is no violation; a trip with the
//! store's pulse steady is. The pulse runs on Redis and memcached; on a
//! Sentinel or a Cluster (masters that move) it is not taken, so any trip
//! there with the store healthy counts against sluice.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::history::{Shared, now_ms};
use super::store::Backend;

/// A round trip this long is a stall: sluice's `QUIET`.
pub const STALL_MS: u64 = 100;
const EVERY: Duration = Duration::from_millis(10);

/// Pings the store at `port` until `until_ms`, recording each stall.
pub fn pulse(backend: Backend, port: u16, history: &Shared, until_ms: u64) {
    let ping: &[u8] = match backend {
        Backend::Memcached => b"version\r\n",
        Backend::Redis | Backend::Xds => b"PING\r\n",
        Backend::Sentinel | Backend::Cluster => return,
    };
    let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
    while now_ms() < until_ms {
        std::thread::sleep(EVERY);
        let sent = now_ms();
        let started = Instant::now();
        // A store stopped or killed does not answer: the time until it
        // does (or the connection fails) is its stall all the same.
        let answered = conn.as_mut().is_some_and(|c| round_trip(c, ping));
        if !answered {
            conn = connect(port);
        }
        let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if took >= STALL_MS {
            let mut h = history.lock().expect("history");
            h.stalls.push((sent, sent + took));
        }
    }
}

fn connect(port: u16) -> Option<(TcpStream, BufReader<TcpStream>)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_nodelay(true).ok()?;
    let r = BufReader::new(s.try_clone().ok()?);
    Some((s, r))
}

fn round_trip((w, r): &mut (TcpStream, BufReader<TcpStream>), ping: &[u8]) -> bool {
    let mut line = String::new();
    w.write_all(ping).is_ok() && r.read_line(&mut line).is_ok_and(|n| n > 0)
}
