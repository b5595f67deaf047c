//! A store's pulse, taken from beside sluice: a ping every [`EVERY_MS`] on
//! a connection of the test's own (straight to the store, or through the
//! proxy an instance's connections take), and each silence of
//! [`STALL_MS`] or more handed back as a stall. The fault harness
//! (`chaos/pulse.rs`) and the CPU-flood tests (`starved.rs`) both take it.
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

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A silence this long is a stall: sluice's `QUIET`.
pub const STALL_MS: u64 = 100;
const EVERY_MS: u64 = 2;
/// How much shorter than it was the pulse may read a silence: a ping sent
/// up to an interval after the store fell silent, and the last look that
/// proved it still silent up to two before it answered.
pub const RESOLUTION_MS: u64 = 3 * EVERY_MS;

/// The ping Redis answers in one line.
pub const REDIS_PING: &[u8] = b"PING\r\n";
/// The ping memcached answers in one line.
pub const MEMCACHED_PING: &[u8] = b"version\r\n";

/// Wall-clock milliseconds, the unit every stall is given in.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sends `ping` (answered in one line) to the store on `port` while
/// `going()` says so, handing each stall to `stalled` as (start, end) in ms.
pub fn pulse(ping: &[u8], port: u16, going: impl Fn() -> bool, mut stalled: impl FnMut(u64, u64)) {
    let mut beat = Beat::default();
    let mut conn: Option<TcpStream> = None;
    let mut next = now_ms();
    while going() {
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
        let read = read_once(c, &mut beat, |(start, end)| stalled(start, end));
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

/// The pulses of several stores, each on a thread of its own, taken
/// until [`Watch::stalls`] is asked for or the watch is dropped (a test
/// that panicked leaves no thread pinging a port another test may take).
pub struct Watch {
    pulses: Vec<std::thread::JoinHandle<Vec<(u64, u64)>>>,
    done: Arc<AtomicBool>,
}

/// Takes the pulse of each store on `ports` (answering `ping`).
pub fn watch(ping: &'static [u8], ports: &[u16]) -> Watch {
    let done = Arc::new(AtomicBool::new(false));
    let one = |port: u16| {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut stalls = Vec::new();
            let going = || !done.load(Ordering::Relaxed);
            pulse(ping, port, going, |start, end| stalls.push((start, end)));
            stalls
        })
    };
    let pulses = ports.iter().map(|&port| one(port)).collect();
    Watch { pulses, done }
}

impl Watch {
    /// Ends the pulses: every stall any of the stores had, as (start, end)
    /// in ms.
    pub fn stalls(mut self) -> Vec<(u64, u64)> {
        self.done.store(true, Ordering::Relaxed);
        let pulses = std::mem::take(&mut self.pulses);
        let joined = pulses.into_iter().map(|p| p.join().expect("pulse"));
        joined.flatten().collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
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

/// The pulse's reckoning, apart from its socket (times in ms); its tests
/// are the fault harness's (`chaos/pulse.rs`), run once.
#[derive(Debug, Default)]
pub struct Beat {
    /// When each ping still owed on this connection was sent.
    owed: VecDeque<u64>,
    /// The oldest ping a lost connection left unanswered.
    lost_since: Option<u64>,
    last_answer: u64,
    /// The last time a look found nothing.
    quiet_until: u64,
}

impl Beat {
    pub fn sent(&mut self, at: u64) {
        self.owed.push_back(at);
    }

    pub fn looked(&mut self, at: u64) {
        self.quiet_until = self.quiet_until.max(at);
    }

    /// The connection failed: its pings are owed still (a store stopped or
    /// killed does not answer), until an answer on the next one.
    pub fn lost(&mut self) {
        if let Some(&first) = self.owed.front() {
            self.lost_since = Some(self.lost_since.map_or(first, |l| l.min(first)));
        }
        self.owed.clear();
    }

    /// An answer read at `at`: the stall it ended, if the silence before
    /// it, as far as a look proved, was a stall's.
    pub fn answered(&mut self, at: u64) -> Option<(u64, u64)> {
        let sent = self.owed.pop_front()?;
        let owed = self.lost_since.take().map_or(sent, |l| l.min(sent));
        let since = owed.max(self.last_answer);
        let until = self.quiet_until;
        self.last_answer = at;
        (until >= since + STALL_MS - RESOLUTION_MS).then_some((since, until))
    }
}
