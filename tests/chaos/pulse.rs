//! The link's pulse, taken beside each instance: the common pulse
//! (`common/pulse.rs`) on a connection of the harness's own through that
//! instance's proxy (the same thread carries the instance's connections,
//! `proxy.rs`), each stall recorded as a stall of that instance's link.
//!
//! The pulse runs on Redis and memcached; on a Sentinel or a Cluster
//! (masters that move) it is not taken, so any trip there with the store
//! healthy counts against sluice.

use crate::common::pulse::{MEMCACHED_PING, REDIS_PING};
pub use crate::common::pulse::{RESOLUTION_MS, STALL_MS};

use super::history::{Shared, Stall};
use super::store::Backend;

/// Pings the store through the link on `port` (instance `instance`'s
/// proxy) until `until_ms`, recording each stall.
pub fn pulse(backend: Backend, instance: usize, port: u16, history: &Shared, until_ms: u64) {
    let ping = match backend {
        Backend::Memcached => MEMCACHED_PING,
        Backend::Redis | Backend::Xds => REDIS_PING,
        Backend::Sentinel | Backend::Cluster => return,
    };
    let going = || crate::common::pulse::now_ms() < until_ms;
    crate::common::pulse::pulse(ping, port, going, |start, end| {
        let stall = Stall {
            instance,
            start,
            end,
        };
        history.lock().expect("history").stalls.push(stall)
    });
}

#[cfg(test)]
mod tests {
    use super::{RESOLUTION_MS, STALL_MS};
    use crate::common::pulse::Beat;

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
