//! The link's pulse, taken beside each instance: a ping every [`EVERY_MS`]
//! on a connection of the harness's own through that instance's proxy
//! (the same thread carries the instance's connections, `proxy.rs`), and
//! each silence of [`STALL_MS`] or more recorded as a stall of that
//! instance's link.
//!
//! sluice puts a wait down to its store only when a call has gone
//! unanswered, with none answered since, for at least `QUIET` (100 ms)
//! beyond its own lateness ("Stores and failure"). A store, or a link,
//! that answers nothing that long is at fault whatever the reason (a host
//! too loaded to run it included), and a trip it causes is no violation; a
//! trip with the link's pulse steady is.
//!
//! The pulse measures as sluice does, on a clock of its own that may run
//! late: pings are sent without waiting for answers, and a silence runs
//! from the later of the oldest ping owed and the last answer, to the last
//! time a read began and found nothing. So a pulse thread kept off a core proves no
//! silence it did not see, and a trip then counts against sluice. It may
//! read a silence short by [`RESOLUTION_MS`], so a silence that long less
//! that is a stall.
//!
//! The pulse runs on Redis and memcached; on a Sentinel or a Cluster
//! (masters that move) it is not taken, so any trip there with the store
//! healthy counts against sluice.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::history::{Shared, Stall, now_ms};
use super::store::Backend;

/// A silence this long is a stall: sluice's `QUIET`.
pub const STALL_MS: u64 = 100;
const EVERY_MS: u64 = 2;
/// How much shorter than it was the pulse may read a silence: a ping sent
/// up to an interval after the store fell silent, and the last look that
/// proved it still silent up to two before it answered.
pub const RESOLUTION_MS: u64 = 3 * EVERY_MS;

/// Pings the store through the link on `port` (instance `instance`'s
/// proxy) until `until_ms`, recording each stall.
pub fn pulse(backend: Backend, instance: usize, port: u16, history: &Shared, until_ms: u64) {
    let ping: &[u8] = match backend {
        Backend::Memcached => b"version\r\n",
        Backend::Redis | Backend::Xds => b"PING\r\n",
        Backend::Sentinel | Backend::Cluster => return,
    };
    let mut beat = Beat::default();
    let mut conn: Option<TcpStream> = None;
    let mut next = now_ms();
    while now_ms() < until_ms {
        let Some(c) = conn.as_mut() else {
            // Refused or unreachable: a look that heard nothing.
            let at = now_ms();
            conn = connect(port);
            if conn.is_none() {
                beat.looked(at);
                std::thread::sleep(Duration::from_millis(EVERY_MS));
            }
            continue;
        };
        let now = now_ms();
        if now >= next && c.write_all(ping).is_ok() {
            beat.sent(now);
            next = now + EVERY_MS;
        }
        let wait = next.saturating_sub(now).max(1);
        let _ = c.set_read_timeout(Some(Duration::from_millis(wait)));
        let read = read_once(c, &mut beat, |stall| {
            history.lock().expect("history").stalls.push(Stall {
                instance,
                start: stall.0,
                end: stall.1,
            })
        });
        // Nothing yet, or closed without an answer (the store down behind
        // the proxy): silent still. A closed link is dialled again after a
        // ping's interval, not at once, so a store down costs no busy loop.
        if read != Found::Bytes {
            beat.looked(now);
        }
        if read == Found::Closed {
            conn = None;
            beat.lost();
            next = now;
            std::thread::sleep(Duration::from_millis(EVERY_MS));
        }
    }
}

/// One read of the link: each answer it brought is reckoned, and a stall
/// one ended is handed to `stalled`.
fn read_once(c: &mut TcpStream, beat: &mut Beat, mut stalled: impl FnMut((u64, u64))) -> Found {
    let mut buf = [0u8; 4096];
    match c.read(&mut buf) {
        Ok(0) => Found::Closed,
        Ok(n) => {
            let at = now_ms();
            for _ in buf[..n].iter().filter(|&&b| b == b'\n') {
                if let Some(stall) = beat.answered(at) {
                    stalled(stall);
                }
            }
            Found::Bytes
        }
        // Nothing had come when the read began (it would have returned
        // it), whenever its timer then fired: silent until then.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Found::Nothing,
        Err(_) => Found::Closed,
    }
}

/// What one read of the link found.
#[derive(PartialEq)]
enum Found {
    Bytes,
    Nothing,
    Closed,
}

fn connect(port: u16) -> Option<TcpStream> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_nodelay(true).ok()?;
    Some(s)
}

/// The pulse's reckoning, apart from its socket (times in ms).
#[derive(Debug, Default)]
struct Beat {
    /// When each ping still owed on this connection was sent.
    owed: VecDeque<u64>,
    /// The oldest ping a lost connection left unanswered.
    lost_since: Option<u64>,
    last_answer: u64,
    /// The last time a look found nothing.
    quiet_until: u64,
}

impl Beat {
    fn sent(&mut self, at: u64) {
        self.owed.push_back(at);
    }

    fn looked(&mut self, at: u64) {
        self.quiet_until = self.quiet_until.max(at);
    }

    /// The connection failed: its pings are owed still (a store stopped or
    /// killed does not answer), until an answer on the next one.
    fn lost(&mut self) {
        if let Some(&first) = self.owed.front() {
            self.lost_since = Some(self.lost_since.map_or(first, |l| l.min(first)));
        }
        self.owed.clear();
    }

    /// An answer read at `at`: the stall it ended, if the silence before
    /// it, as far as a look proved, was a stall's.
    fn answered(&mut self, at: u64) -> Option<(u64, u64)> {
        let sent = self.owed.pop_front()?;
        let owed = self.lost_since.take().map_or(sent, |l| l.min(sent));
        let since = owed.max(self.last_answer);
        let until = self.quiet_until;
        self.last_answer = at;
        (until >= since + STALL_MS - RESOLUTION_MS).then_some((since, until))
    }
}

#[cfg(test)]
mod tests {
    use super::{Beat, RESOLUTION_MS, STALL_MS};

    /// Pings every 2 ms from `from`, each look finding nothing, until an
    /// answer to the first at `at`.
    fn silent(beat: &mut Beat, from: u64, at: u64) -> Option<(u64, u64)> {
        for t in (from..at).step_by(2) {
            beat.sent(t);
            beat.looked(t + 2);
        }
        beat.answered(at)
    }

    #[test]
    fn a_silence_counts_only_as_far_as_a_look_proved_it() {
        let mut beat = Beat::default();
        beat.sent(0);
        assert_eq!(beat.answered(1), None, "answered at once");
        let stall = silent(&mut beat, 10, 130);
        assert_eq!(stall, Some((10, 130)), "silent 120 ms, looked at all along");
        let mut beat = Beat::default();
        assert_eq!(silent(&mut beat, 0, 90), None, "shorter than a stall");
        // The pulse's own thread off a core: it sent, looked once, then
        // read the answer 150 ms later; nothing proves the store silent.
        let mut beat = Beat::default();
        beat.sent(0);
        beat.looked(2);
        assert_eq!(beat.answered(150), None);
        let mut beat = Beat::default();
        let short = STALL_MS - RESOLUTION_MS;
        assert_eq!(silent(&mut beat, 0, short), Some((0, short)));
    }

    /// A real Redis behind two links, one gone silent for 300 ms: its
    /// pulse records a stall of about that long, for its instance only
    /// (a pulse taken straight to Redis saw nothing).
    #[test]
    fn a_silent_link_is_a_stall_of_its_instance_alone() {
        use super::super::history::{History, now_ms};
        use super::super::proxy::Proxy;
        use super::super::store::Backend;
        use std::sync::{Arc, Mutex};

        let redis = crate::common::redis::RedisServer::start();
        let links = [Proxy::start(redis.port), Proxy::start(redis.port)];
        let h = Arc::new(Mutex::new(History::default()));
        let until = now_ms() + 1_500;
        let pulses: Vec<_> = links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let (port, h) = (l.port, h.clone());
                std::thread::spawn(move || super::pulse(Backend::Redis, i, port, &h, until))
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(500));
        links[1].silence();
        std::thread::sleep(std::time::Duration::from_millis(300));
        links[1].pass();
        for p in pulses {
            p.join().expect("pulse");
        }
        let h = h.lock().expect("history");
        let stalls: Vec<_> = h
            .stalls
            .iter()
            .map(|s| (s.instance, s.end - s.start))
            .collect();
        assert!(
            matches!(stalls[..], [(1, ms)] if ms >= STALL_MS),
            "{stalls:?}"
        );
    }

    #[test]
    fn a_lost_connection_owes_its_pings_until_the_next_answers() {
        let mut beat = Beat::default();
        beat.sent(0);
        beat.looked(2);
        beat.lost();
        // Refused for a while, then a new connection answers.
        beat.looked(300);
        beat.sent(300);
        assert_eq!(beat.answered(301), Some((0, 300)));
    }
}
